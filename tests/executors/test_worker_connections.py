"""A worker keeps its database connection from one task to the next (Celery's Django
fix-up would otherwise close it around every task: a new PostgreSQL connection, 5-13 ms,
in front of every execution), and still drops one that outlived
CONN_MAX_AGE, or broke, as Django does between requests. Web processes, which keep no
connection of their own under ASGI, borrow from a bounded pool."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from celery.fixups.django import DjangoWorkerFixup
from celery.signals import task_postrun, task_prerun
from django.db import connection

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


POOL_PROBE = """
import json, config.asgi
from django.conf import settings
db = settings.DATABASES["default"]
print(json.dumps({"pool": db["OPTIONS"].get("pool"), "max_age": db["CONN_MAX_AGE"]}))
"""


def _web_settings(**env: str) -> dict:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from django.conf import settings

    clean = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    clean.update(env, DJANGO_SETTINGS_MODULE="config.settings", COUNTERSIGN_ENV="test")
    clean["DATABASE_URL"] = "postgres://postgres@127.0.0.1:5432/countersign"
    clean["COUNTERSIGN_SECRET_KEY"] = "probe-" + "x" * 50
    clean["COUNTERSIGN_FERNET_KEYS"] = ",".join(settings.COUNTERSIGN_FERNET_KEYS)
    out = subprocess.run(
        [sys.executable, "-c", POOL_PROBE],
        cwd=Path(__file__).resolve().parents[2],
        env=clean,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_web_processes_borrow_connections_from_a_bounded_pool():
    """Under ASGI (config/asgi.py) a web process keeps no connection per request thread:
    it borrows from a pool of 8, or of COUNTERSIGN_DB_POOL_SIZE; 0 turns the pool off."""
    assert _web_settings() == {
        "pool": {"min_size": 1, "max_size": 8, "timeout": 10},
        "max_age": 0,
    }
    assert _web_settings(COUNTERSIGN_DB_POOL_SIZE="3")["pool"]["max_size"] == 3
    assert _web_settings(COUNTERSIGN_DB_POOL_SIZE="0") == {"pool": None, "max_age": 0}
