"""The worker checks who decided again: the stored requirement is the fingerprinted
one, the decision rules in force still give it, and the approvals, by the groups
recorded when they were given, meet it. Otherwise nothing is sent, and it says why."""

from __future__ import annotations

import json

import pytest
import yaml

from actions.catalog import load_catalog
from actions.lib.models import AuditEvent
from approvals.models import Approval, Plan, PlanStatus
from approvals.services import approval_record
from tests.approvals.test_decision_rules import person
from tests.conftest import demo_catalog_text

INVOICE = {"invoice_id": "inv-2001"}


def rules_section() -> dict:
    return yaml.safe_load(demo_catalog_text(decision_rules=True))["reviewers"]


def load_rules(section: dict) -> None:
    load_catalog(json.dumps({"version": 1, "reviewers": section}))


@pytest.fixture
def billing(catalog):
    load_rules(rules_section())
    person("leo", "support-leads")
    return person("bea", "billing-approvers")


@pytest.fixture
def approved_invoice(make_plan, billing, django_capture_on_commit_callbacks):
    plan = make_plan("send_invoice", INVOICE)
    with django_capture_on_commit_callbacks(execute=False):
        approval_record(
            plan_id=plan.id, reviewer=billing, decision="approve", fingerprint_seen=plan.fingerprint
        )
    plan = Plan.objects.get(pk=plan.pk)
    assert plan.status == PlanStatus.APPROVED
    return plan


def refused(plan: Plan, upstream) -> str:
    plan = Plan.objects.get(pk=plan.pk)
    assert plan.status == PlanStatus.REFUSED
    assert upstream.writes() == []
    event = AuditEvent.objects.get(plan=plan, kind="execution.refused")
    assert event.data["reason"] in plan.outcome_detail
    return event.data["reason"]


def test_a_plan_approved_by_its_group_executes(upstream, approved_invoice, run, executor_key):
    assert run(approved_invoice) == PlanStatus.COMPLETED
    assert len(upstream.writes()) == 1


def test_rules_changed_after_approval_stop_the_plan(upstream, approved_invoice, run, executor_key):
    section = rules_section()
    section["rules"]["invoices-are-billings"]["any_of"] = [{"group": "support-leads", "count": 1}]
    load_rules(section)
    run(approved_invoice)
    reason = refused(approved_invoice, upstream)
    assert reason == (
        "the decision rules changed since this plan was approved: it was approved under "
        "1 of billing-approvers, and now needs 1 of support-leads"
    )


def test_rules_added_after_approval_stop_a_plan_approved_under_the_class_default(
    upstream, make_plan, approve, run, executor_key, billing
):
    plan = approve(make_plan())  # update_contact_email: no rule, any reviewer
    section = rules_section()
    section["rules"]["emails"] = {
        "match": {"actions": ["update_contact_email"]},
        "any_of": [{"group": "billing-approvers", "count": 1}],
    }
    load_rules(section)
    run(plan)
    assert "now needs 1 of billing-approvers" in refused(plan, upstream)


def test_an_approval_without_a_recorded_group_does_not_count(
    upstream, approved_invoice, run, executor_key
):
    # A row changed behind the decide service's back (as a database write would).
    Approval.objects.filter(plan=approved_invoice).update(groups=[])
    run(approved_invoice)
    assert refused(approved_invoice, upstream).startswith("no valid approval")


def test_an_approval_recorded_for_another_group_does_not_count(
    upstream, approved_invoice, run, executor_key
):
    Approval.objects.filter(plan=approved_invoice).update(groups=["support-leads"])
    run(approved_invoice)
    assert refused(approved_invoice, upstream).startswith("no valid approval")


def test_a_lowered_requirement_column_is_refused(upstream, approved_invoice, run, executor_key):
    Plan.objects.filter(pk=approved_invoice.pk).update(requirement={})
    run(approved_invoice)
    assert refused(approved_invoice, upstream) == (
        "the plan's stored requirement is not the one in its fingerprint"
    )
