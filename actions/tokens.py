"""Agent bearer tokens: ``cs_<prefix>_<secret>``. Shown once; only a hash is stored."""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "cs_"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token() -> tuple[str, str, str]:
    """Return (token, visible prefix, hash)."""
    prefix = secrets.token_hex(4)
    token = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    return token, prefix, token_hash(token)
