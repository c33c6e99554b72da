"""Fixtures for playing the worker in-process."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from approvals.models import Plan, PlanStatus
from approvals.services import approval_record
from executors.services import execution_run


@contextmanager
def _no_publish(monkeypatch):
    """Nothing reaches the broker meanwhile: in a test with committed data (transactional
    db) on-commit callbacks run at each commit, before they could be captured, and the
    session's live worker, when it runs, would act on the wake-up beside the test."""
    with monkeypatch.context() as patched:
        patched.setattr("actions.lib.dispatch.publish", lambda *a, **k: None)
        yield


@pytest.fixture
def approve(django_capture_on_commit_callbacks, reviewer, second_reviewer, monkeypatch):
    """Approve a plan as reviewers do, without publishing a message to the broker."""

    def approve(plan) -> Plan:
        for person in (reviewer, second_reviewer)[: plan.approvals_required]:
            with _no_publish(monkeypatch), django_capture_on_commit_callbacks(execute=False):
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
def run(django_capture_on_commit_callbacks, monkeypatch):
    """execution_run, capturing (not running) any wake-up it would publish."""

    def run(plan) -> str:
        with _no_publish(monkeypatch), django_capture_on_commit_callbacks(execute=False):
            return execution_run(plan_id=plan.id)

    return run
