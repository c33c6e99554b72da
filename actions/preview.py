"""Computing what a plan would change, by reading only.

Everything here reads the upstream through the connector's kind (actions/connectors/):
its reader carries the read credential only and refuses writes. The same functions
serve revalidation in the worker: the version read right before writing is computed
exactly as it was for the preview.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from .connectors.base import (
    PreviewError,
    Read,
    TargetExists,
    TargetNotFound,
    UpstreamEchoesSecrets,
    UpstreamTimeout,
)
from .connectors.registry import kind_of
from .lib.canonical import escape_pointer_token
from .models import Action
from .spec import ActionSpec, markdown_block, markdown_code

__all__ = [
    "Preview",
    "PreviewError",
    "ReadResult",
    "TargetExists",
    "TargetNotFound",
    "UpstreamEchoesSecrets",
    "UpstreamTimeout",
    "compute_preview",
    "diff",
    "merge_patch",
    "planned_after",
    "planned_change",
    "read_target",
    "summary_markdown",
]

# What a read of the target gives (actions.connectors.base.Read), by its older name.
ReadResult = Read


@dataclass
class Preview:
    target: dict[str, Any]
    before: Any
    after: Any
    changes: list[dict[str, Any]]
    precondition: dict[str, Any]
    write_request: dict[str, Any]
    summary_markdown: str


def merge_patch(target: Any, patch: Any, *, append: bool = False) -> Any:
    """RFC 7386 JSON merge patch. With ``append``, an array in ``patch`` adds its items to
    the array at the same place in ``target`` (items already there are not repeated: a
    knowledge store's observations, a set of labels) instead of replacing it."""
    if append and isinstance(patch, list):
        result = list(target) if isinstance(target, list) else []
        result += [copy.deepcopy(item) for item in patch if item not in result]
        return result
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value, append=append)
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


def planned_after(kind: str, before: Any, body: Any, *, merge: str = "patch") -> Any:
    """What the target would be after a change of ``kind`` that sends ``body`` (the
    rendered write body) to the target as read (``before``; None when nothing is read).
    ``merge``: how an update joins the target (``append``: arrays gain items)."""
    if kind == "update":
        return merge_patch(before, body, append=merge == "append")
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
    body = spec.render_body(spec.write.body, values)
    after = planned_after(spec.kind, before, body, merge=_merge(spec))
    return after, diff(before, after)


def _merge(spec: ActionSpec) -> str:
    return spec.mcp.merge if spec.mcp is not None else "patch"


def read_target(reader, spec: ActionSpec, values: dict[str, Any]) -> Read:
    """Read the target through a reader its connector's kind opened (the read credential
    only; it refuses writes), and extract its version."""
    return kind_of(reader.connector).read(reader, spec, values)


def compute_preview(action: Action, values: dict[str, Any], client) -> Preview:
    """Resolve a validated input into before/after/changes and the exact write.
    ``client`` is the reader the connector's kind opened (the read credential only)."""
    spec = action.spec
    kind = kind_of(action.connector)
    target = kind.target(client, spec, values)
    target_path = target["path"]
    if spec.kind == "read":
        return _read_preview(spec, values, target, kind.read_request(spec, values))
    if spec.mcp is not None and spec.mcp.recipe == "dry_run":
        return _dry_run_preview(spec, values, target, kind, client)
    read = None
    if spec.read is not None:
        read = kind.read(client, spec, values)
    body = spec.render_body(spec.write.body, values)

    if spec.kind == "create":
        if read is not None and read.exists:
            raise TargetExists(f"{target_path} already exists")
        before, after = None, body
        precondition = kind.precondition(spec, read, absent=True)
    elif spec.kind == "invoke":
        before, after = None, body
        precondition = {"kind": "none", "expected": None, "enforced_by": "none"}
    else:
        if not read.exists:
            raise TargetNotFound(f"{target_path} was not found upstream")
        before = read.body
        after = planned_after(spec.kind, before, body, merge=_merge(spec))
        precondition = kind.precondition(spec, read, absent=False)

    write_request = kind.write_request(spec, values, body, precondition, read)
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


def _dry_run_preview(spec: ActionSpec, values, target, kind, client) -> Preview:
    """The tool's own dry run is the preview: its output is what the plan shows as the
    change (``after``), and its hash the version the worker checks by running the dry
    run again right before the real call. Nothing is computed by Countersign here: the
    page says so."""
    read = kind.read(client, spec, values)
    write_request = kind.write_request(spec, values, None, {}, read)
    precondition = kind.precondition(spec, read, absent=False)
    lines = [
        f"**Call** {markdown_code(write_request['path'])} — {spec.title}",
        "",
        "Preview from the tool's own dry run: the server promises it writes nothing.",
    ]
    own = spec.render_summary(values)
    if own:
        lines += ["", own]
    output = read.body if isinstance(read.body, str) else _pretty(read.body)
    lines += ["", markdown_block(output)]
    return Preview(
        target=target,
        before=None,
        after=read.body,
        changes=[],
        precondition=precondition,
        write_request=write_request,
        summary_markdown="\n".join(lines),
    )


def _read_preview(
    spec: ActionSpec, values: dict[str, Any], target: dict[str, Any], request: dict[str, Any]
) -> Preview:
    """A read is previewed without reading: the reviewer of a sensitive read sees what
    would be read and which fields the agent would receive, not the private record."""
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
