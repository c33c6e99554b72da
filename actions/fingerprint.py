"""The plan fingerprint: SHA-256 over the canonical JSON of what the executor relies on.

Anything that changes what would be written, where, under which definition, for whom
or under which policy changes the fingerprint, so an approval of one plan can never
be spent on another.
"""

from __future__ import annotations

from typing import Any

from .lib.canonical import canonical_bytes, sha256_hex

FINGERPRINT_VERSION = 1


def fingerprint_document(
    *,
    action_name: str,
    action_version: int,
    action_digest: str,
    agent_id: str,
    target: dict[str, Any],
    input: dict[str, Any],
    after: Any,
    precondition: dict[str, Any],
    policy: dict[str, Any],
    write_request: dict[str, Any],
    requester: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``requester``: the person the agent acts for (``requester_part``), or None. A plan
    proposed by the agent alone has no ``requester`` key at all, so its document is the
    one every plan had before on-behalf-of existed, and stored fingerprints still match."""
    document = {
        "fingerprint_version": FINGERPRINT_VERSION,
        "action": {"name": action_name, "version": action_version, "digest": action_digest},
        "agent": agent_id,
        "target": target,
        "input": input,
        "after": after,
        "precondition": precondition,
        "policy": policy,
        "write": write_request,
    }
    if requester is not None:
        document["requester"] = requester
    return document


def requester_part(requester: dict[str, Any] | None) -> dict[str, Any] | None:
    """What of a plan's requester is fingerprinted: who they are at which provider, and
    their groups (sorted); not their display name or e-mail, which may change."""
    if not requester:
        return None
    return {
        "iss": requester["iss"],
        "sub": requester["sub"],
        "groups": sorted(requester.get("groups") or []),
    }


def fingerprint(document: dict[str, Any]) -> tuple[str, str]:
    """Return (canonical text, hex digest)."""
    data = canonical_bytes(document)
    return data.decode("utf-8"), sha256_hex(data)


def plan_fingerprint_document(plan) -> dict[str, Any]:
    """Rebuild the document from a stored plan's columns (not from ``plan.canonical``)."""
    return fingerprint_document(
        action_name=plan.action.name,
        action_version=plan.action_version,
        action_digest=plan.action_digest,
        agent_id=str(plan.agent_id),
        target=plan.target,
        input=plan.input,
        after=plan.after,
        precondition=plan.precondition,
        policy=plan.policy,
        write_request=plan.write_request,
        requester=requester_part(plan.requester),
    )


def plan_fingerprint_matches(plan) -> bool:
    """Recompute from the columns; True only if it equals both stored hash and bytes."""
    text, digest = fingerprint(plan_fingerprint_document(plan))
    return digest == plan.fingerprint and text == plan.canonical
