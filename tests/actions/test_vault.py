"""Guarantee 4: only executors hold write credentials.

The web side seals write secrets to the worker's public key and cannot open them; read
secrets use MultiFernet keys that rotate.
"""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet

from actions.models import Connector, Credential
from actions.services import credential_set
from actions.vault import (
    VaultError,
    auth_headers,
    open_read_secret,
    rotate_read_secret,
    seal,
)
from executors.vault import WriteKeyUnavailable, generate_keypair, open_write_secret
from tests.conftest import READ_TOKEN, WRITE_TOKEN


@pytest.fixture
def connector(catalog) -> Connector:
    return Connector.objects.get(name="demo")


def stored(connector: Connector, role: str) -> Credential:
    return Credential.objects.get(pk=connector.credential(role).pk)


# --- write secrets ---------------------------------------------------------------------------


def test_the_web_side_cannot_open_a_write_secret(connector, settings):
    assert not settings.COUNTERSIGN_WORKER_KEY_FILE
    with pytest.raises(WriteKeyUnavailable):
        open_write_secret(stored(connector, Credential.Role.WRITE))


def test_the_executor_opens_a_write_secret(connector, executor_key):
    assert open_write_secret(stored(connector, Credential.Role.WRITE)) == {"token": WRITE_TOKEN}


def test_another_workers_key_does_not_open_it(connector, settings, tmp_path):
    private, _ = generate_keypair()
    path = tmp_path / "other.key"
    path.write_text(private)
    settings.COUNTERSIGN_WORKER_KEY_FILE = str(path)
    with pytest.raises(VaultError) as info:
        open_write_secret(stored(connector, Credential.Role.WRITE))
    assert not isinstance(info.value, WriteKeyUnavailable)


def test_an_unreadable_key_file_is_no_key(connector, settings, tmp_path):
    settings.COUNTERSIGN_WORKER_KEY_FILE = str(tmp_path / "missing.key")
    with pytest.raises(WriteKeyUnavailable):
        open_write_secret(stored(connector, Credential.Role.WRITE))


def test_a_write_ciphertext_copied_to_another_row_does_not_open(connector, executor_key):
    original = stored(connector, Credential.Role.WRITE)
    other = credential_set(
        connector=connector, role=Credential.Role.WRITE, secret={"token": "other-write"}
    )
    Credential.objects.filter(pk=other.pk).update(ciphertext=bytes(original.ciphertext))
    with pytest.raises(VaultError, match="another credential"):
        open_write_secret(Credential.objects.get(pk=other.pk))
    # The original still opens where it belongs.
    assert open_write_secret(original) == {"token": WRITE_TOKEN}


def test_write_and_read_secrets_only_open_through_their_own_door(connector, executor_key):
    with pytest.raises(VaultError):
        open_write_secret(stored(connector, Credential.Role.READ))
    with pytest.raises(VaultError):
        open_read_secret(stored(connector, Credential.Role.WRITE))


def test_the_sealed_secret_is_not_stored_in_clear(connector):
    for role, secret in ((Credential.Role.WRITE, WRITE_TOKEN), (Credential.Role.READ, READ_TOKEN)):
        ciphertext = bytes(stored(connector, role).ciphertext)
        assert secret.encode() not in ciphertext
        assert secret.encode().hex().encode() not in ciphertext
        assert b"token" not in ciphertext


def test_sealing_twice_gives_different_ciphertexts(connector):
    credential = stored(connector, Credential.Role.WRITE)
    assert seal(credential, {"token": "x"}) != seal(credential, {"token": "x"})


def test_sealing_needs_the_public_key(connector, settings):
    settings.COUNTERSIGN_WORKER_PUBLIC_KEY = ""
    with pytest.raises(VaultError, match="public key"):
        credential_set(
            connector=connector, role=Credential.Role.WRITE, secret={"token": "write-token-t"}
        )


def test_the_audit_trail_never_holds_the_secret(connector):
    from actions.lib.models import AuditEvent

    dumped = json.dumps(list(AuditEvent.objects.values("kind", "actor", "data")))
    assert "credential.set" in dumped
    assert WRITE_TOKEN not in dumped and READ_TOKEN not in dumped


# --- read secrets ----------------------------------------------------------------------------


def test_the_read_secret_opens_with_multifernet(connector):
    assert open_read_secret(stored(connector, Credential.Role.READ)) == {"token": READ_TOKEN}


def test_a_rotated_key_list_still_opens_an_old_read_secret(connector, settings):
    credential = stored(connector, Credential.Role.READ)
    old_keys = list(settings.COUNTERSIGN_FERNET_KEYS)
    settings.COUNTERSIGN_FERNET_KEYS = [Fernet.generate_key().decode(), *old_keys]
    assert open_read_secret(credential) == {"token": READ_TOKEN}

    # Re-encrypting under the new key, then retiring the old one, keeps it readable.
    credential.ciphertext = rotate_read_secret(credential)
    settings.COUNTERSIGN_FERNET_KEYS = settings.COUNTERSIGN_FERNET_KEYS[:1]
    assert open_read_secret(credential) == {"token": READ_TOKEN}


def test_a_read_secret_does_not_open_without_its_key(connector, settings):
    credential = stored(connector, Credential.Role.READ)
    settings.COUNTERSIGN_FERNET_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(VaultError) as info:
        open_read_secret(credential)
    assert READ_TOKEN not in str(info.value)


def test_a_read_ciphertext_copied_to_another_row_does_not_open(connector):
    original = stored(connector, Credential.Role.READ)
    other = credential_set(
        connector=connector, role=Credential.Role.READ, secret={"token": "read-token-x"}
    )
    Credential.objects.filter(pk=other.pk).update(ciphertext=bytes(original.ciphertext))
    with pytest.raises(VaultError, match="another credential"):
        open_read_secret(Credential.objects.get(pk=other.pk))


# --- credential selection and presentation ---------------------------------------------------


def test_revoked_and_expired_credentials_are_not_used(connector):
    from datetime import timedelta

    from django.utils import timezone

    write = stored(connector, Credential.Role.WRITE)
    Credential.objects.filter(pk=write.pk).update(revoked_at=timezone.now())
    assert connector.credential(Credential.Role.WRITE) is None
    credential_set(
        connector=connector,
        role=Credential.Role.WRITE,
        secret={"token": "header-token-t"},
        expires_at=timezone.now() - timedelta(seconds=1),
    )
    assert connector.credential(Credential.Role.WRITE) is None


def test_auth_headers_by_scheme(connector):
    credential = Credential(connector=connector, role="read", scheme=Credential.Scheme.BEARER)
    assert auth_headers(credential, {"token": "t"}) == {"Authorization": "Bearer t"}
    credential.scheme, credential.header_name = Credential.Scheme.HEADER, "X-Api-Key"
    assert auth_headers(credential, {"token": "t"}) == {"X-Api-Key": "t"}
    credential.scheme = Credential.Scheme.BASIC
    assert auth_headers(credential, {"username": "u", "password": "p"}) == {
        "Authorization": "Basic dTpw"
    }
