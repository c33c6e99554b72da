"""Faults with real worker processes and the demo upstream, each checked against the
upstream's own record of writes: a reconciliation whose message died with its worker,
weak ETags, a sweeper that cannot start, and what the agent is told after a
reconciliation."""

from __future__ import annotations

import signal
import uuid
from types import SimpleNamespace

import pytest

from approvals.models import Attempt, Heartbeat, Plan, PlanStatus
from approvals.services import approval_record
from tests.e2e.support import SETTLED, eventually, header

pytestmark = pytest.mark.e2e


@pytest.fixture
def private(live, live_env, worker_keys, tmp_path):
    """Workers on a queue of this test's own, so it may kill them (the session's worker
    never sees these messages); the sweeper, where one runs, sweeps every second."""
    from demo.processes import start_worker

    queue = f"{live_env['COUNTERSIGN_QUEUE']}-faults-{uuid.uuid4().hex[:8]}"
    env = {
        **live_env,
        "COUNTERSIGN_QUEUE": queue,
        "COUNTERSIGN_WORKER_KEY_FILE": worker_keys["private_file"],
        "COUNTERSIGN_SWEEP_SECONDS": "1",
        "COUNTERSIGN_REQUEUE_AFTER_SECONDS": "2",
        "COUNTERSIGN_HEARTBEAT_SECONDS": "1",
    }
    started = []

    def start(name: str, *, beat=None, **extra):
        proc = start_worker({**env, **extra}, tmp_path, name=name, beat_schedule=beat)
        started.append(proc)
        return proc

    yield SimpleNamespace(queue=queue, start=start, logs=tmp_path)
    for proc in reversed(started):
        proc.stop()


def _approve_quietly(plan, reviewer, monkeypatch) -> None:
    """Approve in this process without publishing: the test sends the wake-up itself."""
    with monkeypatch.context() as patched:
        patched.setattr("actions.lib.dispatch.publish", lambda *a, **k: None)
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )


def _reads(upstream) -> int:
    return sum(1 for r in upstream.requests_log() if r["method"] == "GET")


def test_a_reconciliation_whose_worker_died_is_still_done_by_the_sweeper(
    private, make_plan, reviewer, upstream, monkeypatch, agent_api
):
    """The worker dies after the plan went unknown and while its reconciliation runs:
    the message stays unacknowledged in Redis for the visibility timeout (an hour). The
    row says the look is due, so the next worker's sweeper publishes it again."""
    from executors.tasks import execute_plan_task

    doomed = private.start("doomed")
    # The upstream applies the change, then answers 503: the outcome is unknown.
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=503, apply=True)
    plan = make_plan()
    _approve_quietly(plan, reviewer, monkeypatch)
    execute_plan_task.apply_async((str(plan.id),), queue=private.queue)
    eventually(lambda: Plan.objects.get(pk=plan.pk).status == PlanStatus.UNKNOWN, what="unknown")
    assert Plan.objects.get(pk=plan.pk).next_check_at is not None

    # The reconciliation's read reaches the upstream, which takes its time; the worker
    # is killed meanwhile (its whole process group), the message unacknowledged.
    reads = _reads(upstream)
    upstream.add_fault(method="GET", path_prefix="/contacts/", delay=30)
    eventually(lambda: _reads(upstream) > reads, what="the reconciliation's read")
    doomed.kill(signal.SIGKILL)
    doomed.proc.wait(10)
    assert Plan.objects.get(pk=plan.pk).status == PlanStatus.UNKNOWN
    # Had the read come just before the fault was set, the fault would wait for the heir.
    upstream.clear_faults()

    private.start("heir", beat=private.logs / "heir-beat")
    # Wait past unknown itself (a settled status for agents): only the heir's sweeper
    # and reconciliation can move the plan on.
    try:
        settled = agent_api.wait_for(str(plan.id), SETTLED - {PlanStatus.UNKNOWN}, timeout=90)
    except AssertionError as exc:
        found = Attempt.objects.get(plan=plan).reconciliation
        raise AssertionError(f"{exc}; the last reconciliation found {found}") from None
    assert settled["status"] == PlanStatus.COMPLETED, (
        settled["outcome"],
        Attempt.objects.get(plan=plan).reconciliation,
        [(r["method"], r["path"], r["status"], r["body"]) for r in upstream.requests_log()],
    )
    # What the agent is told about the write comes from the attempt.
    assert settled["outcome"]["request_sent"] is True
    assert settled["outcome"]["upstream_status"] == 503
    assert [w["method"] for w in upstream.writes()] == ["PATCH"]
    assert Attempt.objects.get(plan=plan).reconcile_checks >= 1
    assert Plan.objects.get(pk=plan.pk).next_check_at is None


def test_weak_etags_are_not_sent_as_if_match_and_the_plan_says_so(agent_api, rita, upstream):
    """By RFC 9110 a weak validator never satisfies If-Match: sending one back would be
    refused with 412 and reported as "the target changed", which is untrue."""
    upstream.set_weak_etags(True)
    plan = agent_api.propose()
    assert plan["precondition"]["expected"].startswith('W/"')
    assert plan["precondition"]["weak"] is True
    assert plan["precondition"]["enforced_by"] == "reread"
    assert "If-Match" not in plan["preview"]["request"]["headers"]
    assert 'data-testid="weak-precondition"' in rita.page(plan["id"])

    rita.decide(plan["id"], "approve")
    done = agent_api.wait_for(plan["id"])
    assert done["status"] == PlanStatus.COMPLETED, done
    (write,) = upstream.writes()
    assert header(write, "If-Match") is None
    assert upstream.state()["contacts"]["c-1001"]["email"] == plan["input"]["email"]


def test_a_worker_whose_beat_cannot_start_shows_the_sweeper_alarm(private, client, reviewer):
    """celery beat dies at start when it cannot create its schedule file; the worker goes
    on. The dashboard says the sweeper never ran, in the alarm colour, while the worker
    is seen alive; a beat whose directory nobody created makes it and runs."""
    blocker = private.logs / "a-file"
    blocker.write_text("not a directory")
    broken = private.start("beatless", beat=blocker / "var" / "celerybeat-schedule")
    eventually(
        lambda: Heartbeat.objects.filter(kind="worker", name__contains="beatless").exists(),
        what="the worker's heartbeat",
    )
    assert broken.alive()
    client.force_login(reviewer)
    page = client.get("/plans/dashboard/").content.decode()
    assert 'class="alarm" data-testid="sweeper"' in page
    assert "never run" in page
    assert 'class="plain" data-testid="workers"' in page  # the workers are fine
    assert not Heartbeat.objects.filter(name="sweeper").exists()

    private.start("beating", beat=private.logs / "made" / "by" / "the-worker" / "schedule")
    eventually(lambda: Heartbeat.objects.filter(name="sweeper").exists(), what="a sweep")
    page = client.get("/plans/dashboard/").content.decode()
    assert 'class="plain" data-testid="sweeper"' in page
    assert "Sweeper last ran" in page


def test_the_audit_trail_is_sealed_while_every_worker_process_is_busy(
    private, make_plan, reviewer, upstream, monkeypatch, audit_keys
):
    """The sealer runs beside the worker's pool, not in its queue: with the only pool
    process held by a slow write and more executions waiting behind it, a new event is
    still sealed within a few periods."""
    from actions.lib.models import AuditCheckpoint
    from executors.tasks import execute_plan_task

    private.start(
        "busy",
        COUNTERSIGN_AUDIT_KEY_FILE=audit_keys["private_file"],
        COUNTERSIGN_SEAL_SECONDS="0.2",
    )
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", delay=12, times=3)
    plans = [
        make_plan(input={"contact_id": cid, "email": "ada@new.example"})
        for cid in ("c-1001", "c-1002", "c-1003")
    ]
    for plan in plans:
        _approve_quietly(plan, reviewer, monkeypatch)
        execute_plan_task.apply_async((str(plan.id),), queue=private.queue)
    # The first write is held by the upstream; the others wait in the queue.
    eventually(lambda: upstream.writes(), timeout=30, what="the first write reaching the upstream")
    late = make_plan(input={"contact_id": "c-1001", "email": "late@new.example"})
    newest = late.events.order_by("-id").values_list("id", flat=True).first()

    def covered() -> bool:
        last = AuditCheckpoint.objects.order_by("-tree_size").first()
        return last is not None and last.last_event_id >= newest

    eventually(covered, timeout=8, interval=0.1, what="the new event sealed")
    # Still busy: nothing has been answered yet, so no queued seal could have run.
    assert all(
        s in (PlanStatus.APPROVED, PlanStatus.EXECUTING)
        for s in Plan.objects.filter(pk__in=[p.pk for p in plans]).values_list("status", flat=True)
    )
