"""The one place that changes a plan's status, an attempt's state and an approval's use.

Each change consults its transition table (approvals.models: ``TRANSITIONS``,
``ATTEMPT_TRANSITIONS``) and is a conditional UPDATE on the row's current state, so a
process that lost a race changes nothing and is told so (InvalidTransition). The
executor and the sweeper call these functions; neither writes those columns itself.
"""

from __future__ import annotations

import logging
import uuid
from contextlib import nullcontext
from typing import Any

from django.db import connection, models, transaction
from django.db.models.sql import InsertQuery
from django.utils import timezone

from actions.lib import logcontext
from actions.lib.actors import SWEEPER
from actions.lib.audit import audit_record, audit_record_change
from actions.lib.exceptions import InvalidTransition
from actions.lib.metrics import DECISION_TO_EFFECT, DECISIONS, OUTCOMES
from actions.models import VaultState

from .decisions.requirements import claim_refusal, plan_policy_requirement
from .models import ATTEMPT_TRANSITIONS, TRANSITIONS, Approval, Attempt, Plan, PlanStatus
from .wakeups import plan_changed

log = logging.getLogger(__name__)

# The states an execution (or whoever settles one later) ends a plan in: where an
# execution may go, but back to approved (nothing was sent), from the one table.
OUTCOME_STATES = TRANSITIONS[PlanStatus.EXECUTING] - {PlanStatus.APPROVED}
# --- plans ----------------------------------------------------------------------------


def plan_transition(
    plan: Plan,
    *,
    to: str,
    actor: str,
    event: str,
    data: dict[str, Any] | None = None,
    along: list[tuple[str, list]] = (),
    **fields: Any,
) -> Plan:
    """Move ``plan`` from its current status to ``to``, or raise InvalidTransition.

    A conditional UPDATE on (id, status) makes the move race-free: if another process
    moved the plan first, zero rows change and nothing is recorded. ``along``: writes
    made with the move, in its statement on PostgreSQL, whether or not the plan moves
    (see _transition): only for a caller whose transaction rolls back on
    InvalidTransition.
    """
    return _transition(plan, to=to, actor=actor, event=event, data=data, fields=fields, along=along)


def _transition(
    plan: Plan,
    *,
    to: str,
    actor: str,
    event: str,
    data: dict[str, Any] | None,
    fields: dict[str, Any],
    along: list[tuple[str, list]] = (),
) -> Plan:
    """plan_transition, with ``along``: writes (with their parameters) that belong to the
    move and are made before it, in its statement on PostgreSQL. They are made whether
    or not the plan moves, so a caller passing any must roll back on InvalidTransition
    (the claim's transaction does)."""
    source = plan.status
    if to not in TRANSITIONS.get(source, frozenset()):
        raise InvalidTransition(f"a plan cannot go from {source} to {to}")
    recorded = {"kind": event, "actor": actor, "data": {"from": source, "to": to, **(data or {})}}
    values = {"status": to, **fields}
    change = _move_sql(plan, source, values) if connection.vendor == "postgresql" else None
    # No savepoint inside a caller's transaction (two round trips saved on the hot
    # paths): a lost race writes nothing and is raised only after the block, so a caller
    # that catches it can go on using its transaction. With no transaction open, the
    # one statement is its own (no BEGIN and COMMIT around it).
    with nullcontext() if _alone(change, along) else transaction.atomic(savepoint=False):
        moved = _plan_move(plan, source, values, recorded, change, along)
        if moved:
            # Wake the plan's long-polls, wherever they wait, once this commits.
            plan_changed(plan.id, to)
            # Every later line of this request or task is about this plan.
            logcontext.bind_plan(plan)
            log.info("plan %s: %s -> %s (%s, by %s)", plan.id, source, to, event, actor)
            transaction.on_commit(_counted(plan, source, to, event, data or {}))
    if not moved:
        # Another process got there first.
        raise InvalidTransition(f"the plan is no longer {source}")
    return plan


def _alone(change: tuple[str, list] | None, along) -> bool:
    """Can the move be a transaction of its own: one statement (``change``, PostgreSQL's,
    with nothing ``along`` that a failed move would have to undo) and no transaction open
    (the connection in autocommit)? One statement is atomic by itself, so the plan's move
    and its event are still both or neither, and what waits for the commit (the wake-up,
    the metrics) runs once the statement has committed."""
    if change is None or along:
        return False
    current = transaction.get_connection()
    return not current.in_atomic_block and current.get_autocommit()


def _plan_move(
    plan: Plan, source: str, values: dict[str, Any], recorded: dict, change, along
) -> bool:
    """The conditional UPDATE and its audit event, both or neither; ``plan`` takes the
    new values if the move happened. On PostgreSQL one statement, ``change`` (one round
    trip instead of two on every transition); elsewhere, or for a value only the ORM can
    write (``change`` None), the ORM's UPDATE and then the event."""
    if change is None:
        for sql, params in along:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
        if Plan.objects.filter(id=plan.id, status=source).update(**values) != 1:
            return False
        _assign(plan, values)
        audit_record(plan=plan, **recorded)
        return True
    # The event is built from the plan as moved, as audit_record's is; a lost race
    # leaves the object as it found it (read from its own values: a deferred field is
    # not loaded here).
    before = {name: plan.__dict__.get(name, _UNLOADED) for name in values}
    _assign(plan, values)
    if audit_record_change(change, along=along, plan=plan, **recorded) is None:
        _assign(plan, before)
        return False
    return True


_UNLOADED = object()


def _assign(plan: Plan, values: dict[str, Any]) -> None:
    for name, value in values.items():
        if value is _UNLOADED:
            plan.__dict__.pop(name, None)
        else:
            setattr(plan, name, value)


def _move_sql(plan: Plan, source: str, values: dict[str, Any]) -> tuple[str, list] | None:
    """The UPDATE ``Plan.objects.filter(id=, status=source).update(**values)`` runs, with
    RETURNING, each value encoded by its field as the ORM encodes it (get_db_prep_save).
    None when a value needs more than that (an expression, a model instance, a field
    with its own placeholder: none of Plan's today), so the ORM writes it."""
    meta, qn = Plan._meta, connection.ops.quote_name
    sets, params = [], []
    for name, value in values.items():
        field = meta.get_field(name)
        if (
            not field.concrete
            or hasattr(value, "resolve_expression")
            or hasattr(value, "prepare_database_save")
            or hasattr(field, "get_placeholder_sql")
        ):
            return None
        sets.append(f"{qn(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    status = meta.get_field("status")
    sql = (
        f"UPDATE {qn(meta.db_table)} SET {', '.join(sets)} "
        f"WHERE {qn(meta.pk.column)} = %s AND {qn(status.column)} = %s RETURNING 1"
    )
    params += [
        meta.pk.get_db_prep_save(plan.id, connection),
        status.get_db_prep_save(source, connection),
    ]
    return sql, params


def _decision_kind(to: str, event: str, data: dict[str, Any]) -> str:
    if to == PlanStatus.APPROVED:
        if data.get("by") == "policy":
            return "policy"
        return "session_grant" if "grant" in data else "approve"
    if event == "plan.superseded":
        return "supersede"
    return {
        PlanStatus.DENIED: "deny",
        PlanStatus.EXPIRED: "expire",
        PlanStatus.CANCELLED: "cancel",
    }.get(to, to)


def _counted(plan: Plan, source: str, to: str, event: str, data: dict[str, Any]):
    """The metrics of a move, counted once it commits (a rolled-back move never was)."""
    decided_at = plan.decided_at

    def count() -> None:
        if source == PlanStatus.AWAITING_APPROVAL:
            DECISIONS.labels(decision=_decision_kind(to, event, data)).inc()
        if to in OUTCOME_STATES:
            OUTCOMES.labels(state=to).inc()
            if source == PlanStatus.EXECUTING and decided_at is not None:
                DECISION_TO_EFFECT.observe(max(0.0, (timezone.now() - decided_at).total_seconds()))

    count.metrics_only = True  # type: ignore[attr-defined]
    return count


def plan_expire(plan: Plan, *, actor: str, now) -> Plan:
    """A plan whose time ran out with no decision: the sweeper's pass, and any request
    that finds it late (a repeat look-up, a decision), end it the same way."""
    return plan_transition(
        plan,
        to=PlanStatus.EXPIRED,
        actor=actor,
        event="plan.expired",
        finished_at=now,
        outcome_detail="no decision before the plan expired",
    )


def plans_expire(*, now=None) -> int:
    """Expire plans that waited past their time. Returns how many."""
    now = now or timezone.now()
    count = 0
    for plan in Plan.objects.filter(
        status=PlanStatus.AWAITING_APPROVAL, expires_at__lte=now
    ).select_related("action")[:500]:
        # Each plan's lines name that plan only.
        with logcontext.scope(**logcontext.plan_fields(plan)):
            try:
                plan_expire(plan, actor=SWEEPER, now=now)
                count += 1
            except InvalidTransition:
                pass  # decided meanwhile
    return count


# --- approvals: spent by one execution, given back when nothing was sent -----------------


def approvals_spend(plan: Plan, now) -> bool:
    """Mark the plan's valid approvals used, if there are enough of them; one UPDATE
    (and one more to undo it when there are too few). Runs under the plan's row lock,
    inside the claim."""
    valid = plan.approvals.filter(
        decision=Approval.Decision.APPROVE,
        fingerprint=plan.fingerprint,
        used_at__isnull=True,
        expires_at__gt=now,
    )
    spent = valid.update(used_at=now)
    if plan_policy_requirement(plan):
        # Decision rules: the approvals, by the groups recorded when they were given,
        # must meet the plan's requirement (approvals/decisions/requirements.py).
        if spent and claim_refusal(plan, list(plan.approvals.filter(used_at=now))) is None:
            return True
    elif spent >= plan.required_approvals:
        return True
    if spent:
        plan.approvals.filter(used_at=now).update(used_at=None)
    return False


def approvals_return(plan: Plan) -> None:
    """Give back the approvals the plan's claim spent: nothing left the gateway, so the
    consent was not used (the claim stamped them with its own time)."""
    plan.approvals.filter(used_at=plan.claimed_at).update(used_at=None)


# --- attempts ---------------------------------------------------------------------------


def execution_begin(plan: Plan, *, actor: str, event: str, now) -> Attempt:
    """The claim: its attempt prepared and the plan moved to executing, committed together
    before anything can be sent. The attempt is a new one with a fresh idempotency key, or
    the plan's one attempt taken up again when it provably sent nothing. Runs under the
    plan's row lock.

    A new attempt's INSERT is made in the move's statement on PostgreSQL (one round trip
    fewer per execution), as Model.save would make it (Django's own INSERT for the
    instance); nothing else differs: the same rows are written in the same transaction,
    which the claim rolls back if the move fails."""
    try:
        attempt = plan.attempt
    except Attempt.DoesNotExist:
        attempt = Attempt(
            plan=plan, idempotency_key=uuid.uuid4().hex, state=Attempt.State.PREPARED, tries=1
        )
        along = [row_insert_sql(attempt)]
    else:
        if attempt.state != Attempt.State.NOT_SENT:
            # One attempt per plan; one that may have sent can never be re-armed.
            raise InvalidTransition(f"plan {plan.id} is approved but has a {attempt.state} attempt")
        attempt_transition(attempt, to=Attempt.State.PREPARED, tries=attempt.tries + 1)
        along = []
    _transition(
        plan,
        to=PlanStatus.EXECUTING,
        actor=actor,
        event=event,
        data={"attempt": str(attempt.id), "try": attempt.tries},
        fields={"claimed_at": now},
        along=along,
    )
    attempt._state.adding, attempt._state.db = False, connection.alias
    return attempt


def row_insert_sql(instance: models.Model) -> tuple[str, list]:
    """The INSERT ``instance.save()`` makes for a new row (Django's own, each field's
    pre_save and encoding included), to be run as part of another statement."""
    meta = instance._meta
    query = InsertQuery(type(instance))
    query.insert_values([f for f in meta.local_concrete_fields if not f.generated], [instance])
    ((sql, params),) = query.get_compiler(connection=connection).as_sql()
    return sql, list(params)


def attempt_transition(attempt: Attempt, *, to: str, **fields: Any) -> Attempt:
    """Move ``attempt`` from its state to ``to``, or raise InvalidTransition.

    Conditional on the state *and* the try it belongs to: a worker that was presumed
    dead, and whose plan the sweeper took back and another worker re-claimed, finds
    nothing to change."""
    source = attempt.state
    if to not in ATTEMPT_TRANSITIONS.get(source, frozenset()):
        raise InvalidTransition(f"an attempt cannot go from {source} to {to}")
    updated = Attempt.objects.filter(pk=attempt.pk, state=source, tries=attempt.tries).update(
        state=to, **fields
    )
    if updated != 1:
        raise InvalidTransition(f"the attempt is no longer {source}")
    attempt.state = to
    for key, value in fields.items():
        setattr(attempt, key, value)
    return attempt


def attempt_fence(plan: Plan, attempt: Attempt, *, sent_at, request: dict, revalidation) -> bool:
    """prepared → sending, and the first send counted, if and only if the attempt is still
    this worker's try, its plan still claimed by this worker, and the vault unlocked.
    Committed before the request leaves: from here on a crash reads "it may have left".

    One statement (its own transaction outside a caller's), in plain SQL: the ORM's
    version of this UPDATE (two EXISTS filters) took three times as long to build as to
    run, on the path between a decision and its effect. The lock is read once more in
    the same statement, so a lock committed after it is one engaged after the send began.
    """
    qn = connection.ops.quote_name
    field = Attempt._meta.get_field
    sql = (
        f"UPDATE {qn(Attempt._meta.db_table)} SET {qn('state')} = %s, {qn('sent_at')} = %s, "
        f"{qn('request')} = %s, {qn('revalidation')} = %s, {qn('sends')} = 1 "
        f"WHERE {qn('id')} = %s AND {qn('state')} = %s AND {qn('tries')} = %s "
        f"AND EXISTS (SELECT 1 FROM {qn(Plan._meta.db_table)} WHERE {qn('id')} = %s "
        f"AND {qn('status')} = %s AND {qn('claimed_at')} = %s) "
        f"AND NOT EXISTS (SELECT 1 FROM {qn(VaultState._meta.db_table)} "
        f"WHERE {qn('id')} = %s AND {qn('locked')})"
    )
    params = [
        Attempt.State.SENDING,
        field("sent_at").get_db_prep_save(sent_at, connection),
        field("request").get_db_prep_save(request, connection),
        field("revalidation").get_db_prep_save(revalidation, connection),
        field("id").get_db_prep_save(attempt.id, connection),
        Attempt.State.PREPARED,
        attempt.tries,
        Plan._meta.get_field("id").get_db_prep_save(plan.id, connection),
        PlanStatus.EXECUTING,
        Plan._meta.get_field("claimed_at").get_db_prep_save(plan.claimed_at, connection),
        VaultState.SINGLETON_ID,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        fenced = cursor.rowcount == 1
    if fenced:
        attempt.state, attempt.sent_at, attempt.sends = Attempt.State.SENDING, sent_at, 1
        attempt.request, attempt.revalidation = request, revalidation
    return fenced


def attempt_count_send(attempt: Attempt, sends: int) -> bool:
    """Count a re-send (same key) before it leaves, fenced like the first: False if the
    attempt moved on meanwhile (the sweeper settled it), and then nothing may be sent."""
    counted = Attempt.objects.filter(
        pk=attempt.pk, state=Attempt.State.SENDING, tries=attempt.tries
    ).update(sends=sends)
    if counted:
        attempt.sends = sends
    return bool(counted)


def execution_end(
    plan: Plan,
    attempt: Attempt,
    *,
    to: str,
    attempt_to: str,
    actor: str,
    event: str,
    data: dict[str, Any] | None = None,
    attempt_fields: dict[str, Any] | None = None,
    give_back_approvals: bool = False,
    **plan_fields: Any,
) -> Plan:
    """The attempt's move and the plan's, together in one transaction: the outcome of an
    execution (or of the sweeper settling one), never one without the other.
    ``give_back_approvals`` when nothing was sent and the plan goes back to approved.

    No savepoint inside a caller's transaction (the executor's, which also registers the
    look it schedules): a lost race raises before anything is written."""
    with transaction.atomic(savepoint=False):
        attempt_transition(attempt, to=attempt_to, **(attempt_fields or {}))
        if give_back_approvals:
            approvals_return(plan)
        plan_transition(plan, to=to, actor=actor, event=event, data=data, **plan_fields)
    return plan
