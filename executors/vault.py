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
from django.db import transaction
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, PublicKey, SealedBox

from actions.lib.actors import SYSTEM
from actions.lib.audit import audit_record
from actions.models import Credential
from actions.vault import VaultError, unwrap


class WriteKeyUnavailable(VaultError):
    """This process holds no worker private key: it is not an executor."""


def _private_keys() -> list[PrivateKey]:
    """The worker's private keys, newest first.

    COUNTERSIGN_WORKER_KEY_FILE may name several files separated by commas: during a key
    rotation a worker holds the new key and the old one, so secrets not yet re-sealed
    still open (see ``manage.py rotate_keys``)."""
    paths = [p.strip() for p in (settings.COUNTERSIGN_WORKER_KEY_FILE or "").split(",")]
    paths = [p for p in paths if p]
    if not paths:
        raise WriteKeyUnavailable("this process holds no worker private key")
    return [load_private_key(p) for p in paths]


def load_private_key(path: str | Path) -> PrivateKey:
    try:
        raw = Path(path).read_text().strip()
    except OSError:
        raise WriteKeyUnavailable("the worker private key file cannot be read") from None
    return PrivateKey(base64.b64decode(raw))


def load_public_key(path: str | Path) -> PublicKey:
    """A public key file (base64, as worker_keygen writes it)."""
    try:
        raw = Path(path).read_text().strip()
    except OSError:
        raise VaultError(f"the public key file {path} cannot be read") from None
    return PublicKey(base64.b64decode(raw))


def _open_sealed(credential: Credential, keys: list[PrivateKey]) -> bytes:
    for key in keys:
        try:
            return SealedBox(key).decrypt(bytes(credential.ciphertext))
        except CryptoError:
            continue
    raise VaultError("write credential does not open with this worker's key")


def open_write_secret(credential: Credential) -> dict[str, Any]:
    if credential.role != Credential.Role.WRITE:
        raise VaultError("only write credentials open here")
    return unwrap(credential, _open_sealed(credential, _private_keys()))


def write_secrets_reseal(
    *, old_keys: list[PrivateKey], new_public: PublicKey, actor: str = SYSTEM
) -> int:
    """Re-seal every write secret to ``new_public``. Runs where the old private key is
    (a worker). Each row is re-sealed in its own short transaction and only if its
    ciphertext did not change meanwhile, so it runs while the system is live; rows
    already sealed to the new key are skipped (they do not open with an old key).
    Returns how many rows were re-sealed."""
    count = 0
    for credential in Credential.objects.filter(role=Credential.Role.WRITE).iterator():
        try:
            plaintext = _open_sealed(credential, old_keys)
        except VaultError:
            continue  # already re-sealed, or sealed to a key we were not given
        unwrap(credential, plaintext)  # refuse a ciphertext copied from another row
        with transaction.atomic():
            updated = Credential.objects.filter(
                pk=credential.pk, ciphertext=bytes(credential.ciphertext)
            ).update(ciphertext=SealedBox(new_public).encrypt(plaintext))
            if updated:
                count += 1
                audit_record(
                    kind="credential.resealed",
                    actor=actor,
                    data={"credential": str(credential.pk), "connector": credential.connector_id},
                )
    return count


def generate_keypair() -> tuple[str, str]:
    """Return (private, public) keys, base64."""
    key = PrivateKey.generate()
    return (
        base64.b64encode(bytes(key)).decode(),
        base64.b64encode(bytes(key.public_key)).decode(),
    )
