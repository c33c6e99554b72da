"""Canonical JSON: one byte string per meaning, so equal plans hash equally.

Fingerprints are SHA-256 over RFC 8785 (JCS) bytes. Before that, every string is
normalized to NFC, so two inputs that only differ in Unicode composition are the same
plan. Parsing refuses what JSON tolerates but a fingerprint must not: duplicate keys
(which value would the executor use?), NaN/Infinity, and integers beyond the range
every JSON implementation keeps exactly (money and big ids belong in strings).
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Any

import rfc8785

MAX_SAFE_INTEGER = 2**53 - 1


class CanonicalJSONError(ValueError):
    """The document cannot be represented canonically; ``pointer`` says where."""

    def __init__(self, message: str, pointer: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.pointer = pointer


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise CanonicalJSONError(f"duplicate key {key!r} in a JSON object")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise CanonicalJSONError(f"{name} is not valid JSON")


def loads_strict(data: bytes | str, *, nfc: bool = True) -> Any:
    """Parse JSON, refusing duplicate keys and non-finite numbers; NFC-normalize strings
    (``nfc=False``: checked as ``normalize`` checks, but returned as sent, for a caller
    that must see the strings as they were written before it normalizes them)."""
    try:
        value = json.loads(
            data, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except CanonicalJSONError:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CanonicalJSONError(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise CanonicalJSONError("JSON nested too deeply") from None
    normalized = normalize(value)
    return normalized if nfc else value


def escape_pointer_token(token: str | int) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def normalize(value: Any, pointer: str = "") -> Any:
    """Return ``value`` with NFC strings, checked for canonical representability."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise CanonicalJSONError(
                "integer outside ±(2^53-1); send large numbers as strings", pointer
            )
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise CanonicalJSONError("non-finite number", pointer)
        return value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalJSONError("object keys must be strings", pointer)
            nkey = unicodedata.normalize("NFC", key)
            if nkey in out:
                raise CanonicalJSONError(
                    f"keys {key!r} collide after Unicode normalization", pointer
                )
            out[nkey] = normalize(item, f"{pointer}/{escape_pointer_token(nkey)}")
        return out
    if isinstance(value, list | tuple):
        return [normalize(item, f"{pointer}/{i}") for i, item in enumerate(value)]
    raise CanonicalJSONError(f"{type(value).__name__} is not a JSON value", pointer)


# RFC 8785 escapes strings exactly as the json module does (the same table of escapes,
# lowercase hex) and writes integers in the ±(2^53-1) that ``normalize`` allows as their
# digits. It differs only for floats (ECMAScript's shortest form: 1.0 is "1", 1e-07 is
# "1e-7") and in the order of keys holding characters beyond U+FFFF (it sorts UTF-16
# code units; Python sorts code points). A value with neither is encoded by the json
# module's C encoder, byte for byte what rfc8785 writes, in a fraction of the time
# (tests/actions/test_canonical.py compares them); any other goes through rfc8785.
_PLAIN_ENCODER = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
)


def _plain_nfc(value: Any, plain: list[bool]) -> Any:
    """``normalize`` without the pointer (built only if something is refused), noting in
    ``plain[0]`` whether the value holds a float or a key beyond U+FFFF."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise CanonicalJSONError("integer outside ±(2^53-1)")
        return value
    if isinstance(value, float):
        plain[0] = False
        return normalize(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalJSONError("object keys must be strings")
            nkey = unicodedata.normalize("NFC", key)
            if nkey in out:
                raise CanonicalJSONError("keys collide after Unicode normalization")
            if not nkey.isascii() and max(nkey) > "\uffff":
                plain[0] = False
            out[nkey] = _plain_nfc(item, plain)
        return out
    if isinstance(value, list | tuple):
        return [_plain_nfc(item, plain) for item in value]
    raise CanonicalJSONError(f"{type(value).__name__} is not a JSON value")


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 bytes of the NFC-normalized value."""
    plain = [True]
    try:
        normalized = _plain_nfc(value, plain)
    except CanonicalJSONError:
        normalize(value)  # the same refusal, with the pointer to where
        raise
    if plain[0]:
        try:
            return _PLAIN_ENCODER.encode(normalized).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 refuses it in its own words
    return rfc8785.dumps(normalized)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    return sha256_hex(canonical_bytes(value))


def resolve_pointer(document: Any, pointer: str) -> Any:
    current = document
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            raise KeyError(pointer)
    return current
