"""Escalations announced: a decision rule's ``escalate_after`` has passed on a plan still
awaiting a decision, so the group it escalates to may decide it, and is told.

Eligibility does not wait for this: a member of that group may decide as soon as the
time has come (approvals/decisions/requirements.py reads the time from the plan). The
sweeper (executors/sweeper.py, every ``COUNTERSIGN_SWEEP_SECONDS``) announces it: one
audit event (``plan.escalated``), the escalation counted in /metrics, and the group's
notification targets told. Each escalation is announced once, by whichever sweep marks
its row first (a conditional UPDATE), whatever the number of sweepers.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from actions.lib import logcontext
from actions.lib.actors import SWEEPER
from actions.lib.audit import audit_record
from actions.lib.metrics import ESCALATIONS
from actions.policy.reviewers import duration_text

from ..models import DecidingGroup, PlanStatus
from ..notifications import NoticeEvent, notify_event
from ..wakeups import counted_on_commit

log = logging.getLogger(__name__)

# At most this many escalations a sweep; the next sweep takes the rest.
BATCH = 500


def escalations_announce(*, now: datetime | None = None) -> int:
    """Announce every escalation whose time has come on a plan still awaiting a decision.
    Returns how many were announced."""
    now = now or timezone.now()
    due = (
        DecidingGroup.objects.filter(
            escalation=True,
            announced_at__isnull=True,
            eligible_from__lte=now,
            plan__status=PlanStatus.AWAITING_APPROVAL,
            plan__expires_at__gt=now,
        )
        .select_related("plan")
        .order_by("eligible_from")[:BATCH]
    )
    announced = 0
    for row in due:
        plan = row.plan
        with logcontext.scope(**logcontext.plan_fields(plan)), transaction.atomic():
            # Another sweep got there first: nothing to do.
            if not DecidingGroup.objects.filter(pk=row.pk, announced_at__isnull=True).update(
                announced_at=now
            ):
                continue
            after = int((row.eligible_from - plan.created_at).total_seconds())
            audit_record(
                kind="plan.escalated",
                actor=SWEEPER,
                plan=plan,
                data={"group": row.group, "after_seconds": after},
            )
            counted_on_commit(ESCALATIONS.inc)
            notify_event(plan.id, NoticeEvent.ESCALATED, row.group)
            log.info(
                "plan %s escalated to %s after %s without a decision",
                plan.id,
                row.group,
                duration_text(after),
            )
            announced += 1
    return announced
