"""An earlier plan given back instead of a new one: for the agent's Idempotency-Key, or
for the same proposal while an earlier one still awaits a decision."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from actions.lib.actors import SYSTEM, agent_actor
from actions.lib.audit import audit_record
from actions.lib.exceptions import IdempotencyInFlight, IdempotencyKeyReused
from actions.models import Agent

from ..lifecycle import plan_expire
from ..models import IdempotencyRecord, Plan

# An Idempotency-Key reservation with no plan after this long belongs to a request
# that died mid-preview; a retry may take it over.
IDEMPOTENCY_RESERVATION_SECONDS = 60
# The advisory lock class (any constant) under which identical proposals take turns.
_REPEAT_LOCK_CLASS = 0x72657074


class Replay(StrEnum):
    """Why plan_submit gave an earlier plan back."""

    IDEMPOTENCY_KEY = "idempotency_key"
    REPEAT = "repeat"


def awaiting_repeat(*, agent: Agent, repeat_key: str, now) -> Plan | None:
    """The agent's plan with this repeat key (policies.plan_repeat_key: the fingerprint's
    document without the moment the policies judged it) that still awaits a decision,
    locked; one past its expiry is expired here (the sweeper would soon) and does not
    count. Another set of policies, other decision rules or another version of the
    action give another key, so a new plan.

    One round trip on the hot path (no such plan): on PostgreSQL the advisory lock under
    which two identical proposals racing (a client retrying while its first call still
    reads the upstream) take turns until commit, so the second finds the first, and the
    look-up itself (index plan_awaiting_repeat). SQLite starts every write transaction
    IMMEDIATE: one at a time already.
    """
    table = connection.ops.quote_name(Plan._meta.db_table)
    lookup = (
        f"SELECT id FROM {table} WHERE agent_id = %s AND repeat_key = %s "
        "AND status = 'awaiting_approval' LIMIT 1"
    )
    agent_id = Plan._meta.get_field("agent").target_field.get_db_prep_value(agent.pk, connection)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"SELECT pg_advisory_xact_lock(%s, %s); {lookup} FOR UPDATE",
                [_REPEAT_LOCK_CLASS, int(repeat_key[:7], 16), agent_id, repeat_key],
            )
            cursor.nextset()
        else:
            cursor.execute(lookup, [agent_id, repeat_key])
        row = cursor.fetchone()
    if row is None:
        return None
    plan = Plan.objects.select_related("action").get(pk=row[0])
    if plan.expires_at <= now:
        plan_expire(plan, actor=SYSTEM, now=now)
        return None
    return plan


def repeat_record(plan: Plan, *, agent: Agent, reservation: IdempotencyRecord | None) -> Plan:
    audit_record(
        kind="plan.repeated",
        actor=agent_actor(agent),
        plan=plan,
        data={"idempotency_key": reservation is not None},
    )
    if reservation is not None:
        # The key now names the plan it was given back, like any other replay.
        IdempotencyRecord.objects.filter(pk=reservation.pk).update(plan=plan)
    return plan


def idempotency_key_reserve(agent: Agent, key: str, request_hash: str) -> IdempotencyRecord | Plan:
    """Reserve the key, or return the plan an earlier identical request created."""
    for _ in range(2):
        try:
            with transaction.atomic():
                return IdempotencyRecord.objects.create(
                    agent=agent, key=key, request_hash=request_hash
                )
        except IntegrityError:
            pass
        existing = IdempotencyRecord.objects.filter(agent=agent, key=key).first()
        if existing is None:
            continue  # deleted between our insert and our read: try again
        if existing.request_hash != request_hash:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was already used with a different body"
            )
        if existing.plan_id is not None:
            return existing.plan
        age = timezone.now() - existing.created_at
        if age < timedelta(seconds=IDEMPOTENCY_RESERVATION_SECONDS):
            raise IdempotencyInFlight("retry once the first request has finished")
        # The first request died mid-preview; take its reservation over.
        IdempotencyRecord.objects.filter(pk=existing.pk, plan__isnull=True).delete()
    raise IdempotencyInFlight("retry once the first request has finished")
