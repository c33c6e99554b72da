"""A worker keeps its database connection from one task to the next (Celery's Django
fix-up would otherwise close it around every task: a new PostgreSQL connection, 5-13 ms,
in front of every execution), and still drops one that outlived
CONN_MAX_AGE, or broke, as Django does between requests."""

from __future__ import annotations

import gc
import os
import threading
import time
from types import SimpleNamespace

import pytest
from celery.fixups.django import DjangoWorkerFixup
from celery.signals import task_postrun, task_prerun
from django.db import connection, transaction

from config.celery import app


@pytest.fixture
def run_task(transactional_db):
    """What a prefork worker does around one task: the fix-up's handlers and the
    task_prerun/task_postrun signals, for a task that is not eager."""
    fixup = DjangoWorkerFixup(app)

    class Task:  # a signal's sender must be hashable
        name = "t"
        request = SimpleNamespace(is_eager=False)

    task = Task()

    def run(body=lambda: None):
        fixup.on_task_prerun(sender=task)
        task_prerun.send(sender=task, task=task, task_id="x", args=(), kwargs={})
        body()
        fixup.on_task_postrun(sender=task)
        task_postrun.send(sender=task, task=task, task_id="x", args=(), kwargs={})

    return run


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.fixture
def max_age():
    saved = connection.settings_dict["CONN_MAX_AGE"]

    def set_to(seconds):
        connection.settings_dict["CONN_MAX_AGE"] = seconds
        connection.close()  # the next connection takes the new age

    yield set_to
    connection.settings_dict["CONN_MAX_AGE"] = saved
    connection.close()


def test_the_connection_is_kept_between_tasks(run_task, max_age):
    max_age(60)
    pids = []
    for _ in range(3):
        run_task(lambda: pids.append(backend_pid()))
    assert len(set(pids)) == 1


def test_a_connection_past_its_age_is_replaced(run_task, max_age):
    max_age(0.2)
    first = []
    run_task(lambda: first.append(backend_pid()))
    time.sleep(0.3)
    second = []
    run_task(lambda: second.append(backend_pid()))
    assert first != second


def test_a_broken_connection_is_replaced(run_task, max_age):
    max_age(60)
    first = []

    def failing():
        first.append(backend_pid())
        connection.connection.close()  # as if PostgreSQL had gone away mid-task
        connection.errors_occurred = True

    run_task(failing)
    second = []
    run_task(lambda: second.append(backend_pid()))
    assert first != second


# --- the audit sealer's thread ------------------------------------------------------------


@pytest.fixture
def sealer_ticks(transactional_db, sealer_key, settings, monkeypatch, max_age):
    """The worker's sealer thread (config/celery.py, Sealer) ticking every 20 ms; yields
    the backend pid each tick ran on, and stops the thread after the test."""
    import executors.tasks
    from config.celery import Sealer

    settings.COUNTERSIGN_SEAL_SECONDS = 0.02
    max_age(60)
    seal = executors.tasks.seal_audit_task
    ticks: list[int] = []

    def counted():
        result = seal()
        assert "error" not in result
        ticks.append(backend_pid())
        return result

    monkeypatch.setattr(executors.tasks, "seal_audit_task", counted)
    step = Sealer(SimpleNamespace())
    step.start(None)
    yield ticks
    step.stop(None)


def _wait_for(ticks: list, n: int) -> None:
    deadline = time.monotonic() + 30
    while len(ticks) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(ticks) >= n


def test_the_sealer_keeps_one_connection_across_its_ticks(sealer_ticks):
    from django.db.backends.signals import connection_created

    from actions.lib.audit import audit_record
    from actions.lib.checkpoints import audit_unsealed_age

    opened = []

    def note(sender, **kwargs):
        if threading.current_thread().name == "audit-sealer":
            opened.append(sender)

    connection_created.connect(note)
    try:
        for n in range(10):
            with transaction.atomic():
                audit_record(kind="test.tick", actor="test", data={"n": n})
            _wait_for(sealer_ticks, 3 * (n + 1))
    finally:
        connection_created.disconnect(note)
    assert len(set(sealer_ticks)) == 1 and len(opened) <= 1
    _wait_for(sealer_ticks, len(sealer_ticks) + 2)
    assert audit_unsealed_age() == 0  # every event sealed on the kept connection


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_pool_child_forked_from_the_sealers_process_leaves_its_connection_alone(
    sealer_ticks,
):
    from config import celery as celery_module

    _wait_for(sealer_ticks, 2)
    (wrapper,) = celery_module._thread_connections
    assert wrapper.connection is not None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # a Celery pool child: the copy is dropped, and collected, unclosed
        try:
            ok = wrapper.connection is None and celery_module._thread_connections == []
            del wrapper
            gc.collect()
            os.write(write_end, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 1)
    os.waitpid(pid, 0)
    os.close(read_end)
    assert answer == b"1"
    before = len(sealer_ticks)
    _wait_for(sealer_ticks, before + 3)
    # The parent's sealer goes on, on the same PostgreSQL session as before the fork.
    assert len(set(sealer_ticks)) == 1


def test_the_sealer_replaces_a_connection_the_database_ended(sealer_ticks):
    _wait_for(sealer_ticks, 2)
    ended = sealer_ticks[-1]
    with connection.cursor() as cursor:  # as a PostgreSQL restart or failover would
        cursor.execute("SELECT pg_terminate_backend(%s)", [ended])
    deadline = time.monotonic() + 30
    while sealer_ticks[-1] == ended and time.monotonic() < deadline:
        time.sleep(0.01)
    _wait_for(sealer_ticks, len(sealer_ticks) + 3)
    assert len(set(sealer_ticks[sealer_ticks.index(ended) :])) == 2  # one new, then kept


# --- the upstream's -----------------------------------------------------------------------


def test_executions_reuse_the_upstream_connections(
    upstream, catalog, approved, run, executor_key, settings, monkeypatch
):
    """The re-read, the write and the verification of one execution after another go on
    the connections kept from the ones before (actions/lib/http.py), one per role."""
    import socket

    from actions.lib import http
    from approvals.models import PlanStatus

    settings.COUNTERSIGN_RATE_LIMIT = ""
    monkeypatch.setattr(http, "WRITE_KEEPALIVE_SECONDS", 60.0)  # however slow the machine
    opened = []
    create_connection = socket.create_connection

    def counted(address, *args, **kwargs):
        opened.append(address)
        return create_connection(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", counted)
    for n in range(4):
        plan = approved(input={"contact_id": "c-1001", "email": f"kept{n}@new.example"})
        assert run(plan) == PlanStatus.COMPLETED
    # The first execution opened the write's connection; the preview's read one serves
    # every read. Nothing opened after that.
    assert len(opened) <= 2
