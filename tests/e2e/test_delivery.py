"""Delivery guarantees with real brokers and workers: a message is only a wake-up, so
duplicates do not double an effect, a lost one is recovered by the sweeper, and a request
whose answer never came is reported as unknown, never resent."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest

from actions.models import Connector
from approvals.models import Attempt
from tests.e2e.support import NEW_EMAIL, WorkerLogs, eventually

pytestmark = pytest.mark.e2e


@pytest.fixture
def second_worker(live, live_env, worker_keys, tmp_path):
    """Another worker process, with two pool processes, on the same queue."""
    from demo.processes import start_worker

    env = {**live_env, "COUNTERSIGN_WORKER_KEY_FILE": worker_keys["private_file"]}
    proc = start_worker(env, tmp_path, name="worker2", concurrency=2)
    yield proc
    proc.stop()


def test_duplicate_deliveries_write_once(
    agent_api, upstream, approve_without_wakeup, live, second_worker
):
    from actions.lib.dispatch import EXECUTE_PLAN, publish

    plan = agent_api.propose()
    approve_without_wakeup(plan)
    logs = WorkerLogs(live["worker"], second_worker)

    for _ in range(20):
        publish(EXECUTE_PLAN, plan["id"])

    results = logs.wait_finished(20, timeout=30)
    assert len(results) == 20
    assert results.count("'completed'") == 1, results
    assert set(results) <= {"'completed'", "'skipped:executing'", "'skipped:completed'"}, results
    assert agent_api.wait_for(plan["id"])["status"] == "completed"
    assert len(upstream.writes()) == 1
    assert Attempt.objects.filter(plan_id=plan["id"]).count() == 1


def test_a_lost_wakeup_is_recovered_by_the_sweeper_once(
    agent_api, upstream, approve_without_wakeup, worker_logs, settings
):
    from executors.sweeper import sweep

    settings.COUNTERSIGN_REQUEUE_AFTER_SECONDS = 0
    plan = agent_api.propose()
    approve_without_wakeup(plan)  # committed, but the broker never heard of it
    assert agent_api.get(plan["id"])["status"] == "approved"
    assert upstream.writes() == []

    assert sweep()["requeued"] == 1
    done = agent_api.wait_for(plan["id"])
    assert done["status"] == "completed", done
    assert worker_logs.wait_finished(1) == ["'completed'"]

    assert sweep()["requeued"] == 0
    assert len(upstream.writes()) == 1
    assert upstream.state()["contacts"]["c-1001"]["email"] == NEW_EMAIL


def test_no_answer_after_sending_is_unknown_and_filtered(agent_api, rita, upstream):
    Connector.objects.filter(name="demo").update(read_timeout=0.5)
    # The upstream applies the change, then answers too late.
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", times=1, delay=2.0, apply=True)
    plan = agent_api.propose()

    rita.decide(plan["id"], "approve")

    done = agent_api.wait_for(plan["id"])
    assert done["status"] == "unknown", done
    outcome = done["outcome"]
    assert outcome["state"] == "unknown"
    assert 0 < len(outcome["detail"]) <= 200
    assert uuid.UUID(str(outcome["correlation_id"]))
    text = json.dumps(done)
    for secret in (upstream.write_token, upstream.read_token):
        assert secret not in text
    outcome_text = json.dumps(outcome).lower()
    for leak in (upstream.url, "127.0.0.1", "http://", "/contacts/", "traceback", "timeout"):
        assert leak.lower() not in outcome_text, leak
    # Sent once, and never again; the full record is kept for people, secrets redacted.
    assert len(upstream.writes()) == 1
    attempt = Attempt.objects.get(plan_id=plan["id"])
    assert attempt.state == Attempt.State.LOST
    assert attempt.request["headers"]["Authorization"] == "[redacted]"
    assert upstream.write_token not in json.dumps(attempt.request)
    assert str(attempt.plan.correlation_id) == outcome["correlation_id"]


def _pool_children(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # "pid (comm) state ppid ..."; comm may contain spaces, so split after ")".
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(entry.name))
    return children


def test_a_worker_killed_mid_request_is_settled_as_unknown(
    agent_api, upstream, reviewer, live, worker_logs, settings
):
    """SIGKILL the pool process while the upstream is still answering: the message
    comes back (acks_late), the redelivery must not send again, and the sweeper settles
    the plan as unknown once its lease is over."""
    from approvals.services import approval_record
    from executors.sweeper import sweep

    # Long enough to find and kill the pool process while the worker waits for the answer.
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", times=1, delay=5.0)
    plan = agent_api.propose()
    approval_record(
        plan_id=plan["id"],
        reviewer=reviewer,
        decision="approve",
        fingerprint_seen=plan["fingerprint"],
    )
    eventually(upstream.writes, what="the PATCH to leave the worker")
    (child,) = _pool_children(live["worker"].proc.pid)
    os.kill(child, signal.SIGKILL)

    # The redelivered message finds the plan claimed and sends nothing.
    assert "'skipped:executing'" in worker_logs.wait_finished(1)
    assert agent_api.get(plan["id"])["status"] == "executing"
    assert Attempt.objects.get(plan_id=plan["id"]).state == Attempt.State.SENDING

    settings.COUNTERSIGN_EXECUTION_LEASE_SECONDS = 0
    report = sweep()
    assert report["unknown"] == 1, report
    done = agent_api.get(plan["id"])
    assert done["status"] == "unknown"
    assert done["outcome"]["state"] == "unknown"
    assert sweep()["unknown"] == 0
    assert len(upstream.writes()) == 1
    assert live["worker"].alive()
