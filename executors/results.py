"""What the agent gets back: the fields an action declares (``result:``), taken from the
upstream's answer, typed, bounded and filtered. Nothing undeclared ever reaches the
agent; a value that does not match its declaration is not returned (null), and the
mismatch is noted for people."""

from __future__ import annotations

import math
from typing import Any

from actions.lib.canonical import MAX_SAFE_INTEGER, CanonicalJSONError, resolve_pointer
from actions.lib.redaction import filter_text
from actions.spec import ResultField

_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def project(
    fields: tuple[ResultField, ...], response, *, secrets: list[str] = ()
) -> tuple[dict[str, Any], list[str]]:
    """The declared fields from ``response`` (an UpstreamResponse), and notes on what did
    not match. Every field is present; a missing or mismatched one is None."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    body: Any = None
    parsed = False
    for spec in fields:
        if spec.status:
            value = response.status
        elif spec.header:
            value = response.header(spec.header)
        elif spec.text:
            value = response.body.decode("utf-8", "replace")
        else:
            if not parsed:
                parsed = True
                try:
                    body = response.json()
                except (CanonicalJSONError, ValueError):
                    body = None
            try:
                value = resolve_pointer(body, spec.pointer) if body is not None else None
            except KeyError:
                value = None
        value, note = typed(spec, value, secrets=secrets)
        if note:
            notes.append(note)
        out[spec.name] = value
    return out, notes


def typed(spec: ResultField, value: Any, *, secrets: list[str] = ()) -> tuple[Any, str]:
    """``value`` as its declaration allows it, or (None, why not)."""
    if value is None:
        return None, ""
    if not _TYPES[spec.type](value):
        article = "an" if spec.type == "integer" else "a"
        return None, f"result field {spec.name}: not {article} {spec.type}"
    if spec.type in ("integer", "number"):
        if abs(value) > MAX_SAFE_INTEGER or (isinstance(value, float) and not math.isfinite(value)):
            return None, f"result field {spec.name}: out of range"
    if spec.enum and value not in spec.enum:
        return None, f"result field {spec.name}: not one of its declared values"
    if spec.type == "string":
        if len(value) > spec.max_length:
            return None, f"result field {spec.name}: longer than {spec.max_length}"
        # The same filter as error details: no credential, auth value, URL or trace.
        value = filter_text(value, secrets=list(secrets), limit=spec.max_length)
    return value, ""


def merged(previous: dict[str, Any] | None, newer: dict[str, Any]) -> dict[str, Any]:
    """A later answer (a status request's) updates the fields it carries."""
    out = dict(previous or {})
    out.update({k: v for k, v in newer.items() if v is not None})
    for key in newer:
        out.setdefault(key, None)
    return out
