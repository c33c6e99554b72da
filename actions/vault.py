"""The web-side half of the credential vault.

Read secrets: MultiFernet with keys shared by web and worker (first key encrypts,
every key decrypts, so keys rotate). Write secrets: a libsodium sealed box to the
worker's public key. This module can *seal* a write secret but has no way to open one;
opening lives in executors.vault and needs the private key only workers are given.

Every plaintext is ``{"cid": <credential id>, "secret": {...}}``: a ciphertext copied
onto another credential row fails the id check and does not open there.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import transaction
from nacl.public import PublicKey, SealedBox

from actions.lib.audit import audit_record

from .lib.actors import SYSTEM
from .models import Credential

# A secret shorter than this cannot be told apart from ordinary text in an upstream's
# answer (actions.lib.redaction.MIN_SECRET_CHARS holds the same number).
MIN_SECRET_CHARS = 8


class VaultError(Exception):
    """A credential could not be sealed or opened. Never carries the secret."""


def _multifernet() -> MultiFernet:
    keys = settings.COUNTERSIGN_FERNET_KEYS
    if not keys:
        raise VaultError("no read-credential keys configured (COUNTERSIGN_FERNET_KEYS)")
    return MultiFernet([Fernet(k.encode() if isinstance(k, str) else k) for k in keys])


def worker_public_key() -> PublicKey:
    encoded = settings.COUNTERSIGN_WORKER_PUBLIC_KEY
    if not encoded:
        raise VaultError(
            "no worker public key configured (COUNTERSIGN_WORKER_PUBLIC_KEY); "
            "run `manage.py worker_keygen` and give the public key to web processes"
        )
    return PublicKey(base64.b64decode(encoded))


def _plaintext(credential_id, secret: dict[str, Any]) -> bytes:
    return json.dumps({"cid": str(credential_id), "secret": secret}).encode()


def unwrap(credential: Credential, plaintext: bytes) -> dict[str, Any]:
    payload = json.loads(plaintext)
    if payload.get("cid") != str(credential.id):
        raise VaultError("ciphertext belongs to another credential")
    return payload["secret"]


def seal(credential: Credential, secret: dict[str, Any]) -> bytes:
    """Encrypt ``secret`` for ``credential`` according to its role."""
    plaintext = _plaintext(credential.id, secret)
    if credential.role == Credential.Role.WRITE:
        return SealedBox(worker_public_key()).encrypt(plaintext)
    return _multifernet().encrypt(plaintext)


def open_read_secret(credential: Credential) -> dict[str, Any]:
    if credential.role != Credential.Role.READ:
        raise VaultError("only read credentials open here")
    try:
        return unwrap(credential, _multifernet().decrypt(bytes(credential.ciphertext)))
    except InvalidToken:
        raise VaultError("read credential does not decrypt with the configured keys") from None


def rotate_read_secret(credential: Credential) -> bytes:
    """Re-encrypt under the first (newest) key."""
    return _multifernet().rotate(bytes(credential.ciphertext))


def auth_headers(credential: Credential, secret: dict[str, Any]) -> dict[str, str]:
    """HTTP headers that present ``secret`` the way the credential's scheme says.

    Static schemes only: an OAuth2 credential presents a token fetched at run time
    (``actions.clients.credential_auth``)."""
    if credential.scheme == Credential.Scheme.BEARER:
        return {"Authorization": f"Bearer {secret['token']}"}
    if credential.scheme == Credential.Scheme.HEADER:
        return {credential.header_name: secret["token"]}
    if credential.scheme == Credential.Scheme.BASIC:
        raw = f"{secret['username']}:{secret['password']}".encode()
        return {"Authorization": "Basic " + base64.b64encode(raw).decode()}
    if credential.scheme == Credential.Scheme.OAUTH2:
        raise VaultError("an OAuth2 credential presents a fetched token, not its secret")
    raise VaultError(f"unknown credential scheme {credential.scheme!r}")


def oauth_token_url(*, base_url: str, token_url: str) -> str:
    """The absolute token URL of an OAuth2 credential on a connector at ``base_url``.

    The client secret is sent there, so it must be the connector's own origin (a path
    such as ``/oauth/token`` means that) or an origin an operator listed in
    COUNTERSIGN_OAUTH_TOKEN_ORIGINS. Raises VaultError otherwise."""
    token_url = (token_url or "").strip()
    if not token_url:
        raise VaultError("an OAuth2 credential needs a token URL")
    base = urlsplit(base_url)
    own_origin = f"{base.scheme}://{base.netloc}".lower()
    if token_url.startswith("/") and not token_url.startswith("//"):
        token_url = own_origin + token_url
    parts = urlsplit(token_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise VaultError("the token URL must be an http(s) URL or a path on the connector")
    if parts.username is not None or parts.password is not None or parts.fragment:
        raise VaultError("the token URL carries no user name, password or fragment")
    if any(ord(ch) < 0x21 or ch == "\\" for ch in token_url):
        raise VaultError("the token URL carries no whitespace or backslash")
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    allowed = {own_origin} | {
        o.strip().rstrip("/").lower() for o in settings.COUNTERSIGN_OAUTH_TOKEN_ORIGINS
    }
    if origin not in allowed:
        raise VaultError(
            f"the token URL's origin {origin} is not the connector's ({own_origin}) "
            "and not listed in COUNTERSIGN_OAUTH_TOKEN_ORIGINS"
        )
    return token_url


def check_secret_shape(scheme: str, secret: dict[str, Any]) -> None:
    """Refuse a secret its scheme cannot present (raised before anything is stored)."""
    needed = {
        Credential.Scheme.BEARER: ("token",),
        Credential.Scheme.HEADER: ("token",),
        Credential.Scheme.BASIC: ("username", "password"),
        Credential.Scheme.OAUTH2: ("client_id", "client_secret"),
    }.get(scheme)
    if scheme == Credential.Scheme.ENV:
        _check_env_secret(secret)
        return
    if needed is None:
        raise VaultError(f"unknown credential scheme {scheme!r}")
    missing = [k for k in needed if not isinstance(secret.get(k), str) or not secret[k]]
    if missing:
        raise VaultError(f"a {scheme} secret needs {', '.join(missing)}")
    short = [k for k in needed if k not in _NOT_SECRET and len(secret[k]) < MIN_SECRET_CHARS]
    if short:
        # Too short to be told apart from ordinary data, so it could not be kept out of
        # what an upstream echoes back (actions.lib.redaction).
        raise VaultError(f"{', '.join(short)} must be at least {MIN_SECRET_CHARS} characters long")


def _check_env_secret(secret: dict[str, Any]) -> None:
    """An ``env`` secret: {"env": {NAME: value}}, at least one variable, every value long
    enough to be recognised if a server writes it back."""
    env = secret.get("env")
    if not isinstance(env, dict) or not env:
        raise VaultError("an env secret needs env: at least one NAME=value")
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise VaultError(f"{name!r} is not an environment variable name")
        if not isinstance(value, str) or len(value) < MIN_SECRET_CHARS or "\x00" in value:
            raise VaultError(f"{name} must be at least {MIN_SECRET_CHARS} characters long")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

# The parts of a secret that are secret: a Basic user name and an OAuth2 client id are
# identifiers, shown in logs and consoles; scrubbing them from upstream answers would
# refuse every preview of a record that names the account.
_NOT_SECRET = frozenset({"username", "client_id"})


def secret_values(secret: dict[str, Any]) -> list[str]:
    """Every secret string in a secret, for redaction (an ``env`` secret's values too)."""
    values = [v for k, v in secret.items() if k not in _NOT_SECRET and isinstance(v, str) and v]
    env = secret.get("env")
    if isinstance(env, dict):
        values += [v for v in env.values() if isinstance(v, str) and v]
    return values


def read_secrets_rotate(*, actor: str = SYSTEM) -> int:
    """Re-encrypt every read secret under the newest Fernet key (the first configured).

    Safe while the system runs: old keys still decrypt until they are removed from
    COUNTERSIGN_FERNET_KEYS, and each row is updated only if it did not change meanwhile.
    Returns how many rows were rewritten."""
    count = 0
    for credential in Credential.objects.filter(role=Credential.Role.READ).iterator():
        old = bytes(credential.ciphertext)
        try:
            new = rotate_read_secret(credential)
        except InvalidToken:
            raise VaultError(
                f"read credential {credential.pk} does not decrypt with the configured keys"
            ) from None
        with transaction.atomic():
            if Credential.objects.filter(pk=credential.pk, ciphertext=old).update(ciphertext=new):
                count += 1
        # One summary event below; the per-row detail adds nothing an auditor needs.
    with transaction.atomic():
        audit_record(kind="credential.read_keys_rotated", actor=actor, data={"rotated": count})
    return count
