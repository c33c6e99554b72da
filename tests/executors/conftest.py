"""Fixtures for playing the worker in-process."""

from __future__ import annotations

import pytest

from approvals.models import Plan, PlanStatus
from approvals.services import approval_record
from executors.services import execution_run


@pytest.fixture
def approve(django_capture_on_commit_callbacks, reviewer, second_reviewer):
    """Approve a plan as reviewers do, without publishing a message to the broker."""

    def approve(plan) -> Plan:
        for person in (reviewer, second_reviewer)[: plan.approvals_required]:
            with django_capture_on_commit_callbacks(execute=False):
                approval_record(
                    plan_id=plan.id,
                    reviewer=person,
                    decision="approve",
                    fingerprint_seen=plan.fingerprint,
                )
        plan = Plan.objects.get(pk=plan.pk)
        assert plan.status == PlanStatus.APPROVED
        return plan

    return approve


@pytest.fixture
def approved(make_plan, approve):
    def approved(action="update_contact_email", input=None) -> Plan:
        return approve(make_plan(action=action, input=input))

    return approved


@pytest.fixture
def run(django_capture_on_commit_callbacks):
    """execution_run, capturing (not running) any wake-up it would publish."""

    def run(plan) -> str:
        with django_capture_on_commit_callbacks(execute=False):
            return execution_run(plan_id=plan.id)

    return run
