"""Celery tasks for reviewers' notifications: ids in, a service call out.

Enqueued after the plan's transaction commits; a broker that is down costs a
notification (logged), never a submission.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

# Seconds before retry n (1-based) of a failing webhook: 10 s, 60 s, 5 min, ...
WEBHOOK_BACKOFF = (10, 60, 300, 900)


@shared_task(name="approvals.notify_plan", acks_late=True, ignore_result=True)
def notify_plan_task(plan_id: str) -> dict:
    from .notifications import notifications_plan

    result = notifications_plan(plan_id=plan_id)
    for target_id in result["webhooks"]:
        _publish(deliver_webhook_task, (target_id, plan_id))
    return result


@shared_task(name="approvals.deliver_webhook", bind=True, acks_late=True, ignore_result=True)
def deliver_webhook_task(self, target_id: int, plan_id: str) -> str:
    from .notifications import webhook_deliver

    delivery = webhook_deliver(target_id=target_id, plan_id=plan_id)
    if delivery.outcome != "failed" or delivery.permanent:
        return delivery.outcome
    tries = self.request.retries + 1
    if tries >= max(1, int(settings.COUNTERSIGN_WEBHOOK_MAX_TRIES)):
        log.warning("webhook %s for plan %s: giving up after %s tries", target_id, plan_id, tries)
        return "gave-up"
    countdown = WEBHOOK_BACKOFF[min(self.request.retries, len(WEBHOOK_BACKOFF) - 1)]
    raise self.retry(countdown=countdown, max_retries=None)


def _publish(task, args: tuple) -> None:
    try:
        task.apply_async(args)
    except Exception:  # noqa: BLE001 - any broker error: a lost notification, not a crash
        log.warning("could not publish %s for %s", task.name, args, exc_info=True)


def notifications_wanted() -> bool:
    """Is any notification target enabled? With none there is no one to tell, and no
    task is queued at all (remembered per catalog generation, which target edits
    change)."""
    from actions.cache import cached

    from .models import NotificationTarget

    return cached("notify", None, NotificationTarget.objects.filter(enabled=True).exists)


def notify_awaiting(plan_id) -> None:
    """Tell the reviewer groups about this plan once the surrounding transaction commits
    (callers ask ``notifications_wanted()`` first)."""
    plan_id = str(plan_id)
    transaction.on_commit(lambda: _publish(notify_plan_task, (plan_id,)))
