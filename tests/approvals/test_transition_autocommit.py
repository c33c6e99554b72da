"""A plan's move with no transaction open is its own transaction on PostgreSQL: one
statement, the move and its event, without a BEGIN and a COMMIT around it (two round
trips fewer on an execution's last move). Still both or neither; an event written on its
own, or with writes a failed move would have to undo, is still refused outside a
transaction (actions.lib.audit)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone
from psycopg.pq import TransactionStatus

from actions.lib.audit import audit_record, audit_record_change
from actions.lib.checkpoints import audit_seal, audit_verify
from actions.lib.exceptions import InvalidTransition
from actions.lib.models import AuditEvent
from approvals import lifecycle
from approvals.lifecycle import plan_transition
from approvals.models import Plan, PlanStatus

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the one-statement move is PostgreSQL's"
)


def _executing(make_plan) -> Plan:
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.EXECUTING)
    return Plan.objects.get(id=plan.id)


def _complete(plan: Plan, now) -> Plan:
    return plan_transition(
        plan,
        to=PlanStatus.COMPLETED,
        actor="worker",
        event="execution.completed",
        data={"upstream_status": 200},
        finished_at=now,
        outcome_detail="applied",
        upstream_status=200,
        result={"id": "c-1"},
        verified=True,
        next_check_at=None,
    )


class Statements:
    """Each statement sent, with whether a transaction was open before and after it (the
    server's own account, from the connection), and every commit Django asked for."""

    def __init__(self, monkeypatch):
        self.sent: list[tuple[str, TransactionStatus, TransactionStatus]] = []
        self.commits = 0
        commit = connection.commit

        def counted_commit():
            self.commits += 1
            commit()

        monkeypatch.setattr(connection, "commit", counted_commit)

    def __call__(self, execute, sql, params, many, context):
        before = connection.connection.info.transaction_status
        try:
            return execute(sql, params, many, context)
        finally:
            self.sent.append((sql, before, connection.connection.info.transaction_status))


def test_the_last_move_outside_a_transaction_is_one_statement(
    transactional_db, make_plan, sealer_key, monkeypatch
):
    plan = _executing(make_plan)
    assert not connection.in_atomic_block and connection.get_autocommit()
    statements, published = Statements(monkeypatch), []
    monkeypatch.setattr(
        lifecycle, "plan_changed", lambda plan_id, to: published.append(connection.in_atomic_block)
    )
    with connection.execute_wrapper(statements):
        _complete(plan, timezone.now())
    (sql, before, after), *others = statements.sent
    assert not others, statements.sent
    assert sql.startswith('WITH moved AS (UPDATE "approvals_plan"')
    assert 'INSERT INTO "approvals_auditevent"' in sql
    # No transaction before it, none left open after it, and no COMMIT sent: the
    # statement committed by itself. The wake-up was asked for outside any transaction
    # (so it is published at once, after that commit).
    assert before == after == TransactionStatus.IDLE
    assert statements.commits == 0
    assert published == [False]
    assert Plan.objects.get(id=plan.id).status == PlanStatus.COMPLETED == plan.status
    event = AuditEvent.objects.get(plan_id=plan.id, kind="execution.completed")
    assert event.data == {"from": "executing", "to": "completed", "upstream_status": 200}
    assert audit_seal()["events"] >= 1
    assert audit_verify().ok


def test_a_lost_race_outside_a_transaction_writes_nothing(transactional_db, make_plan):
    plan = _executing(make_plan)
    stale = Plan.objects.get(id=plan.id)
    _complete(plan, timezone.now())
    last = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first()
    row = Plan.objects.values().get(id=plan.id)
    with pytest.raises(InvalidTransition, match="no longer executing"):
        _complete(stale, timezone.now())
    assert AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() == last
    assert AuditEvent.objects.filter(plan_id=plan.id, kind="execution.completed").count() == 1
    assert Plan.objects.values().get(id=plan.id) == row
    assert stale.status == PlanStatus.EXECUTING and stale.upstream_status is None


def test_an_event_on_its_own_is_still_refused_outside_a_transaction(transactional_db, make_plan):
    plan = make_plan()
    events = AuditEvent.objects.count()
    with pytest.raises(RuntimeError, match="inside the transaction"):
        audit_record(kind="plan.noted", actor="worker", plan=plan)
    # Writes along with a change are undone only by a transaction: refused without one.
    change = ('UPDATE "approvals_plan" SET status = status WHERE id = %s RETURNING 1', [plan.id])
    with pytest.raises(RuntimeError, match="inside the transaction"):
        audit_record_change(
            change, along=[("SELECT 1", [])], kind="plan.noted", actor="worker", plan=plan
        )
    assert AuditEvent.objects.count() == events
