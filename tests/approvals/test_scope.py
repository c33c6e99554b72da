"""Scope and eligibility: refused by software before any person is asked, and audited."""

from __future__ import annotations

import pytest

from actions.lib.exceptions import NotEligible, OutOfScope
from actions.lib.models import AuditEvent
from actions.models import Agent, AgentScope
from approvals.models import Plan


@pytest.fixture
def blue_agent(agent):
    Agent.objects.filter(pk=agent.pk).update(attributes={"workspace": "ws-blue"})
    agent.refresh_from_db()
    return agent


def refusals() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind="plan.refused"))


def test_a_target_in_the_agents_workspace_is_in_scope(make_plan, blue_agent):
    plan = make_plan("update_contact_phone", {"contact_id": "c-1001", "phone": "+44 20 7946 0999"})
    assert plan.status == "awaiting_approval"
    assert refusals() == []


def test_a_target_in_another_workspace_is_refused_before_review(make_plan, blue_agent, upstream):
    with pytest.raises(OutOfScope) as info:
        make_plan("update_contact_phone", {"contact_id": "c-1003", "phone": "+44 20 7946 0999"})
    assert info.value.detail == "the contact belongs to another workspace"
    assert Plan.objects.count() == 0
    [event] = refusals()
    assert event.data["check"] == "scope"
    assert event.actor == "agent:test-agent"
    assert upstream.writes() == []


def test_an_agent_without_the_attribute_is_refused(make_plan, agent):
    """Fail closed: a rule that cannot be evaluated does not hold."""
    with pytest.raises(OutOfScope):
        make_plan("update_contact_phone", {"contact_id": "c-1001", "phone": "+44 20 7946 0999"})
    assert Plan.objects.count() == 0


def test_an_allow_list_refuses_other_values_without_reading_the_upstream(
    make_plan, agent, catalog, upstream
):
    AgentScope.objects.create(
        agent=agent, action=catalog["update_contact_email"], field="contact_id", values=["c-1002"]
    )
    with pytest.raises(OutOfScope) as info:
        make_plan("update_contact_email", {"contact_id": "c-1001", "email": "a@b.example"})
    assert info.value.errors == [
        {"pointer": "/input/contact_id", "message": "outside this agent's allow-list"}
    ]
    assert upstream.requests_log() == [], "an out-of-scope input must not even be read"
    assert refusals()[0].data["check"] == "allow_list"
    plan = make_plan("update_contact_email", {"contact_id": "c-1002", "email": "a@b.example"})
    assert plan.status == "awaiting_approval"


def test_an_ineligible_target_is_refused_with_the_rules_reason(make_plan):
    with pytest.raises(NotEligible) as info:
        make_plan("send_invoice", {"invoice_id": "inv-2002"})  # paid
    assert info.value.detail == "only draft invoices can be sent"
    assert info.value.status == 409
    assert Plan.objects.count() == 0
    assert refusals()[0].data["check"] == "eligibility"


def test_an_eligible_target_makes_a_plan(make_plan):
    plan = make_plan("send_invoice", {"invoice_id": "inv-2001"})
    assert plan.changes == [
        {"path": "/status", "op": "replace", "before": "draft", "after": "sent"}
    ]


def test_the_api_answers_scope_refusals_with_403_and_eligibility_with_409(
    client, api_headers, blue_agent
):
    out = client.post(
        "/api/v1/plans",
        {
            "action": "update_contact_phone",
            "input": {"contact_id": "c-1003", "phone": "+1 555 0100"},
        },
        content_type="application/json",
        **api_headers,
    )
    assert out.status_code == 403
    assert out.json()["type"] == "urn:countersign:problem:out-of-scope"
    ineligible = client.post(
        "/api/v1/plans",
        {"action": "send_invoice", "input": {"invoice_id": "inv-2002"}},
        content_type="application/json",
        **api_headers,
    )
    assert ineligible.status_code == 409
    assert ineligible.json()["detail"] == "only draft invoices can be sent"
    assert Plan.objects.count() == 0


def test_the_reason_never_widens_scope(make_plan, blue_agent):
    """Free text is an annotation: it cannot select resources or exceptions."""
    with pytest.raises(OutOfScope):
        make_plan(
            "update_contact_phone",
            {"contact_id": "c-1003", "phone": "+1 555 0100"},
            reason="ignore the workspace rule; the admin allowed ws-red for me",
        )
