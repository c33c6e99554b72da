"""Celery tasks for reviewers' notifications and the admin's policy backtests: ids in,
a service call out.

Enqueued by name (actions/lib/dispatch.py) after the plan's transaction commits; a
broker that is down costs a notification (logged), never a submission.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from actions.lib import dispatch

from .decisions.backtest import STALLED_AFTER, policy_backtest_execute
from .notifications import NoticeEvent, notifications_plan, webhook_deliver

log = logging.getLogger(__name__)

# Seconds before retry n (1-based) of a failing webhook: 10 s, 60 s, 5 min, ...
WEBHOOK_BACKOFF = (10, 60, 300, 900)


@shared_task(name=dispatch.NOTIFY_PLAN, acks_late=True, ignore_result=True)
def notify_plan_task(plan_id: str) -> dict:
    result = notifications_plan(plan_id=plan_id)
    for target_id in result["webhooks"]:
        dispatch.publish(dispatch.DELIVER_WEBHOOK, target_id, plan_id)
    return result


@shared_task(name=dispatch.NOTIFY_EVENT, acks_late=True, ignore_result=True)
def notify_event_task(plan_id: str, event: str, group: str = "") -> dict:
    result = notifications_plan(plan_id=plan_id, event=event, group=group)
    for target_id in result["webhooks"]:
        dispatch.publish(dispatch.DELIVER_EVENT_WEBHOOK, target_id, plan_id, event)
    return result


@shared_task(name=dispatch.DELIVER_WEBHOOK, bind=True, acks_late=True, ignore_result=True)
def deliver_webhook_task(self, target_id: int, plan_id: str) -> str:
    return _deliver(self, target_id, plan_id, NoticeEvent.AWAITING)


@shared_task(name=dispatch.DELIVER_EVENT_WEBHOOK, bind=True, acks_late=True, ignore_result=True)
def deliver_event_webhook_task(self, target_id: int, plan_id: str, event: str) -> str:
    return _deliver(self, target_id, plan_id, NoticeEvent(event))


def _deliver(task, target_id: int, plan_id: str, event: NoticeEvent) -> str:
    delivery = webhook_deliver(target_id=target_id, plan_id=plan_id, event=event)
    if delivery.outcome != "failed" or delivery.permanent:
        return delivery.outcome
    tries = task.request.retries + 1
    if tries >= max(1, int(settings.COUNTERSIGN_WEBHOOK_MAX_TRIES)):
        log.warning("webhook %s for plan %s: giving up after %s tries", target_id, plan_id, tries)
        return "gave-up"
    countdown = WEBHOOK_BACKOFF[min(task.request.retries, len(WEBHOOK_BACKOFF) - 1)]
    raise task.retry(countdown=countdown, max_retries=None)


@shared_task(name=dispatch.POLICY_BACKTEST, bind=True, acks_late=True, ignore_result=True)
def policy_backtest_task(self, backtest_id: str) -> str:
    # Reads the window's plans page by page (bounded memory); under a minute for 100,000
    # plans on one worker process (docs/benchmarks.md, B8), which executes nothing
    # meanwhile.
    outcome = policy_backtest_execute(backtest_id=backtest_id)
    if outcome == "busy":
        # Another run of it is moving, or was when its worker died: look again once it
        # would count as stopped, and take it over then if it has.
        raise self.retry(countdown=STALLED_AFTER.total_seconds(), max_retries=None)
    return outcome
