"""What reviewers compare: word diffs of long text, and how a target moved between two
previews. Plain data out; templates render it with autoescaping (agent and upstream text
is never marked safe)."""

from __future__ import annotations

import difflib
import re
from typing import Any

# Strings longer than this get an inline word diff under the field table row.
LONG_TEXT = 60
# Body fields that only carry a version: a target whose before differs only here has
# merely moved on (a normal write elsewhere, or a touch), not changed in substance.
VERSION_PATHS = frozenset({"/version", "/revision", "/etag", "/updated_at"})

_TOKENS = re.compile(r"(\s+)")


def is_long_text(before: Any, after: Any) -> bool:
    return (
        isinstance(before, str)
        and isinstance(after, str)
        and (len(before) > LONG_TEXT or len(after) > LONG_TEXT)
    )


def word_diff(before: str, after: str) -> list[dict[str, str]]:
    """Segments ``{"op": "same"|"del"|"ins", "text": ...}`` diffed word by word."""
    a = [t for t in _TOKENS.split(before) if t]
    b = [t for t in _TOKENS.split(after) if t]
    out: list[dict[str, str]] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.append({"op": "same", "text": "".join(a[i1:i2])})
            continue
        if tag in ("delete", "replace"):
            out.append({"op": "del", "text": "".join(a[i1:i2])})
        if tag in ("insert", "replace"):
            out.append({"op": "ins", "text": "".join(b[j1:j2])})
    return out


def only_version_moved(changes: list[dict[str, Any]], version_field: str = "") -> bool:
    paths = VERSION_PATHS | ({version_field} if version_field else set())
    return all(c["path"] in paths for c in changes)
