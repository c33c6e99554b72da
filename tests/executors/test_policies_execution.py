"""The worker puts a plan to the catalog's policies again before it writes, with the
facts the plan was decided on: a plan a policy approved runs once with no person, and
never under a set that would no longer approve it; a forbid added since stops any plan.
Otherwise nothing is sent, and it says why."""

from __future__ import annotations

import pytest
import yaml

from actions.catalog import load_catalog
from actions.lib.models import AuditEvent
from approvals.models import Plan, PlanStatus
from tests.approvals.test_policies import ROUTINE, demo_policy_text


def load_policies(text: str) -> None:
    load_catalog(yaml.safe_dump({"version": 1, "policies": {"enforce": [{"text": text}]}}))


@pytest.fixture
def approved_by_policy(make_plan, demo_policies):
    plan = make_plan(input=ROUTINE)
    assert plan.status == PlanStatus.APPROVED and plan.policy["mode"] == "policy"
    return plan


def test_a_plan_approved_by_policy_executes_once_with_no_person(
    upstream, approved_by_policy, run, executor_key
):
    assert run(approved_by_policy) == PlanStatus.COMPLETED
    assert [w["method"] for w in upstream.writes()] == ["PATCH"]
    assert not approved_by_policy.approvals.exists()
    assert run(approved_by_policy) != PlanStatus.REFUSED  # a second delivery sends nothing
    assert len(upstream.writes()) == 1


def test_a_changed_set_that_would_no_longer_approve_stops_it(
    upstream, approved_by_policy, run, executor_key
):
    load_policies(demo_policy_text("vip-contacts"))  # routine-email is gone
    run(approved_by_policy)
    plan = Plan.objects.get(pk=approved_by_policy.pk)
    assert plan.status == PlanStatus.REFUSED
    assert upstream.writes() == []
    reason = AuditEvent.objects.get(plan=plan, kind="execution.refused").data["reason"]
    assert reason.startswith("the policy set changed since a policy approved this plan")
    assert reason in plan.outcome_detail


def test_a_plan_marked_approved_by_policy_without_a_record_is_refused(
    upstream, approved_by_policy, run, executor_key
):
    """Written past the submission (no policy part): the worker does not take the mode's
    word for it. The fingerprint check refuses it first, or this one does."""
    policy = {k: v for k, v in approved_by_policy.policy.items() if k != "policies"}
    Plan.objects.filter(pk=approved_by_policy.pk).update(policy=policy)
    run(approved_by_policy)
    plan = Plan.objects.get(pk=approved_by_policy.pk)
    assert plan.status == PlanStatus.REFUSED and upstream.writes() == []
