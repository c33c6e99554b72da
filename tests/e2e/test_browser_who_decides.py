"""Who decides, in a real Chromium: two people in different groups each open the queue
on the plans they may decide (and not the other's), the dashboard counts theirs, and a
superuser outside the groups decides by break-glass only once a reason is typed; who
decides is above Approve at both widths, and "All plans" says who decided each plan."""

from __future__ import annotations

import json

import pytest
import yaml
from django.contrib.auth import get_user_model

from actions.catalog import load_catalog
from actions.lib.models import AuditEvent
from actions.models import Agent
from approvals.grants import grant_create
from approvals.models import Approval
from tests.conftest import demo_catalog_text, demo_policies_load
from tests.e2e.support import orm
from tests.e2e.test_browser import log_in
from tests.e2e.test_decision_rules import person

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


@pytest.fixture
def plans(live, agent_api):
    section = yaml.safe_load(demo_catalog_text(decision_rules=True))["reviewers"]
    load_catalog(json.dumps({"version": 1, "reviewers": section}))
    person("bea", "billing-approvers")
    person("leo", "support-leads")
    get_user_model().objects.create_superuser("root", password="pw-root")
    out = {}
    for name, action, data in (
        ("invoice", "send_invoice", {"invoice_id": "inv-2001"}),
        ("deletion", "delete_contact", {"contact_id": "c-1002"}),
    ):
        response = agent_api.http.post("/plans", json={"action": action, "input": data})
        assert response.status_code == 201, response.text
        out[name] = response.json()
    return out


def queue_codes(page) -> set[str]:
    return {
        row.locator("td code").last.inner_text()
        for row in page.locator("table.plans tbody tr").all()
    }


def test_each_person_sees_their_own_plans_and_a_superuser_breaks_glass(chromium, plans):
    invoice, deletion = plans["invoice"], plans["deletion"]
    bea = chromium()
    log_in(bea, "bea", "pw-bea")
    assert queue_codes(bea) == {invoice["short_code"], deletion["short_code"]}
    assert "Mine to decide (2)" in bea.get_by_test_id("view-mine").inner_text()
    leo = chromium()
    log_in(leo, "leo", "pw-leo")
    assert queue_codes(leo) == {deletion["short_code"]}
    leo.get_by_role("link", name="Dashboard").click()
    assert leo.get_by_test_id("mine").inner_text() == "1"
    assert leo.get_by_test_id("pending").inner_text() == "1"
    # The invoice is not his: its page is refused.
    response = leo.goto(f"/plans/{invoice['id']}/")
    assert response.status == 403

    root = chromium()
    log_in(root, "root", "pw-root")
    root.goto(f"/plans/{invoice['id']}/")
    assert root.get_by_test_id("break-glass-offer").is_visible()
    reason = root.get_by_test_id("break-glass-reason")
    assert reason.get_attribute("required") is not None
    root.locator("#approve").click()
    # The browser will not send the form without a reason; nothing is decided.
    assert root.url.endswith(f"/plans/{invoice['id']}/")
    assert root.evaluate(
        "document.querySelector('[data-testid=break-glass-reason]').validity.valueMissing"
    )
    reason.fill("the billing team is at the offsite; the customer is waiting")
    root.locator("#approve").click()
    root.get_by_test_id("break-glass").wait_for()
    root.get_by_test_id("plan-status").filter(has_text="Completed").wait_for(timeout=15_000)

    def recorded():
        approval = Approval.objects.get(plan_id=invoice["id"])
        assert approval.break_glass and approval.reviewer.username == "root"
        event = AuditEvent.objects.get(plan_id=invoice["id"], kind="approval.break_glass")
        assert event.data["reason"] == (
            "the billing team is at the offsite; the customer is waiting"
        )

    orm(recorded)


def test_who_decides_is_above_the_decision_and_all_plans_says_who_decided(
    chromium, plans, agent_api
):
    deletion, invoice = plans["deletion"], plans["invoice"]
    # Above Approve on an irreversible plan, on a desktop and on a phone.
    for viewport in ({"width": 1280, "height": 800}, {"width": 390, "height": 844}):
        bea = chromium(viewport=viewport)
        log_in(bea, "bea", "pw-bea")
        bea.goto(f"/plans/{deletion['id']}/")
        block = bea.get_by_test_id("requirement").bounding_box()
        approve = bea.locator("#approve").bounding_box()
        assert block is not None and approve is not None
        assert block["y"] + block["height"] <= approve["y"], (viewport, block, approve)
        assert block["y"] + block["height"] <= viewport["height"], viewport
        assert bea.evaluate("document.documentElement.scrollWidth - window.innerWidth") == 0
    # Decided three ways: by a person, by a policy, by a session grant.
    bea.goto(f"/plans/{invoice['id']}/")
    bea.locator("#approve").click()
    bea.get_by_test_id("plan-status").filter(has_text="Completed").wait_for(timeout=15_000)

    def policies_and_a_grant():
        demo_policies_load()
        # A grant's maker alone must meet the rules that may match its plans: a billing
        # approver for the invoices' memo.
        grant_create(
            creator=get_user_model().objects.get(username="bea"),
            agent=Agent.objects.get(name="test-agent"),
            action_names=["update_invoice_memo"],
            duration_seconds=600,
        )

    orm(policies_and_a_grant)
    by_policy = agent_api.http.post(
        "/plans",
        json={
            "action": "update_contact_email",
            "input": {"contact_id": "c-1002", "email": "g.hopper@example.test"},
        },
    ).json()
    by_grant = agent_api.http.post(
        "/plans",
        json={"action": "update_invoice_memo", "input": {"invoice_id": "inv-2001", "memo": "x"}},
    ).json()
    assert by_policy["decided_by"]["by"] == "policy", by_policy
    assert by_grant["decided_by"]["by"] == "grant", by_grant

    bea.set_viewport_size({"width": 1280, "height": 800})
    bea.goto("/plans/")
    bea.get_by_test_id("view-all").click()
    bea.wait_for_url("**/plans/?view=all")
    assert bea.get_by_test_id("view-all").get_attribute("aria-current") == "page"
    assert bea.get_by_test_id("view-mine").get_attribute("aria-current") is None
    # The active view looks active too, not only to a screen reader.
    colours = bea.evaluate(
        """() => ['view-all', 'view-mine'].map(id => getComputedStyle(
            document.querySelector(`[data-testid=${id}]`)).backgroundColor)"""
    )
    assert colours[0] != colours[1]

    def row(plan):
        return bea.locator(f"tr[data-plan-id='{plan['id']}']")

    assert "Completed" in row(invoice).inner_text()
    assert row(invoice).get_by_test_id("decided-by").inner_text() == "bea"
    assert row(by_policy).get_by_test_id("decided-by").inner_text() == ("policy routine-email")
    assert row(by_grant).get_by_test_id("decided-by").inner_text().startswith("session grant ")
    assert row(deletion).get_by_test_id("decided-by").inner_text() == "—"
