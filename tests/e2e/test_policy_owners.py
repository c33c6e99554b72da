"""A decision rule owns its plans, with real processes (web server, Celery worker, the demo
upstream) and the pages in a real Chromium: an @approve runs a ruled plan with no person
only when the rule lets policies decide, and the page then says the requirement was met
by the policy; under a rule that keeps its plans, the same proposal waits for the rule's
group, nothing is written, and the page says which policy would approve it and which rule
keeps it for whom."""

from __future__ import annotations

import pytest

from approvals.models import Approval
from tests.approvals.test_policy_owners import REVERSIBLE, load
from tests.e2e.test_browser import log_in
from tests.e2e.test_decision_rules import outcome, person

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def test_a_rule_decides_whether_a_policy_may_approve_its_plans(live, agent_api, chromium, upstream):
    person("bea", "billing-approvers")
    action, values = REVERSIBLE

    load(rule="allowing", policy="approve", upstream=upstream)
    created = agent_api.http.post("/plans", json={"action": action, "input": values})
    assert created.status_code == 201, created.text
    allowed = created.json()
    assert allowed["approved_by"] == "policy"
    assert allowed["requirement"]["met"] is True
    assert allowed["requirement"]["met_by"]["rules"] == ["owners"]
    done = outcome(agent_api.http, allowed["id"])
    assert done["status"] == "completed", done
    assert len(upstream.writes()) == 1
    assert not Approval.objects.filter(plan_id=allowed["id"]).exists()  # no person

    load(rule="keeping", policy="approve", upstream=upstream)
    created = agent_api.http.post(
        "/plans", json={"action": action, "input": {**values, "memo": "net 45"}}
    )
    assert created.status_code == 201, created.text
    kept = created.json()
    assert kept["status"] == "awaiting_approval" and kept["approved_by"] is None
    assert kept["policy"]["held"]["reasons"] == ["rule_owned"]
    assert len(upstream.writes()) == 1  # nothing more was written

    page = chromium()
    log_in(page, "bea", "pw-bea")
    page.goto(f"/plans/{kept['id']}/")
    held = page.get_by_test_id("policy-held")
    assert held.is_visible()
    assert held.inner_text() == (
        "Policy auto-yes would approve this plan, and a person decides it: "
        "the rule owners keeps it for billing-approvers."
    )
    assert page.get_by_test_id("threshold").inner_text() == "1 of billing-approvers: 0 of 1"
    assert page.get_by_test_id("policy-added").count() == 0

    page.goto(f"/plans/{allowed['id']}/")
    assert page.get_by_test_id("approved-by-policy").is_visible()
    assert page.get_by_test_id("met-by-policy").inner_text() == (
        "Who decides: policy auto-yes approved this plan, as the decision rules owners "
        "let policies decide it."
    )
    # Never "approved by policy" above "0 of 1".
    assert page.get_by_test_id("threshold").count() == 0
