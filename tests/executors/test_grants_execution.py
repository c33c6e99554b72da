"""The worker and session grants: a grant-approved plan runs once like any other, and
the grant is checked again at claim time -- revoked or expired means refused, with
nothing sent to the upstream."""

from __future__ import annotations

import pytest
from django.utils import timezone

from actions.lib.models import AuditEvent
from approvals.grants import grant_create, grant_revoke
from approvals.models import Plan, PlanStatus, SessionGrant

MEMO = "update_invoice_memo"
INPUT = {"invoice_id": "inv-2001", "memo": "under a grant"}


@pytest.fixture
def grant(reviewer, agent):
    return grant_create(creator=reviewer, agent=agent, action_names=[MEMO], duration_seconds=600)


@pytest.fixture
def granted(grant, make_plan, django_capture_on_commit_callbacks):
    """A plan the grant approved at submission (the wake-up captured, not published)."""

    def granted() -> Plan:
        with django_capture_on_commit_callbacks(execute=False):
            plan = make_plan(MEMO, dict(INPUT))
        assert plan.status == PlanStatus.APPROVED and plan.policy["grant"] == str(grant.id)
        return Plan.objects.get(pk=plan.pk)

    return granted


def test_a_grant_approved_plan_is_executed_once(upstream, granted, run, executor_key):
    plan = granted()
    assert run(plan) == PlanStatus.COMPLETED
    writes = upstream.writes()
    assert len(writes) == 1 and writes[0]["body"]["memo"] == "under a grant"
    # A duplicate wake-up finds nothing to do.
    run(Plan.objects.get(pk=plan.pk))
    assert len(upstream.writes()) == 1
    assert plan.approvals.get().used_at is not None


def test_a_revoked_grant_stops_plans_not_yet_claimed(
    upstream, granted, grant, reviewer, run, executor_key
):
    plan = granted()
    grant_revoke(grant_id=grant.id, reviewer=reviewer)
    run(plan)
    plan = Plan.objects.get(pk=plan.pk)
    assert plan.status == PlanStatus.REFUSED
    assert "session grant" in plan.outcome_detail and "revoked" in plan.outcome_detail
    assert upstream.writes() == []
    refused = AuditEvent.objects.get(plan=plan, kind="execution.refused")
    assert "revoked" in refused.data["reason"]


def test_an_expired_grant_stops_plans_not_yet_claimed(upstream, granted, grant, run, executor_key):
    plan = granted()
    SessionGrant.objects.filter(pk=grant.pk).update(expires_at=timezone.now())
    run(plan)
    plan = Plan.objects.get(pk=plan.pk)
    assert plan.status == PlanStatus.REFUSED
    assert "expired" in plan.outcome_detail
    assert upstream.writes() == []


def test_revocation_only_affects_later_executions(
    upstream, granted, grant, reviewer, run, executor_key
):
    first = granted()
    assert run(first) == PlanStatus.COMPLETED
    second = granted()
    grant_revoke(grant_id=grant.id, reviewer=reviewer)
    run(second)
    assert Plan.objects.get(pk=first.pk).status == PlanStatus.COMPLETED
    assert Plan.objects.get(pk=second.pk).status == PlanStatus.REFUSED
    assert len(upstream.writes()) == 1


def test_a_policy_naming_the_grant_is_bound_by_the_fingerprint(
    upstream, granted, grant, reviewer, agent, run, executor_key
):
    """Swapping the grant named in the policy for another (active) one breaks the
    fingerprint: the worker refuses."""
    plan = granted()
    grant_revoke(grant_id=grant.id, reviewer=reviewer)
    fresh = grant_create(creator=reviewer, agent=agent, action_names=[MEMO], duration_seconds=60)
    Plan.objects.filter(pk=plan.pk).update(policy={**plan.policy, "grant": str(fresh.id)})
    run(Plan.objects.get(pk=plan.pk))
    plan = Plan.objects.get(pk=plan.pk)
    assert plan.status == PlanStatus.REFUSED
    assert "fingerprint" in plan.outcome_detail
    assert upstream.writes() == []
