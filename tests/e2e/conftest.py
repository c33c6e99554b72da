"""Fixtures for end-to-end tests: an agent and a reviewer talking to the live processes."""

from __future__ import annotations

import pytest

from tests.e2e.support import AgentClient, ReviewerClient, WorkerLogs


@pytest.fixture
def agent_api(live, agent_token):
    client = AgentClient(live["url"], agent_token)
    yield client
    client.close()


@pytest.fixture
def rita(live, reviewer):
    """The reviewer, logged in through the real login form."""
    client = ReviewerClient(live["url"], "rita", "pw-rita")
    yield client
    client.close()


@pytest.fixture
def worker_logs(live):
    """Execution tasks the live worker finishes from now on."""
    return WorkerLogs(live["worker"])


@pytest.fixture
def approve_without_wakeup(monkeypatch, reviewer):
    """Approve in this process while the broker message is lost: publishing is a no-op
    for the approval's on-commit hook only, then the real publish is back."""
    from approvals.services import approval_record

    def approve(plan: dict) -> None:
        with monkeypatch.context() as patched:
            patched.setattr("actions.lib.dispatch.publish", lambda *a, **k: None)
            approval_record(
                plan_id=plan["id"],
                reviewer=reviewer,
                decision="approve",
                fingerprint_seen=plan["fingerprint"],
            )

    return approve


@pytest.fixture
def chromium(live, reviewer, second_reviewer, agent_api):
    """Open Chromium pages on demand, each in a context of its own (its own cookies, so
    its own reviewer; its own locale and window size; JavaScript on or off). Chromium
    starts with the first page: tests touch the database before that, because Django
    refuses ORM calls while Playwright's event loop runs in this thread."""
    import shutil

    from tests.e2e.test_browser import CHROMIUM

    if not shutil.which(CHROMIUM):
        pytest.skip("Chromium is not installed at /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    started: dict = {}

    def new_page(**context_options):
        if not started:
            started["playwright"] = sync_playwright().start()
            started["browser"] = started["playwright"].chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"],
            )
        options = {"viewport": {"width": 1280, "height": 900}, **context_options}
        context = started["browser"].new_context(base_url=live["url"], **options)
        context.set_default_timeout(10_000)
        return context.new_page()

    yield new_page
    if started:
        started["browser"].close()  # closes its contexts too
        started["playwright"].stop()
