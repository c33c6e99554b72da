"""A plan's move and its audit event in one statement on PostgreSQL (approvals.lifecycle:
plan_transition): the event is written if and only if the plan moved, and it is the same
event, byte for byte, as the ORM's UPDATE followed by audit_record wrote. A claim's new
attempt is inserted in the same statement (execution_begin), as Model.save inserted it."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from actions.lib.audit import event_bytes, event_entry
from actions.lib.canonical import sha256_hex
from actions.lib.checkpoints import audit_seal, audit_verify
from actions.lib.exceptions import InvalidTransition
from actions.lib.models import AuditEvent
from approvals import lifecycle
from approvals.lifecycle import execution_begin, plan_transition
from approvals.models import Attempt, Plan, PlanStatus

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the one-statement move is PostgreSQL's"
)

DATA = {"reason": 'naïve — ✓ "quoted"', "nested": {"b": [1, 2.5, None], "a": True}}


def _denial(at, revision_of) -> dict:
    """A move with a value of every kind Plan's columns take: times, text, a number, a
    boolean, JSON (with a JSON null inside and an SQL null), a foreign key by its column."""
    return {
        "to": PlanStatus.DENIED,
        "actor": "reviewer:ada",
        "event": "plan.denied",
        "data": DATA,
        "decided_at": at,
        "finished_at": at,
        "next_check_at": None,
        "outcome_detail": "denied by a reviewer: ünïcode",
        "upstream_status": 409,
        "verified": False,
        "result": {"id": "c-1", "tags": ["x", None], "n": 3},
        "requester": None,
        "revision_of_id": revision_of.id,
    }


def _row(plan_id) -> dict:
    return Plan.objects.values().get(id=plan_id)


def _expected_body(event: AuditEvent, plan: Plan, at, source: str) -> str:
    return event_bytes(
        seq=event.id,
        at=at.isoformat(),
        kind="plan.denied",
        actor="reviewer:ada",
        plan_id=str(plan.id),
        fingerprint=plan.fingerprint,
        data={"from": source, "to": PlanStatus.DENIED, **DATA},
    ).decode()


def test_the_one_statement_event_is_the_two_step_event(
    make_plan, monkeypatch, sealer_key, django_capture_on_commit_callbacks
):
    plan = make_plan()
    other = make_plan(input={"contact_id": "c-1002", "email": "bob@new.example"})
    at = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: at)
    move = _denial(at, other)

    # The two-step path (the ORM's UPDATE, then audit_record), rolled back afterwards.
    with transaction.atomic(), django_capture_on_commit_callbacks(execute=False):
        with monkeypatch.context() as orm_only:
            orm_only.setattr(lifecycle, "_move_sql", lambda *args: None)
            plan_transition(Plan.objects.get(id=plan.id), **move)
        two_step = AuditEvent.objects.get(plan_id=plan.id, kind="plan.denied")
        two_step_row = _row(plan.id)
        transaction.set_rollback(True)
    assert not AuditEvent.objects.filter(plan_id=plan.id, kind="plan.denied").exists()

    moving = Plan.objects.get(id=plan.id)
    with (
        django_capture_on_commit_callbacks(execute=False) as callbacks,
        CaptureQueriesContext(connection) as ctx,
    ):
        assert plan_transition(moving, **move) is moving
    assert len(ctx.captured_queries) == 1, ctx.captured_queries
    assert ctx.captured_queries[0]["sql"].startswith("WITH moved AS (UPDATE")
    assert callbacks  # the wake-up and the metrics, on commit
    one = AuditEvent.objects.get(plan_id=plan.id, kind="plan.denied")

    # The same bytes but for the number each drew, and each the bytes of its fields.
    source = PlanStatus.AWAITING_APPROVAL
    assert one.id != two_step.id
    assert two_step.body == _expected_body(two_step, plan, at, source)
    assert one.body == _expected_body(one, plan, at, source)
    assert one.body.removesuffix(f',"seq":{one.id}}}') == two_step.body.removesuffix(
        f',"seq":{two_step.id}}}'
    )
    assert one.hash == sha256_hex(one.body.encode()) == sha256_hex(event_entry(one))
    assert (one.at, one.actor, one.fingerprint, one.data) == (
        two_step.at,
        two_step.actor,
        two_step.fingerprint,
        two_step.data,
    )
    # The row as the ORM wrote it, column for column; the object as the ORM path left it.
    assert _row(plan.id) == two_step_row
    assert moving.status == PlanStatus.DENIED and moving.result == move["result"]
    assert moving.revision_of_id == other.id and moving.decided_at == at

    assert audit_seal()["events"] >= 1
    assert audit_verify().ok


def test_a_lost_race_writes_no_event_and_raises(make_plan, django_capture_on_commit_callbacks):
    made = make_plan()
    row_before = _row(made.id)
    # Read with a column left unloaded, which the failed move must not load nor set.
    plan = Plan.objects.defer("decided_at").get(id=made.id)
    # Another process cancelled it after this one read it.
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.CANCELLED)
    last = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first()
    now = timezone.now()
    with (
        django_capture_on_commit_callbacks(execute=False) as callbacks,
        CaptureQueriesContext(connection) as ctx,
        pytest.raises(InvalidTransition, match="no longer awaiting_approval"),
    ):
        plan_transition(
            plan,
            to=PlanStatus.DENIED,
            actor="reviewer:ada",
            event="plan.denied",
            decided_at=now,
            outcome_detail="denied by a reviewer",
        )
    assert len(ctx.captured_queries) == 1
    assert AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() == last
    assert not AuditEvent.objects.filter(kind="plan.denied").exists()
    assert not callbacks  # no wake-up, no metrics for a move that never was
    # Nothing written to the row, nothing taken into the object, the transaction usable.
    assert _row(plan.id) == {**row_before, "status": PlanStatus.CANCELLED}
    assert "decided_at" in plan.get_deferred_fields()
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.outcome_detail == row_before["outcome_detail"]


def test_a_value_only_the_orm_writes_takes_the_two_step_path(make_plan):
    plan = make_plan()
    with CaptureQueriesContext(connection) as ctx:
        plan_transition(
            plan,
            to=PlanStatus.CANCELLED,
            actor="agent:x",
            event="plan.cancelled",
            finished_at=Now(),
        )
    assert [q["sql"].split()[0] for q in ctx.captured_queries] == ["UPDATE", "WITH"]
    assert _row(plan.id)["finished_at"] is not None
    event = AuditEvent.objects.get(plan_id=plan.id, kind="plan.cancelled")
    assert event.hash == sha256_hex(event_entry(event))


def _approved(make_plan) -> Plan:
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.APPROVED)
    return Plan.objects.select_related("attempt").get(id=plan.id)


def _attempt_row(plan_id) -> dict:
    row = Attempt.objects.values().get(plan_id=plan_id)
    return {k: v for k, v in row.items() if k not in ("id", "idempotency_key")}


def test_a_claims_attempt_is_the_row_model_save_wrote(
    make_plan, monkeypatch, django_capture_on_commit_callbacks
):
    plan = _approved(make_plan)
    at = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: at)
    with transaction.atomic():
        Attempt.objects.create(
            plan=Plan.objects.get(id=plan.id),
            idempotency_key="k" * 32,
            state=Attempt.State.PREPARED,
            tries=1,
        )
        saved = _attempt_row(plan.id)
        transaction.set_rollback(True)

    with (
        django_capture_on_commit_callbacks(execute=False),
        CaptureQueriesContext(connection) as ctx,
    ):
        attempt = execution_begin(plan, actor="worker", event="execution.claimed", now=at)
    assert len(ctx.captured_queries) == 1, ctx.captured_queries
    assert _attempt_row(plan.id) == saved
    row = Attempt.objects.values("id", "idempotency_key").get(plan_id=plan.id)
    assert (row["id"], row["idempotency_key"]) == (attempt.id, attempt.idempotency_key)
    assert len(attempt.idempotency_key) == 32 and attempt.created_at == at
    assert not attempt._state.adding and plan.attempt is attempt
    assert _row(plan.id)["status"] == PlanStatus.EXECUTING == plan.status
    event = AuditEvent.objects.get(plan_id=plan.id, kind="execution.claimed")
    assert event.data == {
        "from": "approved",
        "to": "executing",
        "attempt": str(attempt.id),
        "try": 1,
    }


def test_a_claim_that_lost_its_plan_leaves_no_attempt_and_no_event(make_plan):
    plan = _approved(make_plan)
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.CANCELLED)
    with pytest.raises(InvalidTransition), transaction.atomic():
        execution_begin(plan, actor="worker", event="execution.claimed", now=timezone.now())
    assert not Attempt.objects.filter(plan_id=plan.id).exists()
    assert not AuditEvent.objects.filter(plan_id=plan.id, kind="execution.claimed").exists()
