"""A reviewer in a real Chromium working the queue and plan revisions: filters and keyset
pages keep their place across the HTMX refresh; a stale plan is previewed again and the
revision approved to completion; an edited plan is approved and the agent follows it."""

from __future__ import annotations

import re

import pytest

from tests.e2e.support import OLD_EMAIL, eventually
from tests.e2e.test_browser import log_in, status_text

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

QUEUE_SCREENSHOT = "/tmp/countersign-queue.png"
REVISION_SCREENSHOT = "/tmp/countersign-plan-revision.png"


@pytest.fixture
def open_browser(chromium, approve_without_wakeup):
    """Pages in fresh contexts (tests/e2e/conftest.py ``chromium``), and approving
    in-process without the broker's wake-up."""
    return chromium


def row_ids(page) -> list[str]:
    return page.locator("tr.plan-row").evaluate_all("rows => rows.map(r => r.dataset.planId)")


def propose_memo(agent_api, memo: str) -> dict:
    response = agent_api.http.post(
        "/plans",
        json={"action": "update_invoice_memo", "input": {"invoice_id": "inv-2001", "memo": memo}},
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_queue_filter_and_page_survive_the_htmx_refresh(open_browser, agent_api):
    emails = [agent_api.propose(email=f"ada{i}@new.example") for i in range(3)]
    propose_memo(agent_api, "not an email change")
    page = open_browser()
    # The page's timers run on a clock the test may move on: the queue's refresh (every
    # 5 s) is then made due at once, by the page's own timer.
    page.clock.install()
    log_in(page)

    page.goto("/plans/?per_page=2")
    page.get_by_label("Action").select_option("update_contact_email")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"action=update_contact_email"))
    assert row_ids(page) == [emails[2]["id"], emails[1]["id"]]
    page.screenshot(path=QUEUE_SCREENSHOT, full_page=True)

    page.get_by_role("link", name="Next page").click()
    page.wait_for_url(re.compile(r"after="))
    assert row_ids(page) == [emails[0]["id"]]
    second_page_url = page.url

    # A new plan arrives; the second page must not shift, the refresh must keep its place.
    agent_api.propose(email="late@new.example")
    page.evaluate("window.__sameDocument = true")
    with page.expect_response(
        lambda r: r.request.headers.get("hx-request") == "true" and "/plans/" in r.url,
        timeout=12_000,
    ) as polled:
        page.clock.fast_forward(5_000)
    poll_url = polled.value.url
    assert "after=" in poll_url and "action=update_contact_email" in poll_url
    assert "per_page=2" in poll_url
    page.wait_for_timeout(300)  # let the swap settle
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    assert page.url == second_page_url
    assert row_ids(page) == [emails[0]["id"]]
    assert page.get_by_label("Action").input_value() == "update_contact_email"
    # The countdown is live (static script, no inline code).
    from playwright.sync_api import expect

    countdown = page.locator("tr.plan-row time.countdown").first
    expect(countdown).to_have_text(re.compile(r"^in (\d+h )?\d+m \d+s$"), timeout=3_000)


def test_stale_plan_is_previewed_again_and_the_revision_completes(
    open_browser, agent_api, upstream, approve_without_wakeup
):
    from actions.lib.dispatch import EXECUTE_PLAN, publish

    plan = agent_api.propose()
    approve_without_wakeup(plan)
    upstream.mutate("/contacts/c-1001", {"phone": "+1 555 0199"})
    publish(EXECUTE_PLAN, plan["id"])
    assert agent_api.wait_for(plan["id"])["status"] == "stale"
    assert upstream.writes() == []

    page = open_browser()
    log_in(page)
    page.goto(f"/plans/{plan['id']}/")
    assert status_text(page) == "Stale"
    assert page.get_by_role("button", name=f"Approve {plan['short_code']}").count() == 0
    page.get_by_role("button", name="Preview again").click()
    page.wait_for_url(lambda url: "/plans/" in url and plan["id"] not in url)
    assert page.get_by_role("status").filter(has_text="Previewed again").count() == 1

    moved = page.locator("table.target-moved")
    assert "/phone" in moved.inner_text() and "+1 555 0199" in moved.inner_text()
    assert "Same field changes as before" in page.get_by_test_id("same-change").inner_text()
    revision_id = re.search(r"/plans/([0-9a-f-]{36})/", page.url).group(1)
    followed = agent_api.get(plan["id"])
    assert followed["superseded_by"] == revision_id
    revision = agent_api.get(revision_id)
    page.screenshot(path=REVISION_SCREENSHOT, full_page=True)

    page.get_by_role("button", name=f"Approve {revision['short_code']}").click()
    page.get_by_test_id("plan-status").filter(has_text="Completed").wait_for(timeout=15_000)
    assert agent_api.wait_for(revision_id)["status"] == "completed"
    eventually(lambda: len(upstream.writes()) == 1, what="one write")
    assert upstream.state()["contacts"]["c-1001"]["email"] == "ada@new.example"
    assert upstream.state()["contacts"]["c-1001"]["phone"] == "+1 555 0199"


def test_reviewer_edits_then_approves_and_the_agent_follows(open_browser, agent_api, upstream):
    plan = agent_api.propose(email="ada@typo.example")
    page = open_browser()
    log_in(page)
    page.goto(f"/plans/{plan['id']}/")
    page.get_by_role("link", name="Edit the input").click()
    page.wait_for_url(f"**/plans/{plan['id']}/edit")
    email = page.get_by_label("email")
    assert email.input_value() == "ada@typo.example"
    email.fill("not-an-email")
    page.get_by_role("button", name="Preview the edit").click()
    assert page.locator(".field-error").count() == 1  # schema says no; nothing replaced
    assert agent_api.get(plan["id"])["status"] == "awaiting_approval"

    page.get_by_label("email").fill("ada@fixed.example")
    page.get_by_role("button", name="Preview the edit").click()
    page.wait_for_url(lambda url: "/edit" not in url and plan["id"] not in url)
    assert "A revision of plan" in page.get_by_test_id("revision-of").inner_text()
    assert "ada@fixed.example" in page.locator("table.diff").first.inner_text()
    revision_id = re.search(r"/plans/([0-9a-f-]{36})/", page.url).group(1)

    original = agent_api.get(plan["id"])
    assert original["status"] == "cancelled"
    assert original["outcome"]["detail"] == "superseded by a reviewer's edit"
    assert original["superseded_by"] == revision_id
    revision = agent_api.get(revision_id)
    assert revision["input"]["email"] == "ada@fixed.example"

    page.get_by_role("button", name=f"Approve {revision['short_code']}").click()
    page.get_by_test_id("plan-status").filter(has_text="Completed").wait_for(timeout=15_000)
    assert agent_api.wait_for(revision_id)["status"] == "completed"
    eventually(lambda: len(upstream.writes()) == 1, what="one write")
    assert upstream.state()["contacts"]["c-1001"]["email"] == "ada@fixed.example"
    assert OLD_EMAIL != "ada@fixed.example"


def test_dashboard_and_audit_log_render_without_inline_code(open_browser, agent_api):
    plan = agent_api.propose()
    page = open_browser()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    failed: list[str] = []
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    log_in(page)
    page.get_by_role("link", name="Dashboard").click()
    page.wait_for_url("**/plans/dashboard/")
    assert page.get_by_test_id("pending").inner_text() == "1"
    assert page.locator("svg.chart rect.seg-open").count() == 1
    page.screenshot(path="/tmp/countersign-dashboard.png", full_page=True)

    page.get_by_role("link", name="Audit log").click()
    page.get_by_role("searchbox", name="Plan").fill(plan["id"])
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"plan="))
    assert page.locator("tr[data-event-id]").count() == 1
    assert "plan.proposed" in page.locator("table.events").inner_text()
    with page.expect_download() as download:
        page.get_by_role("link", name="JSON lines").click()
    assert download.value.suggested_filename.endswith(".jsonl")
    assert page.locator("script:not([src])").count() == 0
    assert page.locator("[style]").count() == 0
    foreign_styles = page.evaluate(
        "[...document.querySelectorAll('style')]"
        ".filter(s => !s.textContent.includes('htmx-indicator')).length"
    )
    assert foreign_styles == 0
    # Nothing fails to load, the favicon included.
    assert failed == []
    assert page.request.get("/favicon.ico").ok
    assert [
        e for e in errors if "Applying inline style" not in e and "Failed to load" not in e
    ] == []
