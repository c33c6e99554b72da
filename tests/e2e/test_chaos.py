"""Chaos: approved plans executed while workers are SIGKILLed at random moments and
restarted, and the Redis broker is restarted once.

Design. The scenario lives in ``tests/e2e/chaos.py``; read its docstring for the details.
The suite runs 100 plans; ``make chaos`` runs 300 through this same test and writes the
figures to docs/reliability.md (``CHAOS_PLANS``, ``CHAOS_FIGURES``). In short:

* a private ``redis-server`` on a free loopback port (nothing persisted, so its restart
  loses every queued and unacknowledged message) and two private workers (concurrency 2)
  pointed at it; the first embeds the beat, so the sweeper runs every second exactly as in
  production (requeue after 8 s, lease 5 s). The system Redis is never touched and only
  process groups started by the scenario are signalled;
* approvals are recorded in this process in batches; their on-commit wake-ups are
  published to the private Redis (``actions.lib.dispatch.publish`` is swapped for the
  duration and restored); a publish that fails while Redis is down is left to the sweeper;
* the demo upstream (in this process) answers a share of writes 0.2 s late and a few with
  a 503 after applying; a few contacts are changed upstream after the preview;
* once, right after a plan goes ``unknown``, every consuming worker is killed before its
  reconciliation ran; the sweeper must bring that reconciliation back by itself;
* when nothing is approved, executing or unknown any more the workers stop; nothing is
  reconciled by hand.

The run is bounded and stops by itself: it ends as soon as every plan has settled, and at
the latest 120 s after the first approval (``ChaosConfig.deadline_seconds``). Most of its
time goes to previewing the plans and to booting Celery workers after each kill; both
grow quickly on a loaded machine. The checks below are made here, from the database and
the upstream, independently of the figures written for the page. ``CHAOS_SEED=<n>``
replays a run's timeline.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest

from actions.lib.checkpoints import audit_seal, audit_verify
from actions.lib.models import AuditCheckpoint
from approvals.models import Approval, Attempt, Plan, PlanStatus
from tests.e2e.chaos import ChaosConfig, figures, run_chaos
from tests.e2e.support import header

pytestmark = pytest.mark.e2e


@pytest.fixture
def chaos_env(live_env, worker_keys, audit_keys):
    # Every worker may seal (the lease picks one); a sealer killed with its worker holds
    # the lease until it runs out, so keep that short.
    return {
        **live_env,
        "COUNTERSIGN_WORKER_KEY_FILE": worker_keys["private_file"],
        "COUNTERSIGN_AUDIT_KEY_FILE": audit_keys["private_file"],
        "COUNTERSIGN_SEAL_LEASE_SECONDS": "3",
    }


def chaos_config(seed: int | None) -> ChaosConfig:
    """The suite's run is small; ``make chaos`` asks for the full one (CHAOS_PLANS=300)."""
    plans = int(os.environ.get("CHAOS_PLANS", "100"))
    if plans >= 300:
        return ChaosConfig(plans=plans, seed=seed)
    return ChaosConfig(
        plans=plans,
        reminders=plans // 5,
        stale=plans // 15,
        kills=(2, 3),
        approve_seconds=6.0,
        chaos_seconds=10.0,
        seed=seed,
    )


def test_chaos_writes_at_most_once_settles_every_plan_and_loses_no_approval(
    transactional_db, catalog, agent, reviewer, upstream, chaos_env, executor_key, sealer_key
):
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed")
    seed = int(os.environ["CHAOS_SEED"]) if os.environ.get("CHAOS_SEED") else None
    # Not under pytest's basetemp, which other runs prune: kept if the test fails.
    logs = Path(tempfile.mkdtemp(prefix="countersign-chaos-"))

    config = chaos_config(seed)
    result = run_chaos(
        upstream=upstream,
        agent=agent,
        reviewer=reviewer,
        env=chaos_env,
        log_dir=logs,
        config=config,
    )
    ids = [c.plan_id for c in result.cases]
    replay = f"(replay with CHAOS_SEED={result.seed}; logs in {logs})"

    # The chaos really happened, and the run ended by itself before its deadline.
    assert len(ids) == config.plans
    assert config.kills[0] <= len(result.kills) <= config.kills[1], result.kills
    assert len(result.redis_restarts) == 1
    # Workers consuming when Redis went away came back to it by themselves, or (a
    # library crash during the reconnect) were restarted as a supervisor would: at most
    # one such crash, and every plan must still settle exactly as below.
    assert result.redis_survivors, "no worker was consuming at the restart"
    assert all(result.reconnected_after_redis_restart.values()), (
        f"{result.reconnected_after_redis_restart} {replay}"
    )
    assert len(result.crashes) <= 1, f"{result.crashes} {replay}"
    progress = "\n".join(f"{t:5.1f}s {counts}" for t, counts in result.progress)
    assert not result.timed_out, (
        f"plans still in flight at the deadline {replay}\n{progress}\n{result.worker_logs()}"
    )

    plans = {str(p.id): p for p in Plan.objects.filter(id__in=ids)}
    attempts = {str(a.plan_id): a for a in Attempt.objects.filter(plan_id__in=ids)}
    log = upstream.requests_log()[result.log_start :]
    state = upstream.state()
    reminders = Counter(r["message"] for r in state["reminders"].values())

    # Every write the upstream received belongs to exactly one plan.
    writes: dict[str, list[dict]] = {plan_id: [] for plan_id in ids}
    by_path = {c.path: c.plan_id for c in result.cases if c.action == "update_contact_email"}
    by_message = {c.marker: c.plan_id for c in result.cases if c.action == "send_reminder"}
    for entry in log:
        if entry["method"] in ("GET", "HEAD"):
            continue
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        owner = by_path.get(entry["path"]) or by_message.get(body.get("message"))
        assert owner is not None, f"a write no plan asked for: {entry} {replay}"
        writes[owner].append(entry)

    for case in result.cases:
        plan, attempt, sent = plans[case.plan_id], attempts.get(case.plan_id), writes[case.plan_id]
        where = f"plan {case.plan_id} ({case.action} {case.path}) {replay}"

        # Every plan ends terminal; reconciliation settled those left unknown.
        assert plan.status in PlanStatus.terminal(), f"{plan.status}: {where}\n{result.unsettled}"
        assert plan.status != "refused", f"{plan.outcome_detail}: {where}"

        # At most one effect per plan.
        if case.action == "update_contact_email":
            # An unkeyed conditional write is never re-sent: one request at most.
            assert len(sent) <= 1, f"{len(sent)} writes: {where}"
            effect = int(state["contacts"][case.path.rsplit("/", 1)[1]]["email"] == case.marker)
            assert effect <= len(sent), f"changed without a request: {where}"
        else:
            # A keyed call may be repeated, always with the attempt's key; one effect.
            keys = {header(e, "Idempotency-Key") for e in sent}
            assert not sent or keys == {attempt.idempotency_key}, f"keys {keys}: {where}"
            effect = reminders[case.marker]
        assert effect <= 1, f"{effect} effects: {where}"

        # The outcome is honest: completed exactly when the change is upstream.
        assert (plan.status == "completed") == (effect == 1), f"{plan.status}, {effect}: {where}"
        # Changed upstream after the preview: stale, and nothing was written.
        if case.changed_upstream:
            assert plan.status == "stale" and sent == [], f"{plan.status}: {where}"

        # Zero approvals lost: the approval was spent by a claim that left a record.
        assert attempt is not None, f"approved but never claimed: {where}"
        assert attempt.state in (
            Attempt.State.ANSWERED,
            Attempt.State.NOT_SENT,
            Attempt.State.LOST,
        ), f"attempt {attempt.state}: {where}"
        assert plan.outcome_detail, f"no reason recorded: {where}"

    approvals = Approval.objects.filter(plan_id__in=ids, decision=Approval.Decision.APPROVE)
    assert approvals.count() == len(ids)
    assert not approvals.filter(used_at__isnull=True).exists()
    # The reconciliation killed with its workers was brought back by the sweeper alone.
    assert len(result.reconcile_kills) == 1, f"{result.reconcile_kills} {replay}"
    _, lost_look, _ = result.reconcile_kills[0]
    assert plans[lost_look].status in PlanStatus.terminal(), f"{plans[lost_look].status} {replay}"
    assert sum(1 for c in result.cases if c.changed_upstream) == config.stale
    # The workers sealed the audit trail while they were being killed; what their last
    # sealer left (its lease may still be running) is taken up again, to the end — or
    # there is nothing left, the workers having sealed it all before they stopped: no
    # fork, no gap the sealer could not close, every event verified.
    assert AuditCheckpoint.objects.exists(), f"nothing sealed during the run {replay}"
    deadline = time.monotonic() + 30
    while not (sealed := audit_seal())["leased"] and not sealed["idle"]:
        assert time.monotonic() < deadline, f"the lease was never free: {sealed} {replay}"
        time.sleep(0.5)
    assert not sealed["waiting"], f"{sealed} {replay}"
    report = audit_verify()
    assert report.ok, f"{[str(p) for p in report.problems][:10]} {replay}"
    assert report.unsealed == 0 and report.sealed == report.events > 0, f"{report} {replay}"
    if os.environ.get("CHAOS_FIGURES"):
        # make chaos: bench/reliability.py turns these into docs/reliability.md.
        Path(os.environ["CHAOS_FIGURES"]).write_text(
            json.dumps(
                {
                    "figures": {
                        **figures(result, upstream),
                        "audit": {
                            "events": report.events,
                            "checkpoints": report.checkpoints,
                            "unsealed": report.unsealed,
                            "problems": len(report.problems),
                        },
                    },
                    "config": asdict(config),
                },
                indent=2,
                default=str,
            )
        )
    shutil.rmtree(logs, ignore_errors=True)
