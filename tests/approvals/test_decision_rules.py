"""Who may decide (approvals/decisions): the requirement the decision rules give a plan
at submission, stored and fingerprinted; eligibility at each decision; distinct
approvers, each counted toward one threshold; nobody able to decide refused up front;
session grants only for what their maker may decide."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.urls import reverse

from actions.catalog import load_catalog
from actions.lib.exceptions import (
    DecisionRulesChanged,
    NoOneCanDecide,
    NotEligibleToDecide,
)
from actions.lib.models import AuditEvent
from approvals.grants import grant_create
from approvals.models import Approval, Plan, PlanStatus
from approvals.services import approval_record
from tests.conftest import demo_catalog_text

MEMO = "update_invoice_memo"
INVOICE = {"invoice_id": "inv-2001"}
DELETE = {"contact_id": "c-1001"}


def demo_rules() -> dict:
    return yaml.safe_load(demo_catalog_text(decision_rules=True))["reviewers"]


def load_rules(section: dict) -> None:
    load_catalog(json.dumps({"version": 1, "reviewers": section}))


def person(username: str, *groups: str, superuser: bool = False):
    user = get_user_model().objects.create_user(
        username=username, password="pw-" + username, is_superuser=superuser
    )
    user.user_permissions.add(Permission.objects.get(codename="review_plan"))
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    return get_user_model().objects.get(pk=user.pk)


@pytest.fixture
def rules(catalog):
    load_rules(demo_rules())


@pytest.fixture
def billing(rules):
    return person("bea", "billing-approvers")


@pytest.fixture
def lead(rules):
    return person("leo", "support-leads")


@pytest.fixture
def decide(django_capture_on_commit_callbacks):
    def decide(plan, reviewer, decision="approve"):
        with django_capture_on_commit_callbacks(execute=False):
            return approval_record(
                plan_id=plan.id,
                reviewer=reviewer,
                decision=decision,
                fingerprint_seen=plan.fingerprint,
            )

    return decide


def fresh(plan: Plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


def send_invoice_plan(make_plan) -> Plan:
    return make_plan("send_invoice", INVOICE)


# --- at submission ---------------------------------------------------------------------------


def test_the_requirement_is_stored_and_fingerprinted(make_plan, billing, lead):
    plan = send_invoice_plan(make_plan)
    expected = {
        "rules": ["invoices-are-billings"],
        "all_of": [{"any_of": [{"group": "billing-approvers", "count": 1}]}],
    }
    assert plan.requirement == expected
    assert plan.policy["requirement"] == expected
    assert '"requirement":' in plan.canonical
    # A plan no rule matches: class defaults, fingerprinted exactly as before.
    other = make_plan()
    assert other.requirement == {} and "requirement" not in other.policy


def test_a_plan_nobody_can_decide_is_refused_up_front_naming_the_group(make_plan, lead):
    with pytest.raises(NoOneCanDecide) as info:
        send_invoice_plan(make_plan)
    assert str(info.value) == "no one can approve this: billing-approvers has no active member"
    assert not Plan.objects.filter(action__name="send_invoice").exists()
    refused = AuditEvent.objects.get(kind="plan.refused")
    assert refused.data["check"] == "decision_rules"
    assert "billing-approvers" in refused.data["reason"]


def test_inactive_members_and_members_who_cannot_review_do_not_count(make_plan, lead):
    inactive = person("ina", "billing-approvers")
    inactive.is_active = False
    inactive.save()
    no_permission = get_user_model().objects.create_user(username="nora")
    no_permission.groups.add(Group.objects.get(name="billing-approvers"))
    with pytest.raises(NoOneCanDecide):
        send_invoice_plan(make_plan)
    person("bea", "billing-approvers")
    assert send_invoice_plan(make_plan).status == PlanStatus.AWAITING_APPROVAL


def test_an_all_of_one_person_alone_cannot_fill_is_refused(make_plan, rules):
    person("ada", "billing-approvers", "support-leads")
    with pytest.raises(NoOneCanDecide) as info:
        make_plan("delete_contact", DELETE)
    assert "too few distinct active members" in str(info.value)


def test_the_api_refuses_with_a_problem_document(client, api_headers, lead):
    response = client.post(
        "/api/v1/plans",
        {"action": "send_invoice", "input": INVOICE},
        content_type="application/json",
        **api_headers,
    )
    assert response.status_code == 409
    problem = response.json()
    assert problem["type"].endswith("no-one-can-decide")
    assert problem["detail"] == "no one can approve this: billing-approvers has no active member"
    assert not Plan.objects.exists()


# --- at each decision ---------------------------------------------------------------------------


def test_a_reviewer_outside_the_groups_is_refused_and_audited(make_plan, billing, lead, decide):
    plan = send_invoice_plan(make_plan)
    for decision in ("approve", "deny"):
        with pytest.raises(NotEligibleToDecide) as info:
            decide(plan, lead, decision)
        assert str(info.value) == "you cannot decide this plan: it needs 1 of billing-approvers"
    assert not plan.approvals.exists()
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    events = AuditEvent.objects.filter(kind="approval.not_eligible", plan_id=plan.id)
    assert events.count() == 2
    assert events.first().data["reason"].startswith("you cannot decide this plan")


def test_a_billing_approver_approves_and_the_group_is_recorded(make_plan, billing, decide):
    plan = send_invoice_plan(make_plan)
    decide(plan, billing)
    assert fresh(plan).status == PlanStatus.APPROVED
    approval = Approval.objects.get(plan=plan)
    assert approval.groups == ["billing-approvers"]
    assert approval.counted_for == "billing-approvers"


def test_a_superuser_outside_the_groups_is_not_eligible(make_plan, billing, decide):
    root = person("root", superuser=True)
    plan = send_invoice_plan(make_plan)
    with pytest.raises(NotEligibleToDecide):
        decide(plan, root)


def test_all_of_needs_both_groups_and_one_person_fills_one_threshold(
    make_plan, billing, lead, decide
):
    ada = person("ada", "billing-approvers", "support-leads")
    plan = make_plan("delete_contact", DELETE)
    decide(plan, ada)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    # A second billing approver: ada now counts for support-leads, bea for billing.
    decide(plan, billing)
    assert fresh(plan).status == PlanStatus.APPROVED
    counted = dict(
        Approval.objects.filter(plan=plan).values_list("reviewer__username", "counted_for")
    )
    assert counted == {"ada": "support-leads", "bea": "billing-approvers"}


def test_two_of_one_group_do_not_meet_an_all_of(make_plan, billing, lead, decide):
    plan = make_plan("delete_contact", DELETE)
    decide(plan, billing)
    decide(plan, person("bob", "billing-approvers"))
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    decide(plan, lead)
    assert fresh(plan).status == PlanStatus.APPROVED


def test_rules_changed_since_submission_refuse_the_decision(make_plan, billing, lead, decide):
    plan = send_invoice_plan(make_plan)
    section = demo_rules()
    section["rules"]["invoices-are-billings"]["any_of"].append(
        {"group": "support-leads", "count": 1}
    )
    load_rules(section)
    with pytest.raises(DecisionRulesChanged) as info:
        decide(plan, billing)
    assert "the agent must propose again" in str(info.value)
    assert not plan.approvals.exists()
    assert AuditEvent.objects.filter(kind="approval.rules_changed", plan_id=plan.id).exists()
    # Denying sends nothing: the plan's own groups still may.
    with pytest.raises(NotEligibleToDecide):
        decide(plan, lead, "deny")
    decide(plan, billing, "deny")
    assert fresh(plan).status == PlanStatus.DENIED


def test_the_registrar_never_approves_alone_under_a_rule(agent, make_plan, billing, lead, decide):
    from actions.lib.exceptions import NotAllowed

    both = person("ada", "billing-approvers", "support-leads")
    type(agent).objects.filter(pk=agent.pk).update(created_by=both)
    section = demo_rules()
    section["rules"]["deleting-a-contact"] = {
        "match": {"actions": ["delete_contact"]},
        "any_of": [{"group": "billing-approvers", "count": 1}],
    }
    load_rules(section)
    plan = make_plan("delete_contact", DELETE)
    with pytest.raises(NotAllowed) as info:
        decide(plan, both)
    assert "another reviewer must approve" in str(info.value)
    decide(plan, billing)
    assert fresh(plan).status == PlanStatus.APPROVED


# --- what the agent and the page are told -----------------------------------------------------


def test_the_api_answer_gives_groups_and_counts_never_names(
    client, api_headers, make_plan, billing, lead, decide
):
    plan = make_plan("delete_contact", DELETE)
    decide(plan, lead)
    answer = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()
    requirement = answer["requirement"]
    assert requirement["rules"] == ["deleting-a-contact"]
    assert requirement["met"] is False
    assert requirement["missing"] == [{"any_of": [{"group": "billing-approvers", "count": 1}]}]
    thresholds = {t["group"]: t["approved"] for c in requirement["all_of"] for t in c["any_of"]}
    assert thresholds == {"billing-approvers": 0, "support-leads": 1}
    # As words: "bea" may occur inside the plan's hexadecimal fingerprint or an id.
    assert not re.search(r"\b(leo|bea)\b", json.dumps(answer)), answer
    assert (
        client.get(f"/api/v1/plans/{make_plan().id}", **api_headers).json()["requirement"] is None
    )


def test_the_page_says_what_is_needed_and_who_cannot_decide(client, make_plan, billing, lead):
    plan = send_invoice_plan(make_plan)
    client.force_login(lead)
    # Another group's plan is not for leo to see at all...
    assert client.get(reverse("approvals:plan-detail", args=[plan.id])).status_code == 403
    # ... unless he may view every plan: then read-only.
    lead.user_permissions.add(Permission.objects.get(codename="view_plan"))
    page = client.get(reverse("approvals:plan-detail", args=[plan.id])).content.decode()
    assert "1 of billing-approvers: 0 of 1" in page
    assert "you cannot decide this plan" in page
    assert "invoices-are-billings" in page
    assert 'id="decide-form"' not in page
    response = client.post(
        reverse("approvals:plan-decide", args=[plan.id]),
        {"decision": "approve", "fingerprint": plan.fingerprint},
    )
    assert response.status_code == 403
    assert not plan.approvals.exists()
    client.force_login(billing)
    page = client.get(reverse("approvals:plan-detail", args=[plan.id])).content.decode()
    assert "you cannot decide this plan" not in page and 'id="decide-form"' in page


# --- session grants ------------------------------------------------------------------------------


def test_a_person_can_only_grant_what_they_may_decide(agent, make_plan, billing, lead):
    from actions.lib.exceptions import InvalidInput

    with pytest.raises(InvalidInput) as info:
        grant_create(creator=lead, agent=agent, action_names=[MEMO], duration_seconds=600)
    assert "needs 1 of billing-approvers" in info.value.errors[0]["message"]
    grant = grant_create(creator=billing, agent=agent, action_names=[MEMO], duration_seconds=600)
    plan = make_plan(MEMO, {"invoice_id": "inv-2001", "memo": "thanks"})
    assert plan.policy["grant"] == str(grant.id)
    assert plan.status == PlanStatus.APPROVED
    assert Approval.objects.get(plan=plan).groups == ["billing-approvers"]


def test_a_grant_whose_maker_left_the_group_covers_nothing(agent, make_plan, billing, lead):
    grant_create(creator=billing, agent=agent, action_names=[MEMO], duration_seconds=600)
    billing.groups.remove(Group.objects.get(name="billing-approvers"))
    person("bob", "billing-approvers")
    plan = make_plan(MEMO, {"invoice_id": "inv-2001", "memo": "thanks"})
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert "grant" not in plan.policy


# --- groups from the identity provider's claim ----------------------------------------------


def test_the_groups_claim_decides_membership_of_the_rules_groups(rules):
    from approvals.decisions.requirements import decision_groups_sync

    user = person("sso-user", "support-leads", "unrelated")
    Group.objects.get_or_create(name="unrelated")
    assert decision_groups_sync(user, {"billing-approvers", "reviewers"}) == ["billing-approvers"]
    assert set(user.groups.values_list("name", flat=True)) == {"billing-approvers", "unrelated"}
    assert decision_groups_sync(user, set()) == []
    assert set(user.groups.values_list("name", flat=True)) == {"unrelated"}


# --- the demo ------------------------------------------------------------------------------------


def test_the_demo_people_decide_every_demo_plan_and_are_not_superusers(
    rules, make_plan, decide, monkeypatch
):
    from io import StringIO

    from django.core.management import call_command

    from tests.conftest import READ_TOKEN, WRITE_TOKEN

    monkeypatch.setenv("DEMO_UPSTREAM_READ_TOKEN", READ_TOKEN)
    monkeypatch.setenv("DEMO_UPSTREAM_WRITE_TOKEN", WRITE_TOKEN)
    out = StringIO()
    call_command("demo_setup", stdout=out)
    printed = out.getvalue()
    assert "Reviewer login: reviewer / " in printed
    assert "Second reviewer: reviewer2 / " in printed
    users = get_user_model().objects
    first, second = users.get(username="reviewer"), users.get(username="reviewer2")
    for user in (first, second):
        assert not user.is_superuser and not user.is_staff
        assert set(user.groups.values_list("name", flat=True)) == {
            "reviewers",
            "billing-approvers",
            "support-leads",
        }
    # The all_of deletion: one of them fills each threshold.
    plan = make_plan("delete_contact", DELETE)
    decide(plan, first)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    decide(plan, second)
    assert fresh(plan).status == PlanStatus.APPROVED
    invoice = send_invoice_plan(make_plan)
    decide(invoice, first)
    assert fresh(invoice).status == PlanStatus.APPROVED
