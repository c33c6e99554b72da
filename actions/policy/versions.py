"""The policy set in force: its versions, the one change that makes a new version, and
the compiled set each process keeps.

A version is made only by loading a catalog file whose ``policies:`` section changes
the text of either part (``policy_set_replace``, inside the load's transaction): the
number goes up by one, the hash names the new text, the diff against the version
before is kept (bounded) and the change is audited (``policy.changed``: who, version,
hash, diff). The newest version is the set in force. Each process compiles it once per
catalog generation (``policies_in_force``; the table's trigger changes the generation,
as an action's change does): parsed PolicySet handles and the Cedar schema, so an
evaluation never parses anything.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from django.db import transaction

from ..cache import cached
from ..lib.audit import audit_record
from ..models import Action, PolicyVersion
from .engine import (
    CompiledPolicies,
    PolicySetInvalid,
    policies_broken,
    policies_compile,
    policies_uncompiled,
)
from .sources import ENFORCE, SHADOW, policy_ids, set_hash

MAX_DIFF_LINES = 400
MAX_DIFF_CHARS = 20_000


def policy_version_current() -> PolicyVersion | None:
    return PolicyVersion.objects.order_by("-number").first()


def policy_diff(
    old: Mapping[str, str], new: Mapping[str, str], *, old_name: str, new_name: str
) -> str:
    """A unified diff of both parts, cut after MAX_DIFF_LINES lines or MAX_DIFF_CHARS
    characters (the full texts of both versions are kept; the diff is for reading)."""
    lines: list[str] = []
    for part in (ENFORCE, SHADOW):
        lines += difflib.unified_diff(
            old.get(part, "").splitlines(keepends=True),
            new.get(part, "").splitlines(keepends=True),
            fromfile=f"{part} ({old_name})",
            tofile=f"{part} ({new_name})",
        )
    lines = [line if line.endswith("\n") else line + "\n" for line in lines]
    kept: list[str] = []
    size = 0
    for line in lines:
        if len(kept) >= MAX_DIFF_LINES or size + len(line) > MAX_DIFF_CHARS:
            kept.append(f"… {len(lines) - len(kept)} more lines of the diff not shown\n")
            break
        kept.append(line)
        size += len(line)
    return "".join(kept)


def policy_set_replace(*, enforce: str, shadow: str, actor: str) -> PolicyVersion | None:
    """Put an already validated set in force: a new version, audited, when either part's
    text differs from the set in force; None when nothing changed. Runs inside the
    caller's transaction (a catalog load)."""
    new_hash = set_hash(enforce, shadow)
    with transaction.atomic():
        # Locks the newest version: two loads at once make versions one after the other
        # (the unique number refuses the second otherwise).
        current = PolicyVersion.objects.select_for_update().order_by("-number").first()
        old = {ENFORCE: current.enforce, SHADOW: current.shadow} if current else {}
        old_hash = current.hash if current else set_hash("", "")
        if new_hash == old_hash:
            return None
        number = current.number + 1 if current else 1
        diff = policy_diff(
            old,
            {ENFORCE: enforce, SHADOW: shadow},
            old_name=f"v{current.number}" if current else "none",
            new_name=f"v{number}",
        )
        ids = {ENFORCE: policy_ids(enforce), SHADOW: policy_ids(shadow)}
        version = PolicyVersion.objects.create(
            number=number,
            enforce=enforce,
            shadow=shadow,
            hash=new_hash,
            policies=ids,
            diff=diff,
            created_by=actor,
        )
        audit_record(
            kind="policy.changed",
            actor=actor,
            data={
                "version": number,
                "hash": new_hash,
                "previous_version": current.number if current else None,
                "previous_hash": old_hash,
                "policies": ids,
                "diff": diff,
            },
        )
    return version


def _stored_actions() -> dict[str, dict[str, Any]]:
    return dict(Action.objects.values_list("name", "definition"))


def _compile_in_force() -> CompiledPolicies:
    current = policy_version_current()
    enforce, shadow = (current.enforce, current.shadow) if current else ("", "")
    number = current.number if current else 0
    if not enforce.strip() and not shadow.strip():
        # No policy: nothing to type, so the catalog's actions are not read (a catalog of
        # hundreds of imported actions would be typed on every generation for nothing).
        return policies_uncompiled(enforce=enforce, shadow=shadow, version=number)
    try:
        return policies_compile(
            enforce=enforce, shadow=shadow, actions=_stored_actions(), version=number
        )
    except PolicySetInvalid as exc:
        # Loading refuses a catalog that breaks the set in force; this is a change made
        # around the loader. Fail closed: every plan goes to a person, and says why.
        return policies_broken(
            enforce=enforce,
            shadow=shadow,
            version=number,
            problem=f"the policies in force (version {number}) do not hold with the catalog: {exc}",
        )


def policies_in_force() -> CompiledPolicies:
    """The compiled set in force, as of the current catalog generation."""
    return cached("policies_in_force", None, _compile_in_force)


def policies_draft(
    enforce: str, shadow: str = "", *, actions: Mapping[str, Mapping[str, Any]] | None = None
) -> CompiledPolicies:
    """A set given as text, compiled against the stored catalog (or ``actions``), for
    a test or a backtest. Raises PolicySetInvalid with every problem."""
    return policies_compile(
        enforce=enforce,
        shadow=shadow,
        actions=_stored_actions() if actions is None else actions,
    )
