"""Ending an execution: one commit of what it learned (the attempt's end and the plan's
outcome together), kept and retried while the database cannot be reached, and the two
ways to stop without sending: refused for good, or released to be tried again."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from actions.lib import dispatch
from actions.lib.exceptions import InvalidTransition
from actions.lib.outage import database_unavailable, noted
from approvals.lifecycle import execution_end
from approvals.models import Attempt, Plan, PlanStatus

from .claims import ACTOR, Claim, event_name
from .reconciliation import due, wake_look

log = logging.getLogger(__name__)

# Tries to reach the upstream before sending anything, before giving up honestly.
MAX_UNSENT_TRIES = 3


class Done(Exception):
    """A step ended the execution; ``outcome`` is what execution_run returns."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


# The first wait before recording again, and the longest (seconds).
RECORD_FIRST_WAIT = 0.25
RECORD_MAX_WAIT = 2.0


def _clock() -> float:
    return time.monotonic()


def _drop_connection() -> None:
    try:
        connection.close()
    except Exception:  # noqa: BLE001, S110 - a broken connection is dropped anyway
        pass


def recorded(
    claim: Claim, write: Callable[[], Any], *, to: str | None, attempt_to: str | None
) -> None:
    """Run ``write`` (one commit of what this execution learned), and while the database
    cannot be reached, keep what it holds and run it again, backing off, for at most
    COUNTERSIGN_RECORD_RETRY_SECONDS. Nothing is ever sent again here: only the record.

    Every write is conditional on the attempt still being this worker's try
    (approvals.lifecycle), so a retry after the sweeper settled the plan (the lease ran
    out) changes nothing. A commit whose answer was lost may have applied: if a retry
    finds the plan and its attempt already where ``write`` moves them, it did. Given up,
    the exception goes on and the lease and a reconciliation settle the plan, as before.
    """
    plan, attempt = claim.plan, claim.attempt
    deadline = _clock() + settings.COUNTERSIGN_RECORD_RETRY_SECONDS
    wait, tries, started = RECORD_FIRST_WAIT, 0, _clock()
    while True:
        status, state = plan.status, attempt.state
        try:
            write()
        except InvalidTransition:
            if not tries:
                raise
            if already_recorded(claim, to=to, attempt_to=attempt_to):
                log.warning("plan %s: the record committed before the database went away", plan.id)
                return
            # The lease ran out meanwhile and the sweeper settled the plan (unknown, then
            # a reconciliation): its record stands, this one is not made.
            log.warning("plan %s: settled by the sweeper while the database was away", plan.id)
            raise Done("skipped:claim-lost") from None
        except Exception as exc:
            if connection.in_atomic_block or not database_unavailable(exc):
                raise
            # What a rolled-back transaction moved in memory only.
            plan.status, attempt.state = status, state
            tries += 1
            _drop_connection()
            if tries == 1:
                noted(exc, f"worker recording plan {plan.id}")
            if _clock() + wait > deadline:
                log.warning(
                    "plan %s: the upstream's answer could not be recorded in %.0f s (%d tries); "
                    "the execution lease and a reconciliation will settle it",
                    plan.id,
                    _clock() - started,
                    tries,
                )
                raise
            _sleep(wait)
            wait = min(wait * 2, RECORD_MAX_WAIT)
            continue
        if tries:
            log.warning(
                "plan %s: recorded once the database was back (%d tries, %.1f s)",
                plan.id,
                tries + 1,
                _clock() - started,
            )
        return


def already_recorded(claim: Claim, *, to: str | None, attempt_to: str | None) -> bool:
    """Whether the plan and its attempt are where this worker's write moves them, on the
    attempt's own try: a commit whose answer was lost, not the sweeper's doing."""
    found = (
        Attempt.objects.filter(pk=claim.attempt.pk, tries=claim.attempt.tries)
        .values_list("state", "plan__status")
        .first()
    )
    if found is None:
        return False
    state, status = found
    return (attempt_to is None or state == attempt_to) and (to is None or status == to)


def finish(
    claim: Claim,
    *,
    to: str,
    detail: str,
    attempt_state: str,
    upstream_status: int | None = None,
    event_data: dict[str, Any] | None = None,
    look_in: float | None = None,
    plan_fields: dict[str, Any] | None = None,
    **attempt_fields: Any,
) -> Plan:
    """Record the attempt's end and the plan's outcome in one transaction. ``look_in``
    schedules the first automatic look at an unsettled outcome (a status request for
    ``pending``, a reconciliation for ``unknown``) in the same commit; ``plan_fields``
    carry the result and whether the effect was verified."""
    now = timezone.now()

    def write() -> None:
        with transaction.atomic():
            execution_end(
                claim.plan,
                claim.attempt,
                to=to,
                attempt_to=attempt_state,
                actor=ACTOR,
                event=event_name(claim.plan, to),
                data={
                    "attempt": str(claim.attempt.id),
                    "upstream_status": upstream_status,
                    **(event_data or {}),
                },
                attempt_fields={"finished_at": now, **attempt_fields},
                finished_at=now,
                outcome_detail=detail,
                upstream_status=upstream_status,
                next_check_at=due(now, look_in),
                **(plan_fields or {}),
            )
            if look_in is not None:
                wake_look(claim.plan.id, to, countdown=look_in)

    recorded(claim, write, to=to, attempt_to=attempt_state)
    return claim.plan


def refuse(claim: Claim, detail: str, *, error: str, **event: Any) -> Done:
    """Nothing was sent, and nothing will be: the plan ends refused."""
    finish(
        claim,
        to=PlanStatus.REFUSED,
        detail=detail,
        attempt_state=Attempt.State.NOT_SENT,
        error=error,
        event_data=event or None,
    )
    return Done(PlanStatus.REFUSED)


def release_unsent(claim: Claim, reason: str) -> Done:
    """Nothing left the gateway: give the approvals back and try again later, or stop."""
    plan, attempt = claim.plan, claim.attempt
    if attempt.tries >= MAX_UNSENT_TRIES:
        return refuse(
            claim,
            f"nothing was written: {reason} (gave up after {attempt.tries} tries)",
            error=reason,
        )
    with transaction.atomic():
        execution_end(
            plan,
            attempt,
            to=PlanStatus.APPROVED,
            attempt_to=Attempt.State.NOT_SENT,
            actor=ACTOR,
            event="execution.deferred",
            data={"reason": reason, "try": attempt.tries},
            attempt_fields={"error": reason, "sends": 0},
            give_back_approvals=True,
            enqueued_at=timezone.now(),
        )
        dispatch.on_commit(dispatch.EXECUTE_PLAN, plan.id, countdown=2**attempt.tries)
    return Done("deferred")
