"""A reviewer in a real Chromium: log in, find the plan in the queue, read it, decide, and
watch the status change live (HTMX polling) without reloading the page."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e.support import NEW_EMAIL, OLD_EMAIL, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
REASON = "Customer asked by phone. <script>alert(1)</script> **bold**"
SCREENSHOT_COPY = "/tmp/countersign-plan.png"


@pytest.fixture
def page(chromium):
    """A Chromium page in a fresh context (tests/e2e/conftest.py ``chromium``)."""
    return chromium()


def log_in(page, username: str = "rita", password: str = "pw-rita") -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/plans/")


def open_from_queue(page, plan: dict) -> None:
    row = page.locator("table.plans tr", has_text=plan["short_code"])
    assert row.count() == 1
    assert "Update one contact's email address" in row.inner_text()
    assert "/contacts/c-1001" in row.inner_text()
    row.get_by_role("link", name="Update one contact's email address").click()
    page.wait_for_url(f"**/plans/{plan['id']}/")


def status_text(page) -> str:
    return page.get_by_test_id("plan-status").inner_text().strip()


def test_reviewer_approves_in_the_browser_and_sees_completion_live(
    page, agent_api, upstream, tmp_path
):
    # The upstream answers slowly, so the reviewer's page is still waiting when it loads.
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", times=1, delay=2.5)
    plan = agent_api.propose(reason=REASON)
    dialogs: list[str] = []  # an alert() would mean the reason ran as a script
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

    log_in(page)
    open_from_queue(page, plan)

    # The summary line, the diff and the short code first; the card a click away.
    line = page.get_by_test_id("summary-line").inner_text()
    assert line.startswith("UPDATE demo /contacts/c-1001 · Ada Lovelace · reversible · 0 of 1")
    assert page.title().startswith("UPDATE demo /contacts/c-1001 · Ada Lovelace")
    diff = page.locator("section.changes table.diff").first
    assert "/email" in diff.inner_text()
    assert OLD_EMAIL in diff.inner_text() and NEW_EMAIL in diff.inner_text()
    assert page.get_by_test_id("short-code").inner_text() == plan["short_code"]
    card = page.locator("details.card")
    card.locator("summary").click()
    assert "Replaces the email address stored on one contact record." in card.inner_text()
    # The agent's reason is quoted literally: not markup, not markdown.
    reason = page.get_by_test_id("agent-reason")
    assert reason.inner_text().strip() == REASON
    assert reason.evaluate("el => el.tagName") == "BLOCKQUOTE"
    assert reason.locator("script, strong").count() == 0
    assert page.locator("script", has_text="alert(1)").count() == 0
    assert page.locator("strong", has_text="bold").count() == 0

    shot = tmp_path / "plan.png"
    page.screenshot(path=str(shot), full_page=True)
    shutil.copyfile(shot, SCREENSHOT_COPY)

    assert page.evaluate("typeof window.htmx") == "object", "the vendored htmx was not served"
    page.get_by_role("button", name=f"Approve {plan['short_code']}").click()
    page.wait_for_url(f"**/plans/{plan['id']}/")
    assert page.get_by_role("status").filter(has_text="Approval recorded.").count() == 1
    assert status_text(page) in ("Approved", "Executing")

    # From here on only HTMX may change the page: mark the document to detect a reload.
    page.evaluate("window.__sameDocument = true")
    fragment_requests: list[str] = []
    page.on(
        "request",
        lambda r: fragment_requests.append(r.url) if r.headers.get("hx-request") else None,
    )
    page.get_by_test_id("plan-status").filter(has_text="Completed").wait_for(timeout=15_000)
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    assert fragment_requests, "the status did not come from an HTMX request"
    assert dialogs == []

    eventually(lambda: upstream.writes() and upstream.writes()[0]["status"] == 200)
    assert len(upstream.writes()) == 1
    assert agent_api.get(plan["id"])["status"] == "completed"


def test_reviewer_denies_in_the_browser_and_nothing_is_written(page, agent_api, upstream):
    plan = agent_api.propose(reason="tidy up")

    log_in(page)
    page.goto(f"/plans/{plan['id']}/")
    page.get_by_role("button", name="Deny").click()
    page.wait_for_url(f"**/plans/{plan['id']}/")

    assert page.get_by_role("status").filter(has_text="Denied.").count() == 1
    assert status_text(page) == "Denied"
    assert page.get_by_role("button", name="Deny").count() == 0
    assert page.get_by_test_id("decision-bar").count() == 0
    assert "can no longer be decided" in page.locator("#plan-status").inner_text()
    assert agent_api.get(plan["id"])["status"] == "denied"
    assert upstream.writes() == []
