"""Credential revocation, expiry and key rotation (guarantee 4 keeps holding throughout)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.utils import timezone

from actions.lib.models import AuditEvent
from actions.models import Connector, Credential
from actions.vault import VaultError, open_read_secret
from approvals.models import Plan, PlanStatus
from executors.vault import generate_keypair, open_write_secret
from tests.conftest import READ_TOKEN, WRITE_TOKEN


def fresh(plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


def test_revoking_the_write_credential_refuses_the_next_execution(
    upstream, approved, run, executor_key, capsys
):
    assert run(approved()) == PlanStatus.COMPLETED
    plan = approved(input={"contact_id": "c-1002", "email": "grace@new.example"})
    call_command("revoke_credential", "demo", "write")
    assert "1 credential(s) revoked" in capsys.readouterr().out
    assert run(plan) == "skipped:refused"
    assert "no usable write credential" in fresh(plan).outcome_detail
    assert len(upstream.writes()) == 1  # only the first plan's
    event = AuditEvent.objects.get(kind="credential.revoked")
    assert event.actor == "cli" and event.data["role"] == "write"


def test_revoke_credential_names_unknown_connectors(db):
    with pytest.raises(CommandError, match="no connector"):
        call_command("revoke_credential", "nope", "write")


def test_an_expired_write_credential_is_not_used(upstream, approved, run, executor_key):
    plan = approved()
    Credential.objects.filter(role="write").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert run(plan) == "skipped:refused"
    assert "no usable write credential" in fresh(plan).outcome_detail
    assert upstream.writes() == []


def test_rotate_keys_reencrypts_read_secrets_under_the_newest_key(catalog, settings):
    old = settings.COUNTERSIGN_FERNET_KEYS[0]
    new = Fernet.generate_key().decode()
    credential = Connector.objects.get(name="demo").credential("read")
    before = bytes(credential.ciphertext)
    # Step 1: the new key goes first, the old one stays: both decrypt (no downtime).
    settings.COUNTERSIGN_FERNET_KEYS = [new, old]
    assert open_read_secret(credential) == {"token": READ_TOKEN}
    call_command("rotate_keys")
    credential.refresh_from_db()
    assert bytes(credential.ciphertext) != before
    # Step 2: once rotated, the old key can go.
    settings.COUNTERSIGN_FERNET_KEYS = [new]
    assert open_read_secret(credential) == {"token": READ_TOKEN}
    settings.COUNTERSIGN_FERNET_KEYS = [old]
    with pytest.raises(VaultError):
        open_read_secret(credential)


def test_rotate_keys_reseals_write_secrets_to_a_new_worker_key(
    upstream, approved, run, settings, worker_keys, tmp_path
):
    new_private, new_public = generate_keypair()
    (tmp_path / "new.key").write_text(new_private)
    (tmp_path / "new.pub").write_text(new_public)
    old_file = worker_keys["private_file"]
    credential = Connector.objects.get(name="demo").credential("write")
    # Workers hold both keys during the rotation: not-yet-resealed secrets still open.
    settings.COUNTERSIGN_WORKER_KEY_FILE = f"{tmp_path / 'new.key'},{old_file}"
    assert open_write_secret(credential) == {"token": WRITE_TOKEN}
    call_command(
        "rotate_keys",
        "--new-worker-key",
        str(tmp_path / "new.pub"),
        "--old-worker-key",
        old_file,
    )
    credential.refresh_from_db()
    settings.COUNTERSIGN_WORKER_KEY_FILE = str(tmp_path / "new.key")
    assert open_write_secret(credential) == {"token": WRITE_TOKEN}
    settings.COUNTERSIGN_WORKER_KEY_FILE = old_file
    with pytest.raises(VaultError):
        open_write_secret(credential)
    assert AuditEvent.objects.filter(kind="credential.resealed").count() == 1
    # Running it again re-seals nothing (the secret no longer opens with the old key).
    call_command(
        "rotate_keys", "--new-worker-key", str(tmp_path / "new.pub"), "--old-worker-key", old_file
    )
    assert AuditEvent.objects.filter(kind="credential.resealed").count() == 1
    # And a worker with only the new key executes.
    settings.COUNTERSIGN_WORKER_KEY_FILE = str(tmp_path / "new.key")
    assert run(approved()) == PlanStatus.COMPLETED


def test_rotate_keys_needs_both_worker_key_options(db):
    with pytest.raises(CommandError, match="go together"):
        call_command("rotate_keys", "--new-worker-key", "/nonexistent")
