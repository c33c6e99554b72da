"""What a worker logs about its tasks: not Celery's "received" line for every task (the
plan's own lines say what happened to it); a task's outcome, and a task that fails."""

from __future__ import annotations

import logging

from celery.app.trace import build_tracer

from config.celery import app


@app.task(name="tests.worker_logging.fine", shared=False)
def fine() -> str:
    return "skipped:completed"


@app.task(name="tests.worker_logging.broken", shared=False)
def broken() -> str:
    raise RuntimeError("broken on purpose")


def _run(task) -> None:
    request = {"id": "00000000-0000-0000-0000-000000000001", "headers": {}, "delivery_info": {}}
    build_tracer(task.name, task, app=app)(request["id"], (), {}, request)


def test_the_received_line_is_left_out():
    # celery.worker.strategy logs "Task … received" at INFO, once per task.
    assert not logging.getLogger("celery.worker.strategy").isEnabledFor(logging.INFO)
    assert logging.getLogger("celery.worker.strategy").isEnabledFor(logging.WARNING)


def test_a_tasks_outcome_is_logged(caplog):
    caplog.set_level(logging.DEBUG)
    _run(fine)
    (record,) = [r for r in caplog.records if r.name == "celery.app.trace"]
    assert "succeeded in" in record.getMessage() and "'skipped:completed'" in record.getMessage()


def test_a_task_that_fails_is_logged_with_its_traceback(caplog):
    caplog.set_level(logging.DEBUG)
    _run(broken)
    (record,) = [r for r in caplog.records if r.name == "celery.app.trace"]
    assert record.levelno == logging.ERROR and "raised unexpected" in record.getMessage()
    assert record.exc_info is not None
