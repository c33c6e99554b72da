"""Query counts on the hot paths: an agent's token check and submit, its read of a plan,
a reviewer's decision, the worker's execution (claim, send, finish). Each is a fixed
number of queries — the same with 5 or 200 plans (with their approvals and audit events)
already in the database — within a budget."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from actions.models import Agent
from actions.services import agent_revoke
from approvals.models import Approval, Plan, PlanStatus
from approvals.services import approval_record
from demo.history import seed_plans
from executors.services import execution_run

# Queries each path may take once this process has the catalog lookups in memory
# (actions/cache.py: each lookup is then one read of the catalog generation), and on a
# process's first request. Under test every transaction is nested in the test's own,
# so each atomic block adds a SAVEPOINT and a RELEASE to these counts. Submitting looks
# for an awaiting plan with the same fingerprint (a repeat) in one more round trip. A
# settled plan's attempt is read with the plan, in the same query. The decision rules
# are one more catalog lookup (actions/policy/reviewers.py), read once per generation, and
# so is the policy set in force (actions/policy/versions.py: one read of the version in
# force when there is none; its actions' types only when there is one). A submission
# through the API reads the generation once, for the token check and everything the
# submission looks up (one moment of the catalog). Each move of a plan is one statement
# with its audit event (approvals/lifecycle.py: plan_transition), one in a decision and
# two in an execution; the claim's attempt is inserted in the claim's (execution_begin),
# and the vault lock is read in the statement that locks the plan (executors/claims.py).
# A decision's approval is inserted in the read of the approvals that count it (a
# denial's: in the plan's move), and whether its reviewer decided already is read with
# the locked plan (approvals/services/deciding.py).
BUDGET = {"submit": 6, "read": 2, "read_settled": 2, "decide": 9, "execute": 10}
COLD_BUDGET = {"submit": 14, "read": 2, "read_settled": 2, "decide": 10, "execute": 16}

# A decision through the plan's page: the request's own queries (the session, the user,
# their permissions: their own and their groups' in one query, approvals/identity/
# permissions.py) and the service's, with nothing read of the
# plan before the service locks it (the typed confirmation is checked on the locked row).
# An approval that decides the plan transitions it too; one of two on an irreversible plan
# does not.
PAGE_BUDGET = {"approve": 10, "approve_irreversible": 9}


def count(fn) -> int:
    with CaptureQueriesContext(connection) as ctx:
        fn()
    return len(ctx.captured_queries)


def one_round(i: int, client, api_headers, reviewer, capture) -> dict[str, int]:
    body = {
        "action": "update_contact_email",
        "input": {"contact_id": "c-1001", "email": f"ada{i}@new.example"},
        "reason": "customer asked",
    }
    # As in a fresh request: the reviewer's permissions are loaded anew; the token was
    # used less than a minute ago (its use is recorded at most once a minute).
    reviewer = type(reviewer).objects.get(pk=reviewer.pk)
    Agent.objects.update(last_used_at=timezone.now())
    counts = {}
    responses = []
    counts["submit"] = count(
        lambda: responses.append(
            client.post("/api/v1/plans", body, content_type="application/json", **api_headers)
        )
    )
    assert responses[-1].status_code == 201, responses[-1].content
    plan = Plan.objects.get(pk=responses[-1].json()["id"])
    counts["read"] = count(lambda: client.get(f"/api/v1/plans/{plan.id}", **api_headers))
    with capture(execute=False):
        counts["decide"] = count(
            lambda: approval_record(
                plan_id=plan.id,
                reviewer=reviewer,
                decision="approve",
                fingerprint_seen=plan.fingerprint,
            )
        )
    with capture(execute=False):
        counts["execute"] = count(lambda: execution_run(plan_id=plan.id))
    assert Plan.objects.get(pk=plan.pk).status == PlanStatus.COMPLETED
    counts["read_settled"] = count(lambda: client.get(f"/api/v1/plans/{plan.id}", **api_headers))
    return counts


def test_hot_paths_take_a_fixed_number_of_queries(
    client, api_headers, reviewer, executor_key, upstream, settings,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    settings.COUNTERSIGN_RATE_LIMIT = ""
    seed_plans(5)
    cold = one_round(0, client, api_headers, reviewer, django_capture_on_commit_callbacks)
    small = one_round(1, client, api_headers, reviewer, django_capture_on_commit_callbacks)
    seed_plans(200)
    large = one_round(2, client, api_headers, reviewer, django_capture_on_commit_callbacks)
    assert small == large, (small, large)
    for path, n in small.items():
        assert n <= BUDGET[path], (path, n, small)
    for path, n in cold.items():
        assert n <= COLD_BUDGET[path], (path, n, cold)


def test_a_revoked_agent_is_refused_on_its_very_next_request(client, agent, api_headers):
    """Nothing about a token's validity is cached between requests."""
    assert client.get("/api/v1/actions", **api_headers).status_code == 200
    agent_revoke(name=agent.name)
    assert client.get("/api/v1/actions", **api_headers).status_code == 401


def test_token_use_is_recorded_at_most_once_a_minute(client, agent, api_headers):
    client.get("/api/v1/actions", **api_headers)
    with CaptureQueriesContext(connection) as ctx:
        client.get("/api/v1/actions", **api_headers)
    assert not [q for q in ctx.captured_queries if q["sql"].startswith("UPDATE")]


def test_a_decision_through_the_page_reads_the_plan_once_locked(
    client, reviewer, make_plan, django_capture_on_commit_callbacks
):
    client.force_login(reviewer)

    def approve(plan, confirm: str = "") -> list[dict]:
        url = reverse("approvals:plan-decide", args=[plan.id])
        body = {"decision": "approve", "fingerprint": plan.fingerprint, "confirm": confirm}
        with (
            django_capture_on_commit_callbacks(execute=False),
            CaptureQueriesContext(connection) as ctx,
        ):
            assert client.post(url, body).status_code == 302
        assert Approval.objects.filter(plan=plan, reviewer=reviewer).exists()
        return ctx.captured_queries

    approve(make_plan(input={"contact_id": "c-1001", "email": "warm@new.example"}))
    counted = {
        "approve": approve(make_plan()),
        "approve_irreversible": approve(make_plan("delete_contact", {"contact_id": "c-1002"}),
                                        confirm="c-1002"),
    }  # fmt: skip
    for path, queries in counted.items():
        plan_reads = [q["sql"] for q in queries if 'FROM "approvals_plan"' in q["sql"]]
        assert len(plan_reads) == 1 and "FOR UPDATE" in plan_reads[0], (path, plan_reads)
        assert len(queries) <= PAGE_BUDGET[path], (path, len(queries))
