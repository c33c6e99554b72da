"""The catalog's policies applied to plans: a forbid refuses at submission (nothing
stored, audited); an @approve approves with no person (audited with the policies and the
set's hash, fingerprinted, checked again by the worker); an @require adds to who must
approve; the floor (irreversible, evaluation errors) sends plans to people; a shadow set
is recorded and never enforced, and its disagreements with people counted."""

from __future__ import annotations

import json

import pytest
import yaml
from django.contrib.auth.models import Group
from django.urls import reverse
from prometheus_client import REGISTRY

from actions.catalog import load_catalog
from actions.lib.exceptions import PolicyRefused
from actions.lib.models import AuditEvent
from actions.policy.versions import policy_version_current
from approvals.decisions.policies import plan_policy_facts, policy_claim_refusal
from approvals.models import Plan, PlanStatus
from approvals.services import approval_record
from tests.approvals.test_decision_rules import person

ROUTINE = {"contact_id": "c-1002", "email": "g.hopper@example.test"}
ELSEWHERE = {"contact_id": "c-1002", "email": "grace@navy.example"}
VIP_DELETE = {"contact_id": "c-1001"}


def load_policies(enforce: str, shadow: str = "") -> None:
    section = {"enforce": [{"text": enforce}]}
    if shadow:
        section["shadow"] = [{"text": shadow}]
    load_catalog(yaml.safe_dump({"version": 1, "policies": section}))


def fresh(plan: Plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


@pytest.fixture
def billing(demo_policies):
    return person("bea", "billing-approvers")


def test_a_routine_change_is_approved_by_policy_and_says_so(make_plan, demo_policies):
    plan = make_plan(input=ROUTINE)
    assert plan.status == PlanStatus.APPROVED
    assert plan.policy["mode"] == "policy"
    version = policy_version_current()
    part = plan.policy["policies"]
    assert part["outcome"] == "approve" and part["decided_by"] == ["routine-email"]
    assert (part["set"], part["version"]) == (version.hash, version.number)
    assert not plan.approvals.exists()  # no person
    event = AuditEvent.objects.get(plan=plan, kind="plan.approved")
    assert event.actor == "system:policy"
    assert event.data | {"by": "x"} == event.data | {
        "by": "x",
        "policies": ["routine-email"],
        "set": version.hash,
        "version": version.number,
    }
    assert event.data["by"] == "policy"
    assert policy_claim_refusal(plan) is None


def test_another_domain_goes_to_a_person_and_says_which_policies_looked(make_plan, demo_policies):
    plan = make_plan(input=ELSEWHERE)
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.policy["mode"] == "per_call"
    assert plan.policy["policies"]["outcome"] == "review"
    assert plan.policy["policies"]["decided_by"] == []


def test_a_vip_deletion_is_refused_with_the_policys_reason_and_nothing_is_stored(
    make_plan, demo_policies, client, api_headers
):
    with pytest.raises(PolicyRefused) as info:
        make_plan("delete_contact", VIP_DELETE)
    assert info.value.policies == ["vip-contacts-stay"]
    assert "a VIP contact is never deleted by an agent" in info.value.detail
    assert not Plan.objects.exists()
    refused = AuditEvent.objects.get(kind="plan.refused", data__check="policy")
    assert refused.data["policies"] == ["vip-contacts-stay"]
    assert refused.data["set"] == policy_version_current().hash
    answer = client.post(
        "/api/v1/plans",
        data={"action": "delete_contact", "input": VIP_DELETE},
        content_type="application/json",
        **api_headers,
    )
    assert answer.status_code == 403
    problem = answer.json()
    assert problem["type"].endswith("policy-refused")
    assert problem["detail"] == (
        "refused by policy vip-contacts-stay: a VIP contact is never deleted by an agent; "
        "ask the account's owner"
    )
    assert not Plan.objects.exists()


def test_a_large_invoice_needs_a_billing_approver(make_plan, billing):
    plan = make_plan("send_invoice", {"invoice_id": "inv-2001"})  # 120.00
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.requirement == {
        "rules": ["policy:large-invoices"],
        "all_of": [{"any_of": [{"group": "billing-approvers", "count": 1}]}],
    }
    assert plan.policy["requirement"] == plan.requirement  # fingerprinted
    assert plan.policy["policies"]["decided_by"] == ["large-invoices"]


def test_a_required_group_nobody_is_in_refuses_up_front(make_plan, demo_policies):
    from actions.lib.exceptions import NoOneCanDecide

    with pytest.raises(NoOneCanDecide, match="billing-approvers has no active member"):
        make_plan("send_invoice", {"invoice_id": "inv-2001"})


def test_an_irreversible_plan_matched_by_an_approve_still_goes_to_review(make_plan, catalog):
    load_policies(
        '@id("tidy-up") @approve\npermit (principal, action == Action::"delete_contact", resource);'
    )
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.policy["mode"] == "per_call"
    assert plan.policy["policies"]["outcome"] == "review"
    # The floor is named, in the fingerprinted part: not a silent "review, no policies".
    assert plan.policy["policies"]["held"] == {"policies": ["tidy-up"], "reasons": ["irreversible"]}


OVERFLOW = (
    '@id("busy-hours") @approve\n'
    'permit (principal, action == Action::"update_contact_email", resource)\n'
    "when { context.rate.hour + 9223372036854775807 > 0 };\n"
)


def test_a_policy_that_fails_sends_the_plan_to_people_and_says_which(
    make_plan, catalog, client, reviewer, caplog
):
    load_policies(OVERFLOW)
    before = REGISTRY.get_sample_value(
        "countersign_policy_errors_total", {"policy": "busy-hours", "part": "enforce"}
    )
    first = make_plan(input=ROUTINE)  # no plan in the last hour: no overflow
    assert first.status == PlanStatus.APPROVED
    second = make_plan(input={"contact_id": "c-1003", "email": "a.turing@example.test"})
    assert second.status == PlanStatus.AWAITING_APPROVAL
    assert second.policy["policies"]["errors"] == ["busy-hours"]
    assert (
        REGISTRY.get_sample_value(
            "countersign_policy_errors_total", {"policy": "busy-hours", "part": "enforce"}
        )
        == (before or 0) + 1
    )
    assert any("busy-hours" in r.getMessage() for r in caplog.records)
    client.force_login(reviewer)
    page = client.get(reverse("approvals:plan-detail", args=[second.id])).content.decode()
    assert 'data-testid="policy-errors"' in page and "busy-hours" in page


def test_the_worker_refuses_a_policy_approval_the_set_in_force_no_longer_gives(
    make_plan, demo_policies
):
    plan = make_plan(input=ROUTINE)
    assert policy_claim_refusal(plan) is None
    # The set changes between the approval and the write: routine email is gone.
    load_policies(
        '@id("vip-contacts-stay") @reason("no")\n'
        'forbid (principal, action == Action::"delete_contact", resource)\n'
        'when { context.before has tags && context.before.tags.contains("vip") };'
    )
    why = policy_claim_refusal(fresh(plan))
    assert why.startswith("the policy set changed since a policy approved this plan")
    assert "no policy approves it" in why


def test_a_set_changed_alike_still_approves(make_plan, demo_policies):
    plan = make_plan(input=ROUTINE)
    text = (demo_policy_text("routine-email") + "\n// reworded, same meaning\n") + demo_policy_text(
        "vip-contacts"
    )
    load_policies(text)
    assert policy_claim_refusal(fresh(plan)) is None


def demo_policy_text(name: str) -> str:
    from tests.conftest import DEMO_CATALOG

    return (DEMO_CATALOG.parent / "policies" / f"{name}.cedar").read_text()


def test_a_forbid_added_after_a_persons_approval_stops_the_plan(
    make_plan, catalog, reviewer, django_capture_on_commit_callbacks
):
    plan = make_plan("delete_contact", VIP_DELETE)
    with django_capture_on_commit_callbacks(execute=False):
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )
    assert policy_claim_refusal(fresh(plan)) is None
    load_policies(demo_policy_text("vip-contacts"))
    assert "a policy in force refuses it now" in policy_claim_refusal(fresh(plan))


def test_the_facts_the_worker_uses_are_the_ones_the_plan_was_decided_on(make_plan, demo_policies):
    make_plan(input={"contact_id": "c-1003", "email": "a.turing@example.test"})
    plan = make_plan(input=ROUTINE)
    facts = plan_policy_facts(plan)
    part = plan.policy["policies"]
    # One plan of this agent for this action before it, in the hour and the day.
    assert (facts.rate_hour, facts.rate_day) == tuple(part["rate"]) == (1, 1)
    assert facts.now.isoformat() == part["at"]
    # Later plans do not change what this one is judged on.
    make_plan(input={"contact_id": "c-1003", "email": "alan.t@example.test"})
    assert plan_policy_facts(fresh(plan)).rate_hour == 1


def test_a_shadow_policy_is_recorded_and_never_enforced(
    make_plan, catalog, reviewer, client, django_capture_on_commit_callbacks
):
    load_policies(
        demo_policy_text("vip-contacts"),
        shadow=demo_policy_text("routine-email"),
    )
    plan = make_plan(input=ROUTINE)
    assert plan.status == PlanStatus.AWAITING_APPROVAL  # not enforced
    assert plan.shadow["outcome"] == "approve"
    assert plan.shadow["policies"] == ["routine-email"]
    assert "shadow" not in plan.policy  # not fingerprinted
    event = AuditEvent.objects.get(plan=plan, kind="policy.shadow")
    assert event.data["would"] == "approve" and event.data["policies"] == ["routine-email"]
    client.force_login(reviewer)
    page = client.get(reverse("approvals:plan-detail", args=[plan.id])).content.decode()
    assert "Shadow policy <code>routine-email</code> would have approved this plan" in page
    before = REGISTRY.get_sample_value(
        "countersign_shadow_disagreements_total", {"shadow": "approve"}
    )
    with django_capture_on_commit_callbacks(execute=True):
        approval_record(
            plan_id=plan.id, reviewer=reviewer, decision="deny", fingerprint_seen=plan.fingerprint
        )
    assert (
        REGISTRY.get_sample_value("countersign_shadow_disagreements_total", {"shadow": "approve"})
        == (before or 0) + 1
    )
    dashboard = client.get(reverse("approvals:dashboard")).content.decode()
    assert 'data-testid="shadow-disagreements">1<' in dashboard


def test_a_shadow_annotation_keeps_one_policy_out_of_force(make_plan, catalog):
    load_policies("@shadow\n" + demo_policy_text("routine-email"))
    plan = make_plan(input=ROUTINE)
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.shadow["outcome"] == "approve"


def test_the_agent_is_told_who_decided(client, api_headers, demo_policies):
    created = client.post(
        "/api/v1/plans",
        data={"action": "update_contact_email", "input": ROUTINE},
        content_type="application/json",
        **api_headers,
    )
    assert created.status_code == 201, created.content
    answer = created.json()
    assert answer["approved_by"] == "policy"
    version = policy_version_current()
    assert answer["decided_by"] == {
        "by": "policy",
        "policies": ["routine-email"],
        "set": version.hash,
        "version": version.number,
        "grant_id": None,
    }
    assert answer["policy"]["outcome"] == "approve"
    other = client.post(
        "/api/v1/plans",
        data={"action": "update_contact_email", "input": ELSEWHERE},
        content_type="application/json",
        **api_headers,
    ).json()
    assert other["decided_by"] is None and other["policy"]["outcome"] == "review"


def test_a_changed_set_refuses_approvals_given_under_the_old_requirement(
    make_plan, billing, reviewer
):
    from actions.lib.exceptions import DecisionRulesChanged

    plan = make_plan("send_invoice", {"invoice_id": "inv-2001"})
    load_policies(demo_policy_text("vip-contacts"))  # large-invoices is gone
    with pytest.raises(DecisionRulesChanged):
        approval_record(
            plan_id=plan.id, reviewer=billing, decision="approve", fingerprint_seen=plan.fingerprint
        )
    assert not plan.approvals.exists()


def test_no_policies_no_change_to_the_fingerprint(make_plan, catalog):
    plan = make_plan(input=ROUTINE)
    assert "policies" not in plan.policy and plan.shadow == {}
    assert json.loads(plan.canonical)["policy"] == plan.policy
    assert Group.objects.filter(name="billing-approvers").count() == 0


def test_a_reviewers_revision_goes_to_a_person_even_if_a_policy_would_approve(
    make_plan, demo_policies, reviewer
):
    from approvals.services import plan_edit

    plan = make_plan(input=ELSEWHERE)
    revision = plan_edit(plan_id=plan.id, reviewer=reviewer, input=ROUTINE)
    assert revision.status == PlanStatus.AWAITING_APPROVAL
    assert revision.policy["mode"] == "per_call"
    # What the policies said, and why it did not approve: one voice, no policy decided.
    part = revision.policy["policies"]
    assert part["outcome"] == "review" and part["decided_by"] == []
    assert part["held"] == {"policies": ["routine-email"], "reasons": ["revision"]}


def test_the_groups_claim_decides_membership_of_the_groups_a_policy_requires(catalog):
    """A group only an @require names (no decision rule does) follows the identity
    provider's groups claim at sign-in, as the rules' groups do: otherwise a plan the
    policy sends to that group waits for people the sign-in never put in it."""
    from approvals.decisions.requirements import decision_groups_sync

    load_catalog(
        yaml.safe_dump(
            {
                "version": 1,
                "policies": {
                    "groups": ["security"],
                    "enforce": [
                        {
                            "text": '@id("deletes")\n@require("security")\n'
                            'permit (principal, action == Action::"delete_contact", resource);'
                        }
                    ],
                },
            }
        )
    )
    user = person("sso-user", "unrelated")
    assert decision_groups_sync(user, {"security", "unrelated-elsewhere"}) == ["security"]
    assert set(user.groups.values_list("name", flat=True)) == {"security", "unrelated"}
    assert decision_groups_sync(user, set()) == []
    assert set(user.groups.values_list("name", flat=True)) == {"unrelated"}
