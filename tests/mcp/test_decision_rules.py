"""The MCP tools say who decides: a plan nobody can decide is an error naming the group,
and a plan's answer carries its requirement (groups and counts, never people)."""

from __future__ import annotations

from approvals.models import Plan
from tests.approvals.test_decision_rules import demo_rules, load_rules, person
from tests.mcp.test_server import run

INVOICE = {"invoice_id": "inv-2001"}


def test_a_plan_nobody_can_decide_is_an_error_naming_the_group(in_process, catalog, agent_token):
    load_rules(demo_rules())
    result = run(in_process, agent_token, lambda c: c.call_tool("send_invoice", INVOICE))
    assert result.is_error
    problem = result.structured_content
    assert problem["type"] == "urn:countersign:problem:no-one-can-decide"
    assert problem["detail"] == "no one can approve this: billing-approvers has no active member"
    assert "billing-approvers has no active member" in result.content[0].text
    assert not Plan.objects.exists()


def test_the_answer_carries_the_requirement(in_process, catalog, agent_token):
    load_rules(demo_rules())
    person("bea", "billing-approvers")
    result = run(in_process, agent_token, lambda c: c.call_tool("send_invoice", INVOICE))
    assert not result.is_error
    requirement = result.structured_content["requirement"]
    assert requirement["rules"] == ["invoices-are-billings"]
    assert requirement["met"] is False
    text = result.content[0].text
    assert "Who decides" in text and "`billing-approvers`: 0 of 1" in text
    assert "bea" not in text
