"""Rows a decision and a claim need come with the plan they lock, not in queries of their
own: the decision rules match on the action's connector, the policies' facts name the
agent (bench/cpu.py counted each as one more query on every decision and execution).
Only the plan's row is locked either way."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext
from psycopg.pq import TransactionStatus

from approvals.models import PlanStatus
from approvals.services import approval_record
from tests.approvals.test_decision_rules import demo_rules, load_rules, person
from tests.approvals.test_policies import ROUTINE


def selects_from(queries: list[dict], table: str) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].lstrip().startswith("SELECT") and
            f'FROM "{table}"' in q["sql"]]  # fmt: skip


def test_a_decision_under_decision_rules_reads_the_connector_with_the_plan(
    make_plan, catalog, django_capture_on_commit_callbacks
):
    load_rules(demo_rules())
    plan = make_plan()
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    reviewer = person("lead", "support-leads")
    with (
        django_capture_on_commit_callbacks(execute=False),
        CaptureQueriesContext(connection) as ctx,
    ):
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )
    assert selects_from(ctx.captured_queries, "actions_connector") == []
    locked = [q["sql"] for q in ctx.captured_queries if "FOR UPDATE" in q["sql"]]
    assert locked and all('FOR UPDATE OF "approvals_plan"' in sql for sql in locked), locked


def test_a_claim_under_policies_reads_the_agent_with_the_plan(
    upstream, make_plan, demo_policies, run, executor_key
):
    plan = make_plan(input=ROUTINE)
    assert plan.status == PlanStatus.APPROVED and plan.policy["mode"] == "policy"
    with CaptureQueriesContext(connection) as ctx:
        assert run(plan) == PlanStatus.COMPLETED
    assert selects_from(ctx.captured_queries, "actions_agent") == []
    locked = [q["sql"] for q in ctx.captured_queries if "FOR UPDATE" in q["sql"]]
    assert locked and all('FOR UPDATE OF "approvals_plan"' in sql for sql in locked), locked


def test_each_move_of_an_execution_is_one_statement_with_its_event(
    upstream, make_plan, demo_policies, run, executor_key
):
    """The claim and the outcome each move the plan and record it in one round trip: no
    UPDATE of the plan, and no audit INSERT, on its own; the claim's attempt is inserted
    in the claim's statement."""
    plan = make_plan(input=ROUTINE)
    with CaptureQueriesContext(connection) as ctx:
        assert run(plan) == PlanStatus.COMPLETED
    sqls = [q["sql"] for q in ctx.captured_queries]
    moves = [sql for sql in sqls if sql.startswith("WITH ") and
             'moved AS (UPDATE "approvals_plan"' in sql]  # fmt: skip
    assert len(moves) == 2, sqls
    assert all('INSERT INTO "approvals_auditevent"' in sql for sql in moves)
    assert moves[0].startswith('WITH along0 AS (INSERT INTO "executors_attempt"')
    alone = [sql for sql in sqls if not sql.startswith("WITH ")]
    assert not [sql for sql in alone if sql.startswith('UPDATE "approvals_plan"')], sqls
    assert not [sql for sql in alone if "INSERT INTO" in sql], sqls


def test_the_claim_reads_the_vault_lock_with_the_plan_and_the_fence_again(
    upstream, make_plan, demo_policies, run, executor_key
):
    """The vault lock stops a claim: read in the statement that locks the plan (only the
    plan's row locked), not in one of its own; the fence reads it again before sending."""
    plan = make_plan(input=ROUTINE)
    with CaptureQueriesContext(connection) as ctx:
        assert run(plan) == PlanStatus.COMPLETED
    sqls = [q["sql"] for q in ctx.captured_queries]
    # Two reads of the lock in all: no statement of its own.
    claim, fence = [sql for sql in sqls if '"actions_vaultstate"' in sql]
    assert 'FOR UPDATE OF "approvals_plan"' in claim and 'FROM "approvals_plan"' in claim
    assert fence.startswith('UPDATE "executors_attempt"')


def test_the_last_move_of_an_execution_is_its_own_transaction(
    transactional_db, upstream, make_plan, demo_policies, run, executor_key
):
    """The worker runs outside a transaction: its last move (the outcome and its event)
    is one statement committed by itself, with no BEGIN before it nor COMMIT after."""
    plan = make_plan(input=ROUTINE)
    seen = []

    def wrapper(execute, sql, params, many, context):
        before = connection.connection.info.transaction_status
        result = execute(sql, params, many, context)
        seen.append((sql, before, connection.connection.info.transaction_status, params))
        return result

    with connection.execute_wrapper(wrapper):
        assert run(plan) == PlanStatus.COMPLETED
    moves = [s for s in seen if 'moved AS (UPDATE "approvals_plan"' in s[0]]
    claim, last = moves
    idle = TransactionStatus.IDLE
    # The claim's move is inside the claim's transaction; the last one is alone.
    assert claim[1] == claim[2] == TransactionStatus.INTRANS
    assert last[1] == last[2] == idle, last[:3]
    assert last[3][0] == PlanStatus.COMPLETED
