"""The admin's runs: requested on the page, run by a worker."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from actions.lib import dispatch
from actions.lib.audit import audit_record
from actions.policy.drafts import draft_compile, stored_actions

from ...models import PolicyBacktest
from .history import STALLED_AFTER, BacktestRefused
from .replay import backtest_audit, backtest_run

# The name its log records had before the backtest was split into modules.
log = logging.getLogger("approvals.decisions.backtest")

# --- the admin's runs: requested on the page, run by a worker ---------------------------------


def policy_backtest_request(
    *, user, draft_text: str, since: datetime, until: datetime, origin: str = "the draft"
) -> PolicyBacktest:
    """A backtest of ``draft_text`` (Cedar, the enforce part) over [since, until), to be
    run by a worker (``approvals.policy_backtest``). DraftRefused when the draft does not
    hold (an ``@require`` naming a group that does not exist included), with each
    problem's line, before anything is stored."""
    compiled = draft_compile([(origin, draft_text)], actions=stored_actions(), check_groups=True)
    if since >= until:
        raise BacktestRefused("the window is empty: since must come before until")
    with transaction.atomic():
        backtest = PolicyBacktest.objects.create(
            created_by=user,
            draft=draft_text,
            draft_hash=compiled.hash,
            since=since,
            until=until,
        )
        dispatch.on_commit(dispatch.POLICY_BACKTEST, backtest.id)
    return backtest


def policy_backtest_execute(*, backtest_id) -> str:
    """Run a requested backtest (the worker's task): claim it, replay, store the report,
    audit. Returns what happened: ``done`` or ``failed`` (this call ran it); ``busy``
    when a run of it said how far it got less than STALLED_AFTER ago (a duplicate
    message, or a message redelivered at once after its worker died: the task looks
    again later, and takes it over if it has stopped moving); ``over`` when it is done,
    failed or gone."""
    now = timezone.now()
    claimed = PolicyBacktest.objects.filter(
        Q(state=PolicyBacktest.State.QUEUED)
        | Q(state=PolicyBacktest.State.RUNNING, progress_at__lt=now - STALLED_AFTER),
        id=backtest_id,
    ).update(state=PolicyBacktest.State.RUNNING, started_at=now, progress_at=now, plans_read=0)
    if claimed != 1:
        # Another worker got there first, or the run is over.
        running = PolicyBacktest.objects.filter(
            id=backtest_id, state=PolicyBacktest.State.RUNNING
        ).exists()
        return "busy" if running else "over"
    backtest = PolicyBacktest.objects.select_related("created_by").get(id=backtest_id)

    def progress(pages: int, plans: int, seconds: float) -> None:
        PolicyBacktest.objects.filter(id=backtest_id).update(
            plans_read=plans, progress_at=timezone.now()
        )

    try:
        compiled = draft_compile([("the draft", backtest.draft)], actions=stored_actions())
        report = backtest_run(
            policies=compiled,
            since=backtest.since,
            until=backtest.until,
            progress=progress,
            source=f"admin, backtest {backtest.id}",
        )
    except Exception as exc:  # noqa: BLE001 - the page says it failed, and why
        log.exception("policy backtest %s failed", backtest_id)
        error = f"{type(exc).__name__}: {exc}"[:2000]
        with transaction.atomic():
            PolicyBacktest.objects.filter(id=backtest_id).update(
                state=PolicyBacktest.State.FAILED, finished_at=timezone.now(), error=error
            )
            audit_record(
                kind="policy.backtest",
                actor=f"user:{backtest.created_by.get_username()}",
                data={
                    "draft": backtest.draft_hash,
                    "since": backtest.since.isoformat(),
                    "until": backtest.until.isoformat(),
                    "failed": error[:300],
                },
            )
        return "failed"
    with transaction.atomic():
        PolicyBacktest.objects.filter(id=backtest_id).update(
            state=PolicyBacktest.State.DONE,
            finished_at=timezone.now(),
            plans_read=report["totals"]["plans"],
            report=report,
        )
        backtest_audit(actor=f"user:{backtest.created_by.get_username()}", report=report)
    return "done"
