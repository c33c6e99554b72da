"""Filtering what upstreams say before anyone else sees it.

Upstream answers are untrusted: an error page may echo our Authorization header, name
internal hosts or carry a stack trace. What is stored for people is filtered and
bounded; what agents see is never the upstream's text at all (a short reason written
by Countersign, plus a correlation id).
"""

from __future__ import annotations

import re

REDACTED = "[redacted]"
MAX_STORED_TEXT = 4096
SENSITIVE_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "x-auth-token"}
)

_AUTH_VALUE = re.compile(
    r"(?i)\b(authorization|proxy-authorization|x-api-key|api[-_]?key|token|secret|password)"
    r"(\"?\s*[:=]\s*\"?)([^\s\",;]+(?:\s+[^\s\",;]+)?)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}")
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+")
_TRACE_START = re.compile(r"(?m)^.*Traceback \(most recent call last\):.*$")
_TRACE_LINE = re.compile(
    r"(?m)^\s*(File \".*\", line \d+.*|at [\w.$<>]+\(.*\)|[\w.]+(Error|Exception): .*)$"
)


def redact_headers(
    headers: dict[str, str], extra_sensitive: set[str] | None = None
) -> dict[str, str]:
    sensitive = SENSITIVE_HEADERS | {h.lower() for h in (extra_sensitive or set())}
    return {k: (REDACTED if k.lower() in sensitive else v) for k, v in headers.items()}


def filter_text(text: str, *, secrets: list[str] = (), limit: int = MAX_STORED_TEXT) -> str:
    """Remove secret values, credentials, URLs and stack traces; cut to ``limit``."""
    for value in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _AUTH_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _URL.sub("[url]", text)
    text = _TRACE_START.sub("[stack trace removed]", text)
    text = _TRACE_LINE.sub("", text)
    if len(text) > limit:
        text = text[:limit] + "…[truncated]"
    return text
