"""A decision rule owns the plans it matches: a policy's @approve approves a ruled plan only
when every matching rule says ``policies_may_approve: true`` (at submission and again at
the worker's claim). Whenever an @approve held and the plan still went to people, the
plan names why (``held``: the floor, a signed action, the rules that keep it, a
reviewer's revision), and its record, the API answer and the page agree on who decided:
never "approved" beside an unmet requirement."""

from __future__ import annotations

import itertools
import json

import pytest
import yaml
from django.test import override_settings
from django.urls import reverse
from prometheus_client import REGISTRY

from actions.catalog import CatalogError, load_catalog
from actions.export import export_catalog
from actions.lib.models import AuditEvent
from actions.models import DecisionRule
from approvals.decisions.policies import policy_claim_refusal
from approvals.decisions.requirements import plan_requirement_answer
from approvals.models import Plan, PlanStatus
from tests.approvals.test_decision_rules import person
from tests.conftest import demo_catalog_text

# One action of each kind the matrix needs, with an input the demo upstream serves.
REVERSIBLE = ("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "net 30"})
IRREVERSIBLE = ("delete_contact", {"contact_id": "c-1002"})
SIGNED = ("update_contact_phone", {"contact_id": "c-1002", "phone": "+1 202 555 0199"})
ACTIONS = {"reversible": REVERSIBLE, "irreversible": IRREVERSIBLE, "signed": SIGNED}

APPROVE_ALL = (
    '@id("auto-yes") @approve\n'
    'permit (principal, action in [Action::"update_invoice_memo", '
    'Action::"delete_contact", Action::"update_contact_phone"], resource);\n'
)
# A set in force that says nothing of these actions: they go to review.
APPROVE_NOTHING = (
    '@id("elsewhere") @approve\npermit (principal, action == Action::"send_reminder", resource);\n'
)


def load(*, rule: str, policy: str, upstream) -> None:
    """The demo catalog with update_contact_phone asking for signed approvals, one
    decision rule over the three actions (none / allowing policies / keeping its plans)
    and one policy set (approving them, or not)."""
    document = yaml.safe_load(demo_catalog_text())
    document["actions"]["update_contact_phone"]["approval"] = {"signed": True}
    if rule != "none":
        definition = {
            "description": "Billing owns these.",
            "match": {"actions": [a for a, _ in ACTIONS.values()]},
            "any_of": [{"group": "billing-approvers", "count": 1}],
        }
        if rule == "allowing":
            definition["policies_may_approve"] = True
        document["reviewers"] = {"groups": ["billing-approvers"], "rules": {"owners": definition}}
    document["policies"] = {
        "enforce": [{"text": APPROVE_ALL if policy == "approve" else APPROVE_NOTHING}]
    }
    load_catalog(yaml.safe_dump(document), base_urls={"demo": upstream.url})


def expected_held(*, rule: str, kind: str) -> list[str]:
    reasons = []
    if kind == "irreversible":
        reasons.append("irreversible")
    if kind == "signed":
        reasons.append("signed_action")
    if rule == "keeping":
        reasons.append("rule_owned")
    return reasons


CASES = list(itertools.product(("none", "allowing", "keeping"), ("approve", "review"), ACTIONS))


@override_settings(COUNTERSIGN_SIGNED_APPROVAL_CLASSES=[])
@pytest.mark.parametrize(("rule", "policy", "kind"), CASES)
def test_record_answer_and_page_agree_on_who_decided(
    rule, policy, kind, catalog, upstream, agent, make_plan, client, api_headers
):
    # The contact actions are scoped to the agent's workspace.
    agent.attributes = {"workspace": "ws-blue"}
    agent.save(update_fields=["attributes"])
    billing = person("bea", "billing-approvers")
    load(rule=rule, policy=policy, upstream=upstream)
    action, values = ACTIONS[kind]
    plan = Plan.objects.get(pk=make_plan(action, values).pk)

    held = expected_held(rule=rule, kind=kind) if policy == "approve" else []
    by_policy = policy == "approve" and not held
    part = plan.policy["policies"]

    # The record.
    assert (plan.status == PlanStatus.APPROVED) is by_policy
    assert (plan.policy["mode"] == "policy") is by_policy
    assert part["outcome"] == ("approve" if by_policy else "review")
    assert part["decided_by"] == (["auto-yes"] if by_policy else [])
    if held:
        expected = {"policies": ["auto-yes"], "reasons": held}
        if "rule_owned" in held:
            expected["rules"] = [{"rule": "owners", "groups": ["billing-approvers"]}]
        assert part["held"] == expected
    else:
        assert "held" not in part
    answer = plan_requirement_answer(plan)
    # The invariant: a plan approved with no person never reads "requirement not met".
    if plan.status == PlanStatus.APPROVED:
        assert answer == {} or (answer["met"] and not answer["missing"])
    if rule == "none":
        assert answer == {}
    else:
        assert answer["rules"] == ["owners"]
        assert answer["met"] is by_policy
        assert ("met_by" in answer) is by_policy

    # The API answer.
    got = client.get(f"/api/v1/plans/{plan.id}", **api_headers)
    assert got.status_code == 200
    doc = got.json()
    assert (doc["approved_by"] == "policy") is by_policy
    assert doc["policy"]["outcome"] == part["outcome"]
    requirement = doc["requirement"]
    if doc["approved_by"] == "policy":
        assert doc["decided_by"]["by"] == "policy"
        assert requirement is None or (requirement["met"] and requirement["missing"] == [])
        if requirement is not None:
            assert requirement["met_by"] == {
                "by": "policy",
                "policies": ["auto-yes"],
                "rules": ["owners"],
            }
    else:
        assert doc["decided_by"] is None
        if requirement is not None:
            assert requirement["met"] is False and requirement["met_by"] is None
    if held:
        assert doc["policy"]["held"]["reasons"] == held
        assert doc["policy"]["held"]["policies"] == ["auto-yes"]
    else:
        assert doc["policy"]["held"] is None

    # The page, as a billing approver reads it.
    client.force_login(billing)
    page = client.get(reverse("approvals:plan-detail", args=[plan.id])).content.decode()
    assert ('data-testid="approved-by-policy"' in page) is by_policy
    assert ('data-testid="met-by-policy"' in page) is (by_policy and rule != "none")
    # Never "approved by policy" above "0 of 1", and never a policy "added to who must
    # approve" that only would have approved.
    if by_policy:
        assert 'data-testid="threshold"' not in page
    assert 'data-testid="policy-added"' not in page
    assert ('data-testid="policy-held"' in page) is bool(held)
    for reason in held:
        assert f'data-reason="{reason}"' in page
    if "rule_owned" in held:
        assert "keeps it for <code>billing-approvers</code>" in page
    if "signed_action" in held:
        assert "this action needs signed approvals" in page
    if "irreversible" in held:
        assert "an irreversible plan is never approved with no person" in page


def test_a_rule_that_stops_allowing_policies_stops_a_plan_a_policy_approved(
    catalog, upstream, make_plan
):
    person("bea", "billing-approvers")
    load(rule="allowing", policy="approve", upstream=upstream)
    plan = make_plan(*REVERSIBLE)
    assert plan.status == PlanStatus.APPROVED and plan.policy["mode"] == "policy"
    assert policy_claim_refusal(Plan.objects.get(pk=plan.pk)) is None
    # The owners take their plans back before the worker claims it: the same rule, the
    # same requirement, but no longer open to policies.
    load(rule="keeping", policy="approve", upstream=upstream)
    refusal = policy_claim_refusal(Plan.objects.get(pk=plan.pk))
    assert refusal == (
        "no policy approves this plan now: the decision rule owners keeps it for billing-approvers"
    )


def test_an_approve_held_by_a_rule_is_audited_as_a_proposal_for_people(
    catalog, upstream, make_plan
):
    person("bea", "billing-approvers")
    load(rule="keeping", policy="approve", upstream=upstream)

    def counted(outcome: str) -> float:
        labels = {"outcome": outcome, "part": "enforce"}
        return REGISTRY.get_sample_value("countersign_policy_decisions_total", labels) or 0

    approves, reviews = counted("approve"), counted("review")
    plan = make_plan(*REVERSIBLE)
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert not AuditEvent.objects.filter(plan=plan, kind="plan.approved").exists()
    # Counted as what the plan got: a review, not an approval.
    assert (counted("approve"), counted("review")) == (approves, reviews + 1)
    # The plan waits for its owners, who are the ones told about it.
    assert list(plan.deciding_groups.values_list("group", flat=True)) == ["billing-approvers"]


def test_the_rule_field_is_validated_exported_and_shown(catalog, upstream, admin_client):
    person("bea", "billing-approvers")
    document = yaml.safe_load(demo_catalog_text(decision_rules=True))
    rule = document["reviewers"]["rules"]["invoices-are-billings"]
    rule["policies_may_approve"] = "yes"
    with pytest.raises(CatalogError) as info:
        load_catalog(
            yaml.safe_dump({"version": 1, "reviewers": document["reviewers"]}),
        )
    assert "/reviewers/rules/invoices-are-billings/policies_may_approve" in str(info.value)
    rule["policies_may_approve"] = True
    load_catalog(json.dumps({"version": 1, "reviewers": document["reviewers"]}))
    stored = DecisionRule.objects.get(name="invoices-are-billings")
    assert stored.definition["policies_may_approve"] is True
    exported = yaml.safe_load(export_catalog())
    assert exported["reviewers"]["rules"]["invoices-are-billings"]["policies_may_approve"] is True
    assert "policies_may_approve" not in exported["reviewers"]["rules"]["deleting-a-contact"]
    page = admin_client.get(
        reverse("admin:actions_decisionrule_change", args=[stored.pk])
    ).content.decode()
    assert "policies may approve" in page.lower() and 'alt="True"' in page
    other = DecisionRule.objects.get(name="deleting-a-contact")
    page = admin_client.get(
        reverse("admin:actions_decisionrule_change", args=[other.pk])
    ).content.decode()
    assert 'alt="False"' in page and 'alt="True"' not in page


@pytest.mark.parametrize("rule", ["allowing", "keeping"])
def test_a_plain_read_a_rule_sends_to_people_follows_the_rule_too(
    rule, catalog, upstream, make_plan
):
    """A read its action lets run undecided goes to people once a rule matches it; an
    @approve then decides it only as the rule allows, and says so either way."""
    person("bea", "billing-approvers")
    upstream._data["deployments"]["dep-9"] = {
        "id": "dep-9",
        "service": "api",
        "version": "v1.2.3",
        "status": "running",
    }
    definition = {
        "match": {"actions": ["get_deployment"]},
        "any_of": [{"group": "billing-approvers", "count": 1}],
        **({"policies_may_approve": True} if rule == "allowing" else {}),
    }
    load_catalog(
        json.dumps(
            {
                "version": 1,
                "reviewers": {"groups": ["billing-approvers"], "rules": {"reads": definition}},
                "policies": {
                    "enforce": [
                        {
                            "text": '@id("reads-ok") @approve\npermit (principal, '
                            'action == Action::"get_deployment", resource);'
                        }
                    ]
                },
            }
        )
    )
    plan = make_plan("get_deployment", {"deployment_id": "dep-9"})
    part = plan.policy["policies"]
    if rule == "allowing":
        assert plan.status == PlanStatus.APPROVED and plan.policy["mode"] == "policy"
        assert part["outcome"] == "approve"
        assert plan_requirement_answer(plan)["met_by"]["rules"] == ["reads"]
    else:
        assert plan.status == PlanStatus.AWAITING_APPROVAL
        assert plan.policy["mode"] == "per_call"
        assert part["outcome"] == "review" and part["held"]["reasons"] == ["rule_owned"]


def test_the_owners_decide_a_plan_their_rule_kept(catalog, upstream, make_plan, client):
    from approvals.decisions.requirements import claim_refusal
    from approvals.services import approval_record

    billing = person("bea", "billing-approvers")
    load(rule="keeping", policy="approve", upstream=upstream)
    plan = make_plan(*REVERSIBLE)
    approval_record(
        plan_id=plan.id, reviewer=billing, decision="approve", fingerprint_seen=plan.fingerprint
    )
    plan = Plan.objects.get(pk=plan.pk)
    assert plan.status == PlanStatus.APPROVED and plan.policy["mode"] == "per_call"
    answer = plan_requirement_answer(plan)
    assert answer["met"] is True and "met_by" not in answer  # met by a person
    assert claim_refusal(plan, list(plan.approvals.all())) is None
    assert policy_claim_refusal(plan) is None
