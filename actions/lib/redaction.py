"""Filtering what upstreams say before anyone else sees it.

Upstream answers are untrusted: an error page may echo our Authorization header, name
internal hosts or carry a stack trace. What is stored for people is filtered and
bounded; what agents see is never the upstream's text at all (a short reason written
by Countersign, plus a correlation id).
"""

from __future__ import annotations

import base64
import html
import json
import re
import threading
from typing import Any
from urllib.parse import quote, quote_plus, unquote

import re2

REDACTED = "[redacted]"
# What replaces a whole text that repeats a credential in a form that cannot be cut out
# where it stands (percent-encoding every character, say).
REMOVED = "[removed: it repeated a credential]"
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


# --- credentials an upstream may echo ---------------------------------------------------
#
# A hostile or careless upstream (a debugging echo, a misconfigured proxy) may repeat in
# its answer the credential it was sent, in any encoding a server might use. Every value
# this process presents or opens is remembered here (in memory only), and every answer
# is scrubbed of all of them before anyone reads it (actions.lib.http does it as the answer
# arrives). A value shorter than MIN_SECRET_CHARS cannot be told apart from ordinary
# data; credentials that short are refused when they are stored (actions.vault).

MIN_SECRET_CHARS = 8  # the same as actions.vault.MIN_SECRET_CHARS
# Process-wide, oldest forgotten first: credentials rotate and OAuth2 access tokens are
# renewed, and a bounded set keeps the pattern small.
MAX_REMEMBERED = 512


def secret_forms(value: str) -> set[str]:
    """The ways a server might write ``value`` back: raw, JSON-, URL- and HTML-escaped,
    and base64 (standard and URL-safe, at each of the three alignments it can take
    inside a longer base64 text, such as a Basic credential or an encoded header)."""
    forms = {
        value,
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        quote(value, safe=""),
        quote(value),
        quote_plus(value),
        html.escape(value),
    }
    raw = value.encode("utf-8", "surrogatepass")
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode()
        # The characters that depend on ``raw`` alone, whatever surrounds it.
        start = -(-8 * shift // 6)
        end = (8 * (shift + len(raw))) // 6
        core = encoded[start:end]
        if len(core) >= MIN_SECRET_CHARS:
            forms |= {core, core.translate(str.maketrans("+/", "-_"))}
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def _linear(pattern):
    """A linear-time (RE2) pattern: an alternation of hundreds of literals is scanned in
    one pass over an answer of up to a megabyte (~10 ms), where Python's engine would try
    each literal at each position (~800 ms for 100 credentials)."""
    options = re2.Options()
    options.max_mem = 256 << 20
    return re2.compile(pattern, options)


class _Remembered:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, None] = {}
        self._text = None
        self._bytes = None
        self._raw = None

    def add(self, values) -> None:
        fresh = [v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS]
        if not fresh or all(v in self._values for v in fresh):
            return
        with self._lock:
            for value in fresh:
                self._values.pop(value, None)
                self._values[value] = None
            while len(self._values) > MAX_REMEMBERED:
                del self._values[next(iter(self._values))]
            self._text = self._bytes = None

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._text = self._bytes = None

    def patterns(self):
        text, data = self._text, self._bytes
        if text is not None or not self._values:
            return text, data
        with self._lock:
            self._raw = _linear(
                "|".join(re2.escape(v) for v in sorted(self._values, key=len, reverse=True))
            )
            forms = sorted(
                {form for value in self._values for form in secret_forms(value)},
                key=len,
                reverse=True,
            )
            self._text = _linear("|".join(re2.escape(f) for f in forms))
            self._bytes = _linear(
                b"|".join(re2.escape(f.encode("utf-8", "surrogatepass")) for f in forms)
            )
            return self._text, self._bytes


_remembered = _Remembered()


def remember_secrets(values) -> None:
    """Note credential values this process presents or holds (never stored anywhere)."""
    _remembered.add(values)


def forget_secrets() -> None:
    """Forget every remembered value (the tests, between runs)."""
    _remembered.clear()


def _still_hidden(text: str) -> bool:
    """Does ``text``, once percent- and HTML-decoded, still hold a remembered value?"""
    raw = _remembered._raw
    if raw is None:
        return False
    decoded = unquote(html.unescape(text))
    return decoded != text and raw.search(decoded) is not None


def scrub_bytes(data: bytes) -> tuple[bytes, bool]:
    """``data`` with every remembered credential replaced; and whether there was one."""
    _, pattern = _remembered.patterns()
    if pattern is None or not data:
        return data, False
    scrubbed, count = pattern.subn(REDACTED.encode(), data)
    if _still_hidden(scrubbed.decode("utf-8", "replace")):
        return REMOVED.encode(), True
    return scrubbed, count > 0


def scrub_text(text: str) -> tuple[str, bool]:
    """``text`` with every remembered credential replaced; and whether there was one."""
    pattern, _ = _remembered.patterns()
    if pattern is None or not text:
        return text, False
    scrubbed, count = pattern.subn(REDACTED, text)
    if _still_hidden(scrubbed):
        return REMOVED, True
    return scrubbed, count > 0


def scrub_value(value: Any) -> tuple[Any, bool]:
    """A parsed JSON value with every remembered credential replaced in its strings and
    keys (a server may write one with \\u escapes, which only parsing reveals)."""
    pattern, _ = _remembered.patterns()
    if pattern is None:
        return value, False
    found = False

    def walk(item: Any) -> Any:
        nonlocal found
        if isinstance(item, str):
            scrubbed, hit = scrub_text(item)
            found = found or hit
            return scrubbed
        if isinstance(item, dict):
            return {walk(key): walk(sub) for key, sub in item.items()}
        if isinstance(item, list):
            return [walk(sub) for sub in item]
        return item

    return walk(value), found
