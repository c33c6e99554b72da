"""A worker keeps its database connection from one task to the next (Celery's Django
fix-up would otherwise close it around every task: a new PostgreSQL connection, 5-13 ms,
in front of every execution), and still drops one that outlived
CONN_MAX_AGE, or broke, as Django does between requests."""

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
