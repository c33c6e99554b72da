"""The audit trail's commands: the signing key, sealing once, verifying and exporting."""

from __future__ import annotations

import base64
import stat

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from actions.lib.audit import audit_record
from actions.lib.checkpoints import signing_key
from actions.lib.models import AuditCheckpoint


def test_audit_keygen_writes_a_private_key_only_its_owner_reads(tmp_path, settings, capsys):
    private, public = tmp_path / "audit.key", tmp_path / "audit.pub"
    call_command("audit_keygen", "--private", str(private), "--public", str(public))
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    settings.COUNTERSIGN_AUDIT_KEY_FILE = str(private)
    key = signing_key()
    assert base64.b64decode(public.read_text()) == bytes(key.verify_key)
    assert private.read_text().strip() not in capsys.readouterr().out
    with pytest.raises(CommandError, match="refusing to overwrite"):
        call_command("audit_keygen", "--private", str(private), "--public", str(public))
    call_command("audit_keygen", "--private", str(private), "--if-missing")


def test_seal_audit_needs_the_key(db, settings):
    with transaction.atomic():
        audit_record(kind="test.event", actor="tester")
    settings.COUNTERSIGN_AUDIT_KEY_FILE = ""
    with pytest.raises(CommandError, match="holds no audit signing key"):
        call_command("seal_audit")
    assert not AuditCheckpoint.objects.exists()


def test_seal_then_verify_then_export(db, sealer_key, tmp_path, capsys):
    call_command("seal_audit")
    assert "nothing to seal" in capsys.readouterr().out
    with transaction.atomic():
        audit_record(kind="test.event", actor="tester", data={"n": 1})
    call_command("verify_audit")
    assert "1 not sealed yet" in capsys.readouterr().out
    call_command("seal_audit")
    assert "sealed 1 events in 1 checkpoints" in capsys.readouterr().out
    call_command("verify_audit")
    assert "1 sealed in 1 checkpoints, 0 not sealed yet" in capsys.readouterr().out
    export = tmp_path / "copy.jsonl"
    call_command("verify_audit", "--export", str(export))
    call_command("verify_audit", "--copy", str(export))
    call_command("verify_audit", "--offline", str(export))
    assert "export intact: 1 checkpoints, 1 events" in capsys.readouterr().out


def test_verify_audit_explains_bad_input(db, tmp_path, capsys):
    with pytest.raises(CommandError, match="not a public key"):
        call_command("verify_audit", "--public-key", "not-base64!")
    with pytest.raises(CommandError, match="cannot read the export"):
        call_command("verify_audit", "--offline", str(tmp_path / "missing.jsonl"))
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("{not json\n")
    with pytest.raises(CommandError, match="NOT intact: 1 problems"):
        call_command("verify_audit", "--offline", str(garbage))
    assert "line 1: not JSON" in capsys.readouterr().err
    garbage.write_text('{"tree_size": 1}\n')
    with pytest.raises(CommandError, match="cannot read the export"):
        call_command("verify_audit", "--offline", str(garbage))
