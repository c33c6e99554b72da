"""The agents' credential as HTTP carries it: ``Authorization: Bearer <token>``. One
parser for the API, the MCP endpoint and the long-poll gate in front of Django."""

from __future__ import annotations


def bearer_token(value: str | bytes | None) -> str | None:
    """The token of an ``Authorization`` header value, or None if it is not a bearer one.

    Never logged, whatever it holds (the stock parsers log unexpected values)."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    scheme, _, token = (value or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token
