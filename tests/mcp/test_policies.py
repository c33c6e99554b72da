"""The MCP tools and the catalog's policies: a refusal is a tool error carrying the
policy's reason (and no plan is made); a plan a policy approved says so, with the policy
and the set."""

from __future__ import annotations

from actions.lib.models import AuditEvent
from actions.policy.versions import policy_version_current
from approvals.models import Plan
from tests.approvals.test_policies import ROUTINE
from tests.mcp.test_server import run


def test_a_policy_refusal_is_an_error_with_the_policys_reason(
    in_process, demo_policies, agent_token
):
    result = run(
        in_process, agent_token, lambda c: c.call_tool("delete_contact", {"contact_id": "c-1001"})
    )
    assert result.is_error
    problem = result.structured_content
    assert problem["type"] == "urn:countersign:problem:policy-refused"
    assert "vip-contacts-stay" in problem["detail"]
    assert "a VIP contact is never deleted by an agent" in result.content[0].text
    assert not Plan.objects.exists()
    assert AuditEvent.objects.filter(kind="plan.refused", data__check="policy").count() == 1


def test_a_plan_a_policy_approved_says_which_policy(in_process, demo_policies, agent_token):
    result = run(in_process, agent_token, lambda c: c.call_tool("update_contact_email", ROUTINE))
    assert not result.is_error
    answer = result.structured_content
    assert answer["approved_by"] == "policy"
    assert answer["decided_by"]["policies"] == ["routine-email"]
    assert answer["decided_by"]["set"] == policy_version_current().hash
    text = result.content[0].text
    assert "approved by policy" in text and "`routine-email`" in text


def test_a_plan_a_rule_keeps_says_which_policy_would_approve_and_why_not(
    in_process, catalog, upstream, agent_token
):
    from tests.approvals.test_decision_rules import person
    from tests.approvals.test_policy_owners import REVERSIBLE, load

    person("bea", "billing-approvers")
    load(rule="keeping", policy="approve", upstream=upstream)
    action, values = REVERSIBLE
    result = run(in_process, agent_token, lambda c: c.call_tool(action, values))
    assert not result.is_error
    answer = result.structured_content
    assert answer["status"] == "awaiting_approval" and answer["approved_by"] is None
    assert answer["policy"]["outcome"] == "review"
    assert answer["policy"]["held"] == {
        "policies": ["auto-yes"],
        "reasons": ["rule_owned"],
        "rules": [{"rule": "owners", "groups": ["billing-approvers"]}],
    }
    assert answer["requirement"]["met"] is False
    text = result.content[0].text
    assert (
        "policy `auto-yes` would approve this; the rule `owners` keeps it for "
        "`billing-approvers`" in text
    )


def test_a_plan_a_rule_lets_a_policy_approve_reads_met_by_that_policy(
    in_process, catalog, upstream, agent_token
):
    from tests.approvals.test_decision_rules import person
    from tests.approvals.test_policy_owners import REVERSIBLE, load

    person("bea", "billing-approvers")
    load(rule="allowing", policy="approve", upstream=upstream)
    action, values = REVERSIBLE
    result = run(in_process, agent_token, lambda c: c.call_tool(action, values))
    answer = result.structured_content
    assert answer["approved_by"] == "policy" and answer["policy"]["held"] is None
    assert answer["requirement"]["met"] is True and answer["requirement"]["missing"] == []
    assert answer["requirement"]["met_by"] == {
        "by": "policy",
        "policies": ["auto-yes"],
        "rules": ["owners"],
    }
    text = result.content[0].text
    assert "met by policy `auto-yes`: rules `owners` let policies decide" in text
    assert "not met yet" not in text
