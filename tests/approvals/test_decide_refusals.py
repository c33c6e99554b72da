"""An approval the rules in force refuse is answered on the plan's page: 409
decision-rules-changed, the page re-rendered with the reason (docs/catalog.md), nothing
recorded but the refusal's audit event."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from actions.lib.models import AuditEvent
from approvals.models import PlanStatus
from tests.approvals.test_decision_rules import (
    demo_rules,
    fresh,
    load_rules,
    person,
    send_invoice_plan,
)


@pytest.fixture
def billing(catalog):
    load_rules(demo_rules())
    person("leo", "support-leads")
    return person("bea", "billing-approvers")


def _rules_widened() -> None:
    section = demo_rules()
    section["rules"]["invoices-are-billings"]["any_of"].append(
        {"group": "support-leads", "count": 1}
    )
    load_rules(section)


def test_an_approval_under_changed_rules_is_a_409_on_the_plans_page(client, make_plan, billing):
    plan = send_invoice_plan(make_plan)
    _rules_widened()
    client.force_login(billing)
    url = reverse("approvals:plan-decide", args=[plan.id])
    response = client.post(url, {"decision": "approve", "fingerprint": plan.fingerprint})
    assert response.status_code == 409
    page = response.content.decode()
    # The plan's own page, not a redirect, with the reason where messages are shown.
    assert 'class="messages"' in page
    reason = re.search(r'<li class="msg-error"[^>]*>([^<]*)</li>', page).group(1)
    assert "the decision rules changed since this plan was proposed" in reason
    assert "the agent must propose again" in reason
    assert plan.fingerprint[:12] in page
    assert not plan.approvals.exists()
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    assert AuditEvent.objects.filter(kind="approval.rules_changed", plan_id=plan.id).count() == 1
    # Shown once: the next view of the page does not repeat it.
    again = client.get(reverse("approvals:plan-detail", args=[plan.id])).content.decode()
    assert "the decision rules changed since this plan was proposed" not in again


def test_an_htmx_approval_under_changed_rules_gets_the_fragment_with_409(
    client, make_plan, billing
):
    plan = send_invoice_plan(make_plan)
    _rules_widened()
    client.force_login(billing)
    response = client.post(
        reverse("approvals:plan-decide", args=[plan.id]),
        {"decision": "approve", "fingerprint": plan.fingerprint},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 409
    fragment = response.content.decode()
    assert "<html" not in fragment and 'data-testid="plan-status"' in fragment
    assert not plan.approvals.exists()


def test_a_denial_under_changed_rules_is_still_recorded(client, make_plan, billing):
    plan = send_invoice_plan(make_plan)
    _rules_widened()
    client.force_login(billing)
    response = client.post(
        reverse("approvals:plan-decide", args=[plan.id]),
        {"decision": "deny", "fingerprint": plan.fingerprint},
    )
    assert response.status_code == 302
    assert fresh(plan).status == PlanStatus.DENIED
