"""The worker-side half of the vault: opening write credentials.

Only a process started with COUNTERSIGN_WORKER_KEY_FILE can open a write secret. Web
processes are never given that file, so a compromised web process can store write
credentials but cannot read them.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from django.conf import settings
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, SealedBox

from actions.models import Credential
from actions.vault import VaultError, unwrap


class WriteKeyUnavailable(VaultError):
    """This process holds no worker private key: it is not an executor."""


def _private_key() -> PrivateKey:
    path = settings.COUNTERSIGN_WORKER_KEY_FILE
    if not path:
        raise WriteKeyUnavailable("this process holds no worker private key")
    try:
        raw = Path(path).read_text().strip()
    except OSError:
        raise WriteKeyUnavailable("the worker private key file cannot be read") from None
    return PrivateKey(base64.b64decode(raw))


def open_write_secret(credential: Credential) -> dict[str, Any]:
    if credential.role != Credential.Role.WRITE:
        raise VaultError("only write credentials open here")
    try:
        plaintext = SealedBox(_private_key()).decrypt(bytes(credential.ciphertext))
    except CryptoError:
        raise VaultError("write credential does not open with this worker's key") from None
    return unwrap(credential, plaintext)


def generate_keypair() -> tuple[str, str]:
    """Return (private, public) keys, base64."""
    key = PrivateKey.generate()
    return (
        base64.b64encode(bytes(key)).decode(),
        base64.b64encode(bytes(key.public_key)).decode(),
    )
