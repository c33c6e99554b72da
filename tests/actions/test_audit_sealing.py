"""Sealing the audit trail with real processes on PostgreSQL: writers that never wait
for each other, numbers rolled back or committed late, a sealer killed mid-batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from actions.lib.audit import audit_record, event_bytes
from actions.lib.canonical import sha256_hex
from actions.lib.checkpoints import audit_seal, audit_unsealed_age, audit_verify
from actions.lib.models import AuditCheckpoint, AuditEvent

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="concurrent writers need PostgreSQL"
)

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import random, sys, time
import django
django.setup()
from django.db import transaction
from actions.lib.audit import audit_record

count, seed = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
committed = 0
for i in range(count):
    try:
        with transaction.atomic():
            audit_record(kind="test.concurrent", actor=f"writer:{seed}", data={"i": i})
            # Commit after others have drawn later numbers, or roll back.
            time.sleep(rng.random() * 0.01)
            if rng.random() < 0.15:
                raise RuntimeError("rolled back")
        committed += 1
    except RuntimeError:
        pass
print(committed)
"""


def _eventually(check, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


@pytest.fixture
def sealer_env(live_env, audit_keys):
    return {
        **live_env,
        "COUNTERSIGN_AUDIT_KEY_FILE": audit_keys["private_file"],
        "COUNTERSIGN_SEAL_LEASE_SECONDS": "1",
    }


def _start_sealer(env: dict, log: Path, *, batch: int = 5000) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "seal_audit", "--loop", "0.02"],
        cwd=ROOT,
        env={**env, "COUNTERSIGN_SEAL_BATCH": str(batch)},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_concurrent_writers_never_leave_a_gap_the_sealer_cannot_close(
    transactional_db, live_env, sealer_env, tmp_path, sealer_key
):
    """Four writer processes, each committing late or rolling back at random, while a
    sealer process seals as fast as it can: every committed event ends up sealed, at
    its place, and every number rolled back is recorded as unused."""
    sealer = _start_sealer(sealer_env, tmp_path / "sealer.log")
    try:
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, "150", str(seed)],
                cwd=ROOT,
                env=live_env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for seed in range(4)
        ]
        committed = sum(int(w.communicate(timeout=300)[0]) for w in writers)
        assert all(w.returncode == 0 for w in writers)
        assert AuditEvent.objects.count() == committed
        assert _eventually(lambda: audit_unsealed_age() == 0 and AuditCheckpoint.objects.exists())
        assert _eventually(
            lambda: AuditCheckpoint.objects.order_by("-tree_size").first().tree_size == committed
        ), (tmp_path / "sealer.log").read_text()
    finally:
        _stop(sealer)
    report = audit_verify()
    assert report.ok, [str(p) for p in report.problems]
    assert report.sealed == report.events == committed and report.unsealed == 0
    # The numbers nobody committed are exactly the ones the checkpoints list as unused.
    ids = set(AuditEvent.objects.values_list("id", flat=True))
    unused = {
        n
        for cp in AuditCheckpoint.objects.all()
        for first, last in cp.gaps
        for n in range(max(first, min(ids)), last + 1)
    }
    assert unused and unused.isdisjoint(ids)
    assert unused | ids == set(range(min(ids), max(ids) + 1))
    assert AuditCheckpoint.objects.count() > 1


def test_an_open_transaction_holds_sealing_back_and_its_event_is_sealed_in_place(
    transactional_db, sealer_key, settings
):
    """A writer that drew its number and has not committed yet: the sealer waits for it
    (bounded) instead of sealing past it, and later seals it at its place."""
    settings.COUNTERSIGN_SEAL_WAIT_SECONDS = 0.3
    drawn, release = threading.Event(), threading.Event()

    def slow_writer():
        try:
            with transaction.atomic():
                audit_record(kind="test.slow", actor="tester")
                drawn.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    try:
        assert drawn.wait(30)
        for n in range(2):
            with transaction.atomic():
                audit_record(kind="test.quick", actor="tester", data={"n": n})
        report = audit_seal()
        assert report["waiting"] and report["checkpoints"] == 0
        assert not AuditCheckpoint.objects.exists()
    finally:
        release.set()
        thread.join(30)
    report = audit_seal()
    assert report["events"] == 3 and not report["waiting"]
    slow = AuditEvent.objects.get(kind="test.slow")
    assert slow.id == AuditEvent.objects.order_by("id").first().id
    assert audit_verify().ok


def test_a_sealer_killed_mid_batch_is_resumed_without_a_fork(
    transactional_db, sealer_env, tmp_path, sealer_key, settings
):
    """A sealer process is killed while it works through a backlog in small batches;
    the next one goes on from the last whole checkpoint: one line of checkpoints, every
    event sealed once."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence('approvals_auditevent', 'id'))"
            " FROM (SELECT pg_current_xact_id() OFFSET 0) AS x, generate_series(1, 6000)"
        )
        ids = sorted(row[0] for row in cursor.fetchall())
        events = []
        now = timezone.now()
        for seq in ids:
            body = event_bytes(
                seq=seq,
                at=now.isoformat(),
                kind="test.backlog",
                actor="tester",
                plan_id="",
                fingerprint="",
                data={"seq": seq},
            )
            events.append(
                AuditEvent(
                    id=seq,
                    at=now,
                    kind="test.backlog",
                    actor="tester",
                    data={"seq": seq},
                    body=body.decode(),
                    hash=sha256_hex(body),
                )
            )
        AuditEvent.objects.bulk_create(events, batch_size=2000)
    sealer = _start_sealer(sealer_env, tmp_path / "sealer.log", batch=200)
    try:
        assert _eventually(lambda: AuditCheckpoint.objects.count() >= 3, 120), (
            tmp_path / "sealer.log"
        ).read_text()
    finally:
        _stop(sealer)
    before = AuditCheckpoint.objects.count()
    assert before < 30, "the sealer finished before it could be killed"
    settings.COUNTERSIGN_SEAL_BATCH = 1000
    # Its lease (1 s) runs out; then the next sealer takes over.
    resumed = _eventually(lambda: audit_seal()["leased"], 10)
    assert resumed
    audit_seal()
    sizes = list(
        AuditCheckpoint.objects.order_by("tree_size").values_list("previous_size", "tree_size")
    )
    assert [prev for prev, _ in sizes] == [0] + [size for _, size in sizes[:-1]]
    assert sizes[-1][1] == 6000 and len(sizes) > before
    report = audit_verify()
    assert report.ok and report.sealed == 6000, [str(p) for p in report.problems]
