"""The admin's policy backtest pages in a real Chromium: at a phone's width (390 px) the
report fits the screen (its wide tables scroll inside their own box), and neither the
report nor the page that asks for a run breaks the Content Security Policy (the styles
come from the static stylesheet, not an inline style)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.utils import timezone

from actions.catalog import load_catalog
from actions.policy.drafts import draft_compile, stored_actions
from approvals.decisions.backtest import backtest_run
from approvals.models import PolicyBacktest, RefusedSubmission

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

FREEZE = (
    '@id("freeze")\n'
    '@reason("no email changes during the migration of the customer records to the new '
    'system, which the whole support team is waiting for")\n'
    'forbid (principal, action == Action::"update_contact_email", resource);\n'
)
ROUTINE = (
    '@id("routine-email-with-a-long-name-that-does-not-wrap")\n'
    "@approve\n"
    'permit (principal, action == Action::"update_contact_email", resource);\n'
)
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def report(live, agent_api):
    """A finished backtest whose report lists plans and a refused submission, with long
    values, as a worker would have stored it."""
    Group.objects.get_or_create(name="billing-approvers")
    # Long, and still an address (a local part of at most 64 bytes, labels of 63).
    long_address = "someone.with.a.very.long.address." + "x" * 24 + "@" + "y" * 60 + ".example.test"
    agent_api.propose(contact_id="c-1002", email=long_address)
    load_catalog(
        json.dumps({"version": 1, "policies": {"enforce": [{"text": FREEZE}]}}), source="test"
    )
    refusal = agent_api.http.post(
        "/plans",
        json={
            "action": "update_contact_email",
            "input": {"contact_id": "c-1002", "email": "other." + long_address},
        },
    )
    assert refusal.status_code == 403, refusal.text
    assert RefusedSubmission.objects.count() == 1
    ana = get_user_model().objects.create_user(username="ana", password="pw-ana", is_staff=True)
    ana.user_permissions.add(Permission.objects.get(codename="run_policy_backtest"))
    now = timezone.now()
    compiled = draft_compile([("the draft", ROUTINE)], actions=stored_actions())
    result = backtest_run(policies=compiled, since=now - timedelta(days=1), until=now)
    assert result["new_approvals"]["count"] == 1
    assert result["refused_let_through"]["count"] == 1
    return PolicyBacktest.objects.create(
        created_by=ana,
        draft=ROUTINE,
        draft_hash=compiled.hash,
        since=now - timedelta(days=1),
        until=now,
        state=PolicyBacktest.State.DONE,
        finished_at=now,
        plans_read=1,
        report=result,
    )


def admin_log_in(page) -> None:
    page.goto("/admin/login/?next=/admin/")
    page.get_by_label("Username").fill("ana")
    page.get_by_label("Password").fill("pw-ana")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/admin/")


def watch(page) -> tuple[list[str], list[str]]:
    """Console errors, and responses that failed, from now on."""
    errors: list[str] = []
    failed: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    return errors, failed


def test_the_backtest_report_fits_a_phone_and_keeps_to_the_csp(chromium, report):
    page = chromium(viewport=PHONE)
    errors, failed = watch(page)
    admin_log_in(page)
    page.goto(report.get_absolute_url())
    page.locator("#policy-changes").wait_for()
    # The page keeps the phone's width; the wide lists scroll in their own boxes.
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.evaluate("document.body.scrollWidth") <= PHONE["width"]
    refused = page.locator("table[data-list=refused]")
    assert refused.is_visible()
    assert refused.evaluate("t => t.parentElement.scrollWidth > t.parentElement.clientWidth")
    assert refused.evaluate("t => getComputedStyle(t.parentElement).overflowX") == "auto"
    assert page.locator("table[data-list=new] a").count() == 1
    # The stylesheet came from this origin, and no style was refused.
    assert page.locator("link[href$='css/backtest.css']").count() == 1
    assert page.locator("style, [style]").count() == 0
    assert [e for e in errors if "Content Security Policy" in e] == []
    assert failed == []

    # The page that asks for a run, too.
    page.goto("/admin/approvals/policybacktest/add/")
    page.get_by_role("button", name="Run the backtest").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert [e for e in errors if "Content Security Policy" in e] == []
    assert failed == []


def test_the_backtest_pages_log_no_csp_error_on_a_desktop(chromium, report):
    page = chromium()
    errors, _ = watch(page)
    admin_log_in(page)
    page.goto("/admin/approvals/policybacktest/add/")
    page.get_by_role("button", name="Run the backtest").wait_for()
    page.goto(report.get_absolute_url())
    page.locator("#refused-let-through").wait_for()
    # The report's lists are laid out by the stylesheet: cells aligned to their top.
    cell = page.locator("table[data-list=refused] td").first
    assert cell.evaluate("td => getComputedStyle(td).verticalAlign") == "top"
    assert [e for e in errors if "Content Security Policy" in e] == []
