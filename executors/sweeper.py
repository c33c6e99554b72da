"""The sweeper: the database is the source of truth and a broker message only a wake-up,
so every few seconds (celery beat, COUNTERSIGN_SWEEP_SECONDS) this finds the work a lost
message or a dead worker left behind and sets it going again. It changes plans and
attempts only through approvals.lifecycle, as the executor does."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from actions.lib import dispatch, logcontext
from actions.lib.actors import SWEEPER
from actions.lib.exceptions import InvalidTransition
from approvals.decisions.escalations import escalations_announce
from approvals.decisions.refusals import refused_submissions_purge
from approvals.lifecycle import approvals_return, attempt_transition, plan_transition, plans_expire
from approvals.models import Attempt, Heartbeat, Plan, PlanStatus
from approvals.ops.heartbeats import heartbeat_record

from . import broker
from .reconciliation import RECONCILE_DELAYS, due, wake_look

# The most plans whose lease ran out settled in one sweep (the next sweep takes the rest).
LEASE_BATCH = 500


def sweep(*, now=None) -> dict[str, int]:
    """Recover from lost messages and dead workers; expire what waited too long.

    * approved plans whose wake-up was published long ago and never acted on are
      published again (a duplicate is harmless: the claim is a row lock);
    * executing plans past their lease: if the attempt provably sent nothing, the plan
      goes back to approved; if the request may have left, the plan is ``unknown``
      and is never sent again;
    * looks at unsettled outcomes (pending, unknown) that are overdue are published
      again (``_overdue_looks``);
    * escalations whose time has come are announced to the group they reach
      (approvals/decisions/escalations.py);
    * refused submissions past their retention are deleted, a batch a sweep
      (approvals/decisions/refusals.py: they are never plans, so nothing else here
      reads them).

    Each run records the sweeper's heartbeat first, so a sweeper that stops running is
    seen on the dashboard and by the readiness check.
    """
    now = now or timezone.now()
    heartbeat_record(name="sweeper", kind=Heartbeat.Kind.SWEEPER)
    report = {
        "expired": plans_expire(now=now),
        "escalated": escalations_announce(now=now),
        "refusals_purged": refused_submissions_purge(now=now),
        "requeued": 0,
        "still_queued": 0,
        "recovered": 0,
        "unknown": 0,
        "reads_lost": 0,
        "looks": 0,
    }
    for plan_id in _lost_wakeups(now, report):
        # Each plan's lines (and the message published for it) name that plan only.
        with logcontext.scope(plan_id=plan_id), transaction.atomic():
            if Plan.objects.filter(id=plan_id, status=PlanStatus.APPROVED).update(enqueued_at=now):
                dispatch.on_commit(dispatch.EXECUTE_PLAN, plan_id)
                report["requeued"] += 1
    lease_before = now - timedelta(seconds=settings.COUNTERSIGN_EXECUTION_LEASE_SECONDS)
    for plan in Plan.objects.filter(
        status=PlanStatus.EXECUTING, claimed_at__lte=lease_before
    ).select_related("action")[:LEASE_BATCH]:
        with logcontext.scope(**logcontext.plan_fields(plan)):
            try:
                report[_settle_lost_worker(plan, now)] += 1
            except InvalidTransition:
                pass  # the worker finished meanwhile
    report["looks"] = _overdue_looks(now)
    return report


def _lost_wakeups(now, report: dict[str, int]) -> list:
    """Approved plans to publish again: idle past COUNTERSIGN_REQUEUE_AFTER_SECONDS, and
    no more than the broker queue can be missing.

    Under a backlog, approved plans wait longer than the requeue delay with their
    message still queued; publishing them all again would multiply the deliveries each
    sweep. So if the queue holds ``d`` messages and ``n`` plans are overdue, at most
    ``n - d`` messages can have been lost, and only that many (oldest first, at most
    COUNTERSIGN_REQUEUE_BATCH per sweep) are published again. The others keep their
    ``enqueued_at`` and are looked at again next sweep, once the queue has moved. When
    the queue depth cannot be read, every overdue plan counts (up to the batch).
    """
    requeue_before = now - timedelta(seconds=settings.COUNTERSIGN_REQUEUE_AFTER_SECONDS)
    overdue = Plan.objects.filter(status=PlanStatus.APPROVED, enqueued_at__lte=requeue_before)
    ids = list(
        overdue.order_by("enqueued_at").values_list("id", flat=True)[
            : settings.COUNTERSIGN_REQUEUE_BATCH
        ]
    )
    if not ids:
        return ids
    depth = broker.queued_messages()
    if depth:
        missing = max(0, overdue.count() - depth)
        report["still_queued"] = len(ids) - min(len(ids), missing)
        ids = ids[:missing]
    return ids


def _settle_lost_worker(plan: Plan, now) -> str:
    """An execution past its lease: its worker is presumed dead. Returns the report key.

    The attempt is locked and its state decided on *under the lock*: a slow (not dead)
    worker commits "sending" with a conditional update on this row, so either it got
    there first (and we see sending) or it will find the row moved on and not send."""
    with transaction.atomic():
        attempt = Attempt.objects.select_for_update().filter(plan=plan).first()
        # sends == 0: "sending" was committed but the request never left (attempts fenced
        # the older way; the fence now counts the first send in the same statement, so a
        # worker killed after it is read as "may have left").
        unsent = (
            attempt is None
            or attempt.state
            in (
                Attempt.State.PREPARED,
                Attempt.State.NOT_SENT,
            )
            or (attempt.state == Attempt.State.SENDING and attempt.sends == 0)
        )
        if unsent:
            if attempt is not None and attempt.state != Attempt.State.NOT_SENT:
                attempt_transition(
                    attempt, to=Attempt.State.NOT_SENT, error="the worker stopped before sending"
                )
            approvals_return(plan)
            plan_transition(
                plan,
                to=PlanStatus.APPROVED,
                actor=SWEEPER,
                event="execution.recovered",
                data={"reason": "the worker stopped before sending"},
                enqueued_at=now,
            )
            dispatch.on_commit(dispatch.EXECUTE_PLAN, plan.id)
            return "recovered"
        if plan.kind == "read":
            # Nothing changes by a read: no outcome to look up, the agent reads again.
            if attempt.state != Attempt.State.ANSWERED:
                attempt_transition(
                    attempt, to=Attempt.State.LOST, finished_at=now, error="worker lost"
                )
            plan_transition(
                plan,
                to=PlanStatus.REJECTED,
                actor=SWEEPER,
                event="read.rejected",
                data={"reason": "worker lost during the read"},
                finished_at=now,
                outcome_detail="the worker stopped during the read; nothing changed "
                "(propose it again)",
                verified=False,
            )
            return "reads_lost"
        if attempt.state == Attempt.State.ANSWERED:
            # The answer arrived and was kept; the worker stopped while reading the
            # target back to verify it. The reconciliation is that same read-back.
            reason = "worker lost while verifying the answer"
            detail = (
                "the upstream answered; the worker stopped while checking the effect, "
                "which is being looked up again"
            )
        else:
            attempt_transition(
                attempt,
                to=Attempt.State.LOST,
                finished_at=now,
                error="the worker stopped after the request may have left",
            )
            reason = "worker lost after sending"
            detail = (
                "the worker stopped after the request may have left; "
                "the change may or may not have applied"
            )
        plan_transition(
            plan,
            to=PlanStatus.UNKNOWN,
            actor=SWEEPER,
            event="execution.unknown",
            data={"reason": reason},
            finished_at=now,
            outcome_detail=detail,
            next_check_at=due(now, RECONCILE_DELAYS[0]),
        )
        wake_look(plan.id, PlanStatus.UNKNOWN, countdown=RECONCILE_DELAYS[0])
        return "unknown"


def _overdue_looks(now) -> int:
    """Publish again the looks at unsettled outcomes (status requests of accepted work,
    reconciliations of unknown outcomes) whose time came and went with no worker acting
    on them: the message was lost, or the worker holding it died (with Redis, a message a
    dead worker held comes back only after the visibility timeout, an hour).

    Each is marked due now before it is published, so the next sweep leaves it alone for
    COUNTERSIGN_REQUEUE_AFTER_SECONDS; the look itself reschedules or clears it. A
    duplicate delivery is harmless: a look at a settled plan does nothing."""
    grace = timedelta(seconds=settings.COUNTERSIGN_REQUEUE_AFTER_SECONDS)
    overdue = (
        Plan.objects.filter(status__in=PlanStatus.unsettled(), next_check_at__lte=now - grace)
        .order_by("next_check_at")
        .values_list("id", "status", "next_check_at")[: settings.COUNTERSIGN_REQUEUE_BATCH]
    )
    published = 0
    for plan_id, status, due_at in overdue:
        with logcontext.scope(plan_id=plan_id), transaction.atomic():
            if Plan.objects.filter(id=plan_id, status=status, next_check_at=due_at).update(
                next_check_at=now
            ):
                wake_look(plan_id, status, countdown=None)
                published += 1
    return published
