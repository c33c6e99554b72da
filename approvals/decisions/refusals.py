"""Submissions a policy refused, kept so that a backtest can show what a draft would let
through (docs/policy.md, Backtesting).

A ``forbid`` refuses a plan before it is stored (``services._plan_policies``), so without
this record weakening a ``forbid`` could never show in a backtest: history would hold
only what the set in force let through. ``refused_submission_record`` keeps what the
policies judged — the agent, the action (version and digest), the normalized input, the
preview (target, before, after, changes), the person it was for, the forbids that held
and their reason, the set's hash and version, and the time and the agent's rate the
policies saw — as a ``RefusedSubmission``, which is never a plan: nothing queues,
approves or executes it.

It is committed on its own, before the refusal is raised: a transaction around the
submission would roll it back with the refusal, so ``durable=True`` refuses to run inside
one (none is open there: the preview's upstream read comes just before, and no network
I/O happens inside a transaction).

Bounded as plans are: each refused submission passed the agent's rate limit
(``COUNTERSIGN_RATE_LIMIT``) and made an upstream read, as a stored plan does. Kept
``COUNTERSIGN_REFUSED_RETENTION_DAYS`` days (plans are not purged; these are, since they
exist only for backtests): the sweeper calls ``refused_submissions_purge``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from actions.lib import logcontext
from actions.lib.exceptions import PolicyRefused
from actions.models import Action, Agent
from actions.policy.versions import policies_in_force

from ..models import RefusedSubmission
from .policies import agent_rate


def refused_submission_record(
    *,
    agent: Agent,
    action: Action,
    values: dict[str, Any],
    preview,
    requester: dict | None,
    refusal: PolicyRefused,
) -> RefusedSubmission:
    """Keep what the policies refused (committed at once; see the module's docstring).

    The time, the rate and the set's version are the refusal's when it carries them;
    otherwise they are taken now, right after the evaluation: the same time to the
    millisecond, and the same rate but for a plan of this agent and action stored in
    between."""
    at: datetime = refusal.at or timezone.now()
    rate = refusal.rate
    if rate is None:
        rate = agent_rate(agent_id=agent.pk, action_id=action.pk, now=at)
    version = refusal.version
    if version is None:
        compiled = policies_in_force()
        version = compiled.version if compiled.hash == refusal.set_hash else 0
    correlation = logcontext.current().get("correlation_id")
    with transaction.atomic(durable=True):
        return RefusedSubmission.objects.create(
            agent=agent,
            action=action,
            action_version=action.version,
            action_digest=action.digest,
            consequence_class=action.consequence_class,
            signed_approval=bool(action.spec.approval.signed),
            input=values,
            target=preview.target,
            before=preview.before,
            after=preview.after,
            changes=list(preview.changes or ()),
            requester=requester,
            policies=list(refusal.policies),
            refusal=refusal.reason or "",
            set_hash=refusal.set_hash or "",
            set_version=int(version or 0),
            evaluated_at=at,
            rate_hour=int(rate[0]),
            rate_day=int(rate[1]),
            shadow=refusal.shadow or {},
            correlation_id=correlation or None,
        )


def refused_submissions_purge(*, now: datetime | None = None, batch: int | None = None) -> int:
    """Delete the refused submissions older than the retention, oldest first, at most
    ``batch`` (COUNTERSIGN_REFUSED_PURGE_BATCH) a call, so a sweep stays short whatever
    has piled up; the next sweep takes the rest. Returns how many were deleted."""
    now = now or timezone.now()
    days = max(1, int(settings.COUNTERSIGN_REFUSED_RETENTION_DAYS))
    batch = batch or settings.COUNTERSIGN_REFUSED_PURGE_BATCH
    ids = list(
        RefusedSubmission.objects.filter(created_at__lt=now - timedelta(days=days))
        .order_by("created_at", "id")
        .values_list("id", flat=True)[:batch]
    )
    if not ids:
        return 0
    deleted, _ = RefusedSubmission.objects.filter(id__in=ids).delete()
    return deleted
