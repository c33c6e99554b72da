"""Celery tasks: thin wrappers that take ids and call services.

A message is only a wake-up. Losing one delays work until the sweeper republishes it;
delivering one twice is harmless because execution claims the plan under a row lock.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import transaction

log = logging.getLogger(__name__)


@shared_task(name="executors.execute_plan", bind=True, acks_late=True, ignore_result=True)
def execute_plan_task(self, plan_id: str) -> str:
    from .services import execution_run

    return execution_run(plan_id=plan_id)


@shared_task(name="executors.follow_pending", acks_late=True, ignore_result=True)
def follow_pending_task(plan_id: str) -> str:
    from .services import pending_follow

    return pending_follow(plan_id=plan_id)


@shared_task(name="executors.reconcile", acks_late=True, ignore_result=True)
def reconcile_task(plan_id: str) -> str:
    from .services import reconcile

    return reconcile(plan_id=plan_id)


@shared_task(name="executors.sweep", ignore_result=True)
def sweep_task() -> dict:
    from .services import sweep

    return sweep()


def queued_messages() -> int | None:
    """How many messages wait in the broker's queue for a worker, or None if unknown.

    The sweeper uses it to tell a backlog (messages still queued) from lost wake-ups."""
    from celery import current_app

    queue = current_app.conf.task_default_queue
    try:
        with current_app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            _, count, _ = conn.default_channel.queue_declare(queue=queue, passive=True)
            return int(count)
    except Exception:  # noqa: BLE001 - no such queue yet, broker down: unknown
        return None


def publish(plan_id: str, countdown: float | None = None) -> None:
    """Send the wake-up. A broker failure is logged, not raised: the row is the truth."""
    try:
        execute_plan_task.apply_async((plan_id,), countdown=countdown)
    except Exception:  # noqa: BLE001 - any broker error; the sweeper republishes
        log.warning("could not publish execution of plan %s; the sweeper will retry", plan_id)


def enqueue_execution(plan_id, *, countdown: float | None = None) -> None:
    """Publish after the surrounding transaction commits, never before."""
    plan_id = str(plan_id)
    transaction.on_commit(lambda: publish(plan_id, countdown))
