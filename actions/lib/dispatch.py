"""Handing work to workers, by task name.

Every piece of work is a row with a state; a message only wakes a worker up (the sweeper
publishes again whatever a lost message leaves behind). So the side that has work to hand
over names the task and never imports the code that runs it: the web side sends
``executors.execute_plan`` without importing ``executors``. This module is the one
publisher: a broker that is down costs a wake-up (logged), never the request that made
the work, and nothing is published before the transaction that made the work commits.
"""

from __future__ import annotations

import logging
import uuid
from functools import partial

from celery import current_app
from django.db import transaction

from . import logcontext

log = logging.getLogger(__name__)

# The tasks, by the names their modules register (executors/tasks.py, approvals/tasks.py).
EXECUTE_PLAN = "executors.execute_plan"
RECONCILE = "executors.reconcile"
FOLLOW_PENDING = "executors.follow_pending"
SWEEP = "executors.sweep"
SEAL_AUDIT = "executors.seal_audit"
WITNESS_CHECKPOINT = "executors.witness_checkpoint"
NOTIFY_PLAN = "approvals.notify_plan"
DELIVER_WEBHOOK = "approvals.deliver_webhook"
# An escalation or a break-glass decision told to a plan's groups (its own names, so a
# worker of the release before never gets a message it cannot read).
NOTIFY_EVENT = "approvals.notify_event"
DELIVER_EVENT_WEBHOOK = "approvals.deliver_event_webhook"
# A draft policy set replayed over the stored plans (the admin's backtest page).
POLICY_BACKTEST = "approvals.policy_backtest"


def publish(name: str, *args, countdown: float | None = None) -> bool:
    """Send the task now; False (and a warning) if the broker could not take it."""
    # Ids travel as strings: a UUID is not JSON.
    args = [str(a) if isinstance(a, uuid.UUID) else a for a in args]
    try:
        if current_app.conf.task_always_eager:
            # Celery's eager mode (tasks run in this process, as some tests ask) applies
            # to registered tasks only; send_task would still go to the broker. The task
            # modules are found as a worker finds them (config/celery.py autodiscovery).
            if name not in current_app.tasks:
                current_app.loader.import_default_modules()
            current_app.tasks[name].apply_async(args=args, countdown=countdown)
        else:
            # What the log lines are about travels with the message (config/celery.py
            # binds it in the worker): one correlation id from submission to effect.
            context = logcontext.current()
            headers = {logcontext.HEADER: context} if context else None
            current_app.send_task(name, args=args, countdown=countdown, headers=headers)
    except Exception:  # noqa: BLE001 - any broker error; the row is the truth
        log.warning("could not publish %s for %s; the sweeper will see to it", name, args)
        return False
    return True


def on_commit(name: str, *args, countdown: float | None = None) -> None:
    """Send the task once the surrounding transaction commits (at once outside one). The
    callback is a ``partial`` of ``publish``: its ``args[0]`` names the task."""
    transaction.on_commit(partial(publish, name, *args, countdown=countdown))


def task_of(callback) -> str | None:
    """The task an on-commit callback made by ``on_commit`` will send, or None for any
    other callback (tests and tools that look at what a transaction will hand over)."""
    if isinstance(callback, partial) and callback.func is publish and callback.args:
        return callback.args[0]
    return None


def broker_state(*, timeout: float = 2.0) -> tuple[bool, int | None]:
    """(reachable, messages waiting in the task queue or None if unknown): one
    connection, bounded by ``timeout``. For the sweeper, the readiness check and the
    queue depth on /metrics."""
    queue = current_app.conf.task_default_queue
    try:
        with current_app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
            try:
                _, count, _ = conn.default_channel.queue_declare(queue=queue, passive=True)
            except Exception as exc:  # noqa: BLE001
                # "Not found": Redis keeps no empty list (an empty queue is no queue),
                # RabbitMQ has none before a worker declared it: either way, 0 waiting.
                code = getattr(exc, "code", None) or (exc.args[0] if exc.args else None)
                return True, 0 if str(code) == "404" else None
            return True, int(count)
    except Exception:  # noqa: BLE001 - any broker error: unreachable
        return False, None
