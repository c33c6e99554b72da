"""Computing what a plan would change, by reading only.

Everything here reads the upstream through actions.lib.http.ReadOnlyClient. The same
functions serve revalidation in the worker: the version read right before writing is
computed exactly as it was for the preview.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from actions.lib.redaction import scrub_text

from .lib.canonical import CanonicalJSONError, digest, escape_pointer_token, resolve_pointer
from .lib.exceptions import CountersignError
from .lib.http import FORM_CONTENT_TYPE, UpstreamError
from .models import Action
from .spec import ActionSpec, form_pairs, markdown_block, markdown_code


class PreviewError(CountersignError):
    """The preview could not be computed; nothing was stored."""

    status = 502
    type = "upstream-read-failed"
    title = "The upstream could not be read"


class TargetNotFound(PreviewError):
    status = 404
    type = "target-not-found"
    title = "The target does not exist"


class TargetExists(PreviewError):
    status = 409
    type = "target-exists"
    title = "The target already exists"


class UpstreamEchoesSecrets(PreviewError):
    """The upstream's answer repeated a credential Countersign sent or holds. The plan is
    refused rather than shown redacted: nobody should approve a change computed from a
    read the upstream poisoned."""

    status = 502
    type = "upstream-echoes-secrets"
    title = "The upstream is echoing credentials"


class UpstreamTimeout(PreviewError):
    status = 504
    type = "upstream-timeout"
    title = "The upstream did not answer in time"


@dataclass
class ReadResult:
    exists: bool
    body: Any
    version: Any
    status: int


@dataclass
class Preview:
    target: dict[str, Any]
    before: Any
    after: Any
    changes: list[dict[str, Any]]
    precondition: dict[str, Any]
    write_request: dict[str, Any]
    summary_markdown: str


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def diff(before: Any, after: Any, pointer: str = "") -> list[dict[str, Any]]:
    """Field-level changes: objects compared key by key, anything else as a whole."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[dict[str, Any]] = []
        for key in sorted(set(before) | set(after)):
            sub = f"{pointer}/{escape_pointer_token(key)}"
            if key not in before:
                out.append({"path": sub, "op": "add", "before": None, "after": after[key]})
            elif key not in after:
                out.append({"path": sub, "op": "remove", "before": before[key], "after": None})
            else:
                out.extend(diff(before[key], after[key], sub))
        return out
    if before == after and type(before) is type(after):
        return []
    if before is None:
        return [{"path": pointer or "/", "op": "add", "before": None, "after": after}]
    if after is None:
        return [{"path": pointer or "/", "op": "remove", "before": before, "after": None}]
    return [{"path": pointer or "/", "op": "replace", "before": before, "after": after}]


def planned_after(kind: str, before: Any, body: Any) -> Any:
    """What the target would be after a change of ``kind`` that sends ``body`` (the
    rendered write body) to the target as read (``before``; None when nothing is read)."""
    if kind == "update":
        return merge_patch(before, body)
    if kind in ("replace", "create", "invoke"):
        return body
    return None  # delete: nothing is left; read: nothing changes


def planned_change(spec: ActionSpec, values: dict[str, Any], before: Any) -> tuple[Any, list]:
    """(after, changes) of a plan of ``spec`` on a validated input, given the target as
    read, computed as the preview computes them, without any network: for policy tests
    and for anything that already holds ``before``."""
    if spec.kind == "read":
        return None, []
    if spec.kind in ("create", "invoke"):
        before = None
    after = planned_after(spec.kind, before, spec.render_body(spec.write.body, values))
    return after, diff(before, after)


def set_pointer(document: dict[str, Any], pointer: str, value: Any) -> dict[str, Any]:
    result = copy.deepcopy(document)
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    node = result
    for token in tokens[:-1]:
        node = node.setdefault(token, {})
    node[tokens[-1]] = value
    return result


def read_target(client, spec: ActionSpec, values: dict[str, Any]) -> ReadResult:
    """GET the target through the read-only client and extract its version."""

    path = spec.render_path(spec.read.path, values)
    try:
        response = client.get(path)
    except UpstreamError as exc:
        if exc.timeout:
            raise UpstreamTimeout(str(exc)) from None
        raise PreviewError(str(exc)) from None
    if response.status in spec.read.not_found:
        return ReadResult(exists=False, body=None, version=None, status=response.status)
    if response.status != 200:
        raise PreviewError(f"the upstream answered {response.status} to the read")
    if response.truncated:
        raise PreviewError("the upstream's representation is larger than allowed")
    echoed = UpstreamEchoesSecrets(
        "the upstream's answer to the read repeated a credential it was sent; "
        "nothing was stored (fix the upstream or its proxy, then propose again)"
    )
    if response.secret_echoed:
        raise echoed
    try:
        body = response.json()
    except CanonicalJSONError as exc:
        raise PreviewError(
            "the upstream's representation is not usable JSON: " + scrub_text(exc.message)[0]
        ) from None
    if response.secret_echoed:
        raise echoed
    version = None
    if spec.version is not None:
        if spec.version.source == "etag":
            version = response.header("etag")
            if not version:
                raise PreviewError("the upstream sent no ETag for a target versioned by ETag")
        elif spec.version.source == "field":
            try:
                version = resolve_pointer(body, spec.version.field)
            except KeyError:
                raise PreviewError(
                    f"the upstream's representation has no version field {spec.version.field}"
                ) from None
        else:
            version = digest(body)
    return ReadResult(exists=True, body=body, version=version, status=response.status)


def is_weak_etag(value: Any) -> bool:
    """A weak entity tag (``W/"…"``), which RFC 9110 never lets satisfy If-Match."""
    return isinstance(value, str) and value[:2] in ("W/", "w/")


def compute_preview(action: Action, values: dict[str, Any], client) -> Preview:
    """Resolve a validated input into before/after/changes and the exact write."""
    spec = action.spec
    target_path = spec.render_path(spec.target, values)
    target = {
        "connector": action.connector.name,
        "base_url": action.connector.base_url,
        "path": target_path,
    }
    if spec.kind == "read":
        return _read_preview(spec, values, target)
    read = None
    if spec.read is not None:
        read = read_target(client, spec, values)
    body = spec.render_body(spec.write.body, values)
    headers: dict[str, str] = {}
    write_body = body

    if spec.kind == "create":
        if read is not None and read.exists:
            raise TargetExists(f"{target_path} already exists")
        before, after = None, body
        if read is not None:
            enforced = "if_none_match" if spec.write.precondition == "if_none_match" else "reread"
            precondition = {"kind": "absent", "expected": None, "enforced_by": enforced}
        else:
            precondition = {"kind": "none", "expected": None, "enforced_by": "none"}
    elif spec.kind == "invoke":
        before, after = None, body
        precondition = {"kind": "none", "expected": None, "enforced_by": "none"}
    else:
        if not read.exists:
            raise TargetNotFound(f"{target_path} was not found upstream")
        before = read.body
        after = planned_after(spec.kind, before, body)
        enforced = {"if_match": "if_match", "field": "field"}.get(spec.write.precondition, "reread")
        weak = spec.version.source == "etag" and is_weak_etag(read.version)
        if weak and enforced == "if_match":
            # By RFC 9110 a weak validator never satisfies If-Match: sending it would be
            # refused with 412 whatever the target's state. The worker's re-read, which
            # compares the tag as it was read, is the only check left.
            enforced = "reread"
        precondition = {
            "kind": "version",
            "source": spec.version.source,
            "expected": read.version,
            "enforced_by": enforced,
        }
        if weak:
            precondition["weak"] = True

    headers.update(spec.write.headers)
    if spec.write.precondition == "if_match" and precondition["enforced_by"] == "if_match":
        headers["If-Match"] = read.version
    elif spec.write.precondition == "if_none_match":
        headers["If-None-Match"] = "*"
    elif spec.write.precondition == "field":
        write_body = set_pointer(body or {}, spec.write.precondition_field, read.version)

    if write_body is not None and spec.write.content_type == FORM_CONTENT_TYPE:
        # The exact pairs that will be sent, so the reviewer sees the request as it goes.
        write_body = form_pairs(write_body, spec.write.form_style)
    write_path = spec.render_path(spec.write.path, values)
    write_request = {
        "method": spec.write.method,
        "path": write_path,
        "headers": headers,
        "content_type": spec.write.content_type if write_body is not None else None,
        "body": write_body,
    }
    changes = diff(before, after)
    summary = summary_markdown(spec, values, target_path, changes, write_request)
    return Preview(
        target=target,
        before=before,
        after=after,
        changes=changes,
        precondition=precondition,
        write_request=write_request,
        summary_markdown=summary,
    )


def _read_preview(spec: ActionSpec, values: dict[str, Any], target: dict[str, Any]) -> Preview:
    """A read is previewed without reading: the reviewer of a sensitive read sees what
    would be read and which fields the agent would receive, not the private record."""
    request = {
        "method": "GET",
        "path": spec.render_path(spec.read.path, values),
        "headers": {},
        "content_type": None,
        "body": None,
    }
    fields = ", ".join(markdown_code(f.name) for f in spec.result)
    lines = [f"**Read** {markdown_code(target['path'])} — {spec.title}"]
    own = spec.render_summary(values)
    if own:
        lines += ["", own]
    lines += ["", f"The agent receives only: {fields}."]
    return Preview(
        target=target,
        before=None,
        after=None,
        changes=[],
        precondition={"kind": "none", "expected": None, "enforced_by": "none"},
        write_request=request,
        summary_markdown="\n".join(lines),
    )


_VERBS = {
    "create": "Create",
    "update": "Update",
    "replace": "Replace",
    "delete": "Delete",
    "invoke": "Send",
    "read": "Read",
}


def summary_markdown(
    spec: ActionSpec,
    values: dict[str, Any],
    target_path: str,
    changes: list[dict[str, Any]],
    write_request: dict[str, Any],
) -> str:
    """A short markdown account a reviewer can check in seconds.

    Every value from the input or the upstream is rendered as code, so nothing an
    agent or an upstream wrote is ever read as markdown (or HTML) formatting.
    """
    lines = [f"**{_VERBS[spec.kind]}** {markdown_code(target_path)} — {spec.title}"]
    own = spec.render_summary(values)
    if own:
        lines += ["", own]
    if spec.kind == "invoke":
        lines += [
            "",
            f"Request: {markdown_code(write_request['method'] + ' ' + write_request['path'])}",
            "",
            markdown_block(_pretty(write_request["body"])),
        ]
    elif spec.kind == "delete":
        lines += ["", "The target will no longer exist."]
    elif changes:
        lines.append("")
        for change in changes[:50]:
            before = "absent" if change["op"] == "add" else markdown_code(change["before"])
            after = "absent" if change["op"] == "remove" else markdown_code(change["after"])
            lines.append(f"- {markdown_code(change['path'])}: {before} → {after}")
        if len(changes) > 50:
            lines.append(f"- … and {len(changes) - 50} more changes")
    else:
        lines += ["", "No field changes: the target already looks like this."]
    return "\n".join(lines)


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
