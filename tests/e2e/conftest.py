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
            patched.setattr("executors.tasks.publish", lambda *a, **k: None)
            approval_record(
                plan_id=plan["id"],
                reviewer=reviewer,
                decision="approve",
                fingerprint_seen=plan["fingerprint"],
            )

    return approve
