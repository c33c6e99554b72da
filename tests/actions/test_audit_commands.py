"""The audit trail's commands (the signing key, sealing, verifying, exporting) and the
checkpoints sent to a witness."""

from __future__ import annotations

import base64
import json
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from actions.lib import dispatch
from actions.lib.audit import audit_record
from actions.lib.checkpoints import (
    audit_seal,
    checkpoint_witness,
    signing_key,
    verify_checkpoints,
    verify_keys,
)
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


@pytest.fixture
def witness():
    """A witness on 127.0.0.1 that keeps what it is sent and answers ``status``."""
    received: list[bytes] = []
    state = {"status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(state["status"])
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield {"url": f"http://127.0.0.1:{server.server_port}/", "received": received, "state": state}
    server.shutdown()


def test_each_checkpoint_goes_to_the_witness_signed(
    db, sealer_key, settings, witness, django_capture_on_commit_callbacks
):
    settings.COUNTERSIGN_AUDIT_WITNESS_URL = witness["url"]
    settings.COUNTERSIGN_SEAL_BATCH = 1
    for n in range(2):
        with transaction.atomic():
            audit_record(kind="test.event", actor="tester", data={"n": n})
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        audit_seal()
    handed = [c.args[1] for c in callbacks if dispatch.task_of(c) == dispatch.WITNESS_CHECKPOINT]
    assert handed == list(
        AuditCheckpoint.objects.order_by("tree_size").values_list("id", flat=True)
    )
    assert [checkpoint_witness(checkpoint_id=i) for i in handed] == ["delivered", "delivered"]
    copies = [json.loads(body) for body in witness["received"]]
    assert [c["tree_size"] for c in copies] == [1, 2]
    # The witness needs nothing but the public key to check what it holds.
    assert verify_checkpoints(copies, verify_keys()) == []
    assert "signature" in copies[0] and "frontier" not in copies[0]

    witness["state"]["status"] = 503
    assert checkpoint_witness(checkpoint_id=handed[0]) == "failed"
    witness["state"]["status"] = 400
    assert checkpoint_witness(checkpoint_id=handed[0]) == "refused"
    settings.COUNTERSIGN_AUDIT_WITNESS_URL = "http://127.0.0.1:9/"
    assert checkpoint_witness(checkpoint_id=handed[0]) == "failed"


def test_a_sealing_run_takes_few_statements(db, sealer_key, settings):
    """An idle run is one read; a run with new events one read each for the lease, the
    horizon (the running transactions of other databases in the same statement), the last
    checkpoint and the events, the checkpoint's transaction, and the lease's release.
    Catching up ends the run: no second horizon to find nothing more."""
    settings.COUNTERSIGN_SEAL_BATCH = 100
    with transaction.atomic():
        audit_record(kind="test.event", actor="tester")
    audit_seal()  # the lease's row exists from now on
    with CaptureQueriesContext(connection) as idle:
        assert audit_seal()["idle"]
    assert len(idle) == 1
    with transaction.atomic():
        for n in range(30):
            audit_record(kind="test.event", actor="tester", data={"n": n})
    with CaptureQueriesContext(connection) as run:
        report = audit_seal()
    assert (report["checkpoints"], report["events"]) == (1, 30)
    # 6 reads and writes, and the checkpoint's transaction (begin, lease, insert, end).
    assert len(run) == 10, [q["sql"][:80] for q in run.captured_queries]
