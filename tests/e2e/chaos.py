"""Chaos run: approved plans executed while workers are SIGKILLed and Redis restarts.

The proof that execution stays trustworthy when processes die at random: at most one
upstream effect per plan, every plan ends in a terminal state (an ``unknown``
outcome is settled by reconciliation, with no help from outside), and no approval is
lost.

The scenario, the same in ``tests/e2e/test_chaos.py`` and in ``make chaos``:

* **Everything private and on loopback.** A Redis of our own (``redis-server --port
  <free> --save "" --appendonly no``, so a restart loses every queued and unacknowledged
  message, like a broker crash without persistence), the demo upstream in this process,
  and two Celery workers (concurrency 2) pointed at that Redis. Only process groups
  started here are ever signalled.
* **Recovery exactly as in production.** Worker 0 embeds the beat (``-B``) that runs the
  sweeper every second; requeue after 8 s, execution lease 5 s. Nothing in the run
  repairs anything by hand until the very end: lost messages are republished by the
  sweeper, executions whose worker died are settled by it, ``unknown`` outcomes are
  reconciled by the workers' reconcile task.
* **Wake-ups are published for real** from this process (``approval_record`` →
  ``on_commit`` → ``actions.lib.dispatch.publish``), through a connection to the private
  Redis: ``publish`` is swapped for one that names that connection, and restored after.
  A publish that fails while Redis is down is logged and left to the sweeper, as the
  product's own ``publish`` does.
* **The plans**: contacts are created upstream first so each update targets its own
  contact; a few contacts are changed upstream after the preview (those plans must end
  ``stale`` with nothing written); a share of the plans are ``send_reminder`` calls
  (``invoke``, the upstream honours ``Idempotency-Key``). Approvals are recorded in
  batches over the first seconds, so kills land while work keeps arriving.
* **The chaos**, from a seeded RNG (the seed is printed and recorded): 3–6 SIGKILLs of a
  worker's whole process group (pool children and beat included), due at random moments;
  a kill waits for its victim to be consuming (killing a worker still booting proves
  little) and, for up to 5 s, for a plan to be executing; each victim is restarted after
  a short pause. One Redis restart, when a worker is consuming, and no kill after it
  until the survivors have reconnected by themselves (or ``REDIS_RECONNECT`` s). Slow
  upstream writes (0.2 s) widen the windows between "sending" and "answered"; a few
  503s come *after* the upstream applied the change (answers that say nothing about
  the outcome).
* **A reconciliation lost with its worker**: right after the first plan goes
  ``unknown`` (a 503 after applying), every consuming worker is SIGKILLed before the
  reconciliation (due 2 s later) has run, so the message that carried it is held
  unacknowledged by a dead worker (with Redis, for the visibility timeout: an hour).
  The sweeper must find the look overdue in the database and publish it again.
* **The end**: when nothing is approved, executing or unknown any more (or at the
  deadline), the workers are stopped. Nothing is reconciled by hand: a plan still not
  terminal then is a failure, reported as such.

Upstream writes are attributed to plans by their content: a contact update is the only
write to its contact's path; a reminder carries a message unique to its plan, and its
``Idempotency-Key`` must be the attempt's key. A keyed request may reach the upstream
more than once (retries and reconciliation repeat it with the same key); its *effect*
is counted from the upstream's state (reminders created with that message).

The suite runs a small version of it (``tests/e2e/test_chaos.py``); ``make chaos`` runs
the full one through the same test (``CHAOS_PLANS=300``) and has ``bench/reliability.py``
write its figures to ``docs/reliability.md``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import re
import signal
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from approvals.models import PlanStatus
from demo.processes import Process, free_port, start_worker, wait_ready

log = logging.getLogger("chaos")

QUEUE = "countersign-chaos"
CONTACT_BASE = 5000
# After the Redis restart, no kill until the survivors reconnect by themselves, at most this
# long (kombu retries after 2, then 4, 6, 8 s...).
REDIS_RECONNECT = 15.0


@dataclass
class ChaosConfig:
    plans: int = 300
    reminders: int = 60  # of the plans, this many are send_reminder calls
    stale: int = 20  # contacts changed upstream after the preview
    workers: int = 2
    concurrency: int = 2
    kills: tuple[int, int] = (3, 6)
    approve_seconds: float = 12.0  # approvals arrive over this long
    chaos_seconds: float = 20.0  # kills are due in [1, this] (each waits for a live worker)
    deadline_seconds: float = 120.0  # from the first approval to giving up
    delay: float = 0.2  # slow upstream writes
    applied_503s: int = 4
    # Kills of every consuming worker right after a plan went unknown, before its
    # reconciliation ran.
    reconcile_kills: int = 1
    seed: int | None = None
    sweep_seconds: float = 1.0
    requeue_after_seconds: float = 8.0
    lease_seconds: float = 5.0


@dataclass
class Case:
    """One plan and how to recognise its writes upstream."""

    plan_id: str
    action: str
    path: str  # where its write goes
    marker: str  # the email (contact) or message (reminder) unique to this plan
    fingerprint: str  # what the reviewer saw
    changed_upstream: bool = False  # its contact was changed after the preview


@dataclass
class ChaosResult:
    config: ChaosConfig
    seed: int
    cases: list[Case]
    log_start: int  # upstream request-log entries before this index are setup
    kills: list[tuple[float, str]] = field(default_factory=list)
    # Kills of every consuming worker right after a plan went unknown: (when, plan, names).
    reconcile_kills: list[tuple[float, str, list[str]]] = field(default_factory=list)
    redis_restarts: list[float] = field(default_factory=list)
    statuses_at_end_of_run: dict[str, str] = field(default_factory=dict)
    final_statuses: dict[str, str] = field(default_factory=dict)
    publish_failures: int = 0
    # Worker processes alive when Redis restarted, and whether each reconnected.
    redis_survivors: list[str] = field(default_factory=list)
    reconnected_after_redis_restart: dict[str, bool] = field(default_factory=dict)
    # Workers that exited on their own (not one of the kills), restarted as a supervisor
    # would (systemd Restart=always, docs/deploy): (when, name). Seen: kombu's Redis
    # transport failing its reconnect with an AttributeError, a library bug.
    crashes: list[tuple[float, str]] = field(default_factory=list)
    duplicate_wakeups: int = 0  # execution tasks that found their plan already taken
    timings: dict[str, float] = field(default_factory=dict)
    log_dir: Path | None = None
    timed_out: bool = False
    unsettled: dict[str, dict[str, Any]] = field(default_factory=dict)  # not terminal at the end
    # (seconds since the first approval, how many plans in each state), about every second
    progress: list[tuple[float, dict[str, int]]] = field(default_factory=list)

    def worker_logs(self, tail: int = 4000) -> str:
        """The end of every worker log, for failure messages."""
        if self.log_dir is None:
            return ""
        parts = []
        for path in sorted(self.log_dir.glob("worker-*.log")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)


# --- processes ----------------------------------------------------------------------------


class PrivateRedis:
    """A throwaway Redis on a free loopback port, nothing persisted."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_dir = log_dir
        self.starts = 0
        self.proc: Process | None = None

    def start(self) -> None:
        self.starts += 1
        args = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        self.proc = Process(f"redis-{self.starts}", args, dict(os.environ), self.log_dir)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not self.proc.alive():
                raise RuntimeError(f"redis-server exited:\n{self.proc.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start:\n{self.proc.log()}")

    def crash(self) -> None:
        """SIGKILL: everything queued or unacknowledged is gone."""
        if self.proc is not None:
            self.proc.kill(signal.SIGKILL)
            self.proc.proc.wait(5)
            self.proc.stop()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


class Workers:
    """Worker slots; slot 0 also runs the beat (the sweeper), like one `celery beat`."""

    def __init__(self, env: dict[str, str], log_dir: Path, count: int, concurrency: int):
        self.env = env
        self.log_dir = log_dir
        self.concurrency = concurrency
        self.procs: list[Process | None] = [None] * count
        self.is_ready = [False] * count
        self.starts = [0] * count

    def start(self, slot: int) -> Process:
        """Start without waiting: booting takes seconds and the run goes on meanwhile."""
        self.starts[slot] += 1
        name = f"worker-{slot}-{self.starts[slot]}"
        beat = self.log_dir / f"beat-{slot}-{self.starts[slot]}" if slot == 0 else None
        proc = start_worker(
            self.env,
            self.log_dir,
            name=name,
            concurrency=self.concurrency,
            beat_schedule=beat,
            wait=False,
        )
        self.procs[slot], self.is_ready[slot] = proc, False
        return proc

    def ready(self, slot: int) -> bool:
        """Consuming from the broker (its log says so)."""
        proc = self.procs[slot]
        if proc is None or not proc.alive():
            return False
        if not self.is_ready[slot]:
            self.is_ready[slot] = " ready." in proc.log()
        return self.is_ready[slot]

    def kill(self, slot: int) -> str:
        """SIGKILL the worker's whole process group: main process, pool, beat."""
        proc = self.procs[slot]
        assert proc is not None
        proc.kill(signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.proc.wait(5)
        proc.stop()
        self.procs[slot], self.is_ready[slot] = None, False
        return proc.name

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc is not None:
                proc.stop(timeout=15)


@contextlib.contextmanager
def publishing_to(broker_url: str, queue: str, counter: Counter):
    """Publish this process's wake-ups to the private broker, then restore ``publish``."""
    from actions.lib import dispatch
    from config.celery import app

    connection = app.connection_for_write(broker_url)
    original = dispatch.publish

    def publish(name: str, *args, countdown: float | None = None) -> bool:
        try:
            app.send_task(
                name,
                args=[str(a) for a in args],
                countdown=countdown,
                connection=connection,
                queue=queue,
                retry_policy={"max_retries": 1, "interval_start": 0.1},
            )
        except Exception:  # noqa: BLE001 - as the product's publish: the sweeper republishes
            counter["publish_failures"] += 1
            log.info("could not publish %s %s; the sweeper will", name, args)
            return False
        return True

    dispatch.publish = publish
    try:
        yield
    finally:
        dispatch.publish = original
        connection.release()


# --- the scenario -----------------------------------------------------------------------------


def prepare(*, upstream, agent, config: ChaosConfig, rng: random.Random) -> list[Case]:
    """Create the contacts upstream, then preview every plan (nothing approved yet)."""
    import httpx

    from approvals.services import plan_submit

    contacts = config.plans - config.reminders
    with httpx.Client(
        base_url=upstream.url,
        headers={"Authorization": f"Bearer {upstream.write_token}", "If-None-Match": "*"},
        timeout=5,
    ) as http:
        for i in range(contacts):
            cid = f"c-{CONTACT_BASE + i}"
            response = http.put(
                f"/contacts/{cid}",
                json={"name": f"Chaos {i}", "email": f"old{i}@chaos.test", "workspace": "ws-blue"},
            )
            response.raise_for_status()

    cases: list[Case] = []
    for i in range(contacts):
        cid = f"c-{CONTACT_BASE + i}"
        email = f"new{i}@chaos.test"
        plan, _ = plan_submit(
            agent=agent,
            action_name="update_contact_email",
            input={"contact_id": cid, "email": email},
            reason="chaos run",
        )
        cases.append(
            Case(str(plan.id), "update_contact_email", f"/contacts/{cid}", email, plan.fingerprint)
        )
    for i in range(config.reminders):
        message = f"chaos reminder {i} {rng.getrandbits(32):08x}"
        plan, _ = plan_submit(
            agent=agent,
            action_name="send_reminder",
            input={
                "customer_id": f"cus-{100 + i}",
                "channel": "email",
                "send_at": "2030-01-01T09:00:00Z",
                "message": message,
            },
            reason="chaos run",
        )
        cases.append(Case(str(plan.id), "send_reminder", "/reminders", message, plan.fingerprint))
    # Someone else edits a few contacts after the preview: those plans must end stale.
    for case in rng.sample(cases[:contacts], config.stale):
        upstream.mutate(case.path, {"phone": "+1 555 0100"})
        case.changed_upstream = True
    rng.shuffle(cases)
    return cases


def _statuses(plan_ids: list[str]) -> dict[str, str]:
    from approvals.models import Plan

    return {
        str(pk): status
        for pk, status in Plan.objects.filter(id__in=plan_ids).values_list("id", "status")
    }


def run_chaos(
    *,
    upstream,
    agent,
    reviewer,
    env: dict[str, str],
    log_dir: Path,
    config: ChaosConfig | None = None,
) -> ChaosResult:
    """Run the whole scenario; returns what happened. ``env`` is the workers' environment
    (database, keys, private key file); the broker and timings are set here.

    Nothing is settled here by hand: every plan must end terminal by the workers and
    the sweeper alone."""
    config = config or ChaosConfig()
    seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    began = time.monotonic()

    redis = PrivateRedis(log_dir)
    redis.start()
    worker_env = {
        **env,
        "CELERY_BROKER_URL": redis.url,
        "COUNTERSIGN_QUEUE": QUEUE,
        "COUNTERSIGN_SWEEP_SECONDS": str(config.sweep_seconds),
        "COUNTERSIGN_REQUEUE_AFTER_SECONDS": str(config.requeue_after_seconds),
        "COUNTERSIGN_EXECUTION_LEASE_SECONDS": str(config.lease_seconds),
    }
    workers = Workers(worker_env, log_dir, config.workers, config.concurrency)
    result: ChaosResult | None = None
    try:
        # The workers boot while the plans are previewed: nothing is approved yet.
        started = [workers.start(slot) for slot in range(config.workers)]
        cases = prepare(upstream=upstream, agent=agent, config=config, rng=rng)
        result = ChaosResult(
            config=config,
            seed=seed,
            cases=cases,
            log_start=len(upstream.requests_log()),
            log_dir=log_dir,
        )
        for proc in started:
            wait_ready(proc, timeout=60)
        result.timings["prepare"] = time.monotonic() - began
        _chaos(result, upstream=upstream, reviewer=reviewer, redis=redis, workers=workers, rng=rng)
    finally:
        workers.stop_all()
        redis.stop()
        upstream.clear_faults()
    plan_ids = [c.plan_id for c in result.cases]
    result.statuses_at_end_of_run = _statuses(plan_ids)
    result.duplicate_wakeups = sum(
        len(_SKIPPED.findall(path.read_text(errors="replace")))
        for path in log_dir.glob("worker-*.log")
    )

    result.final_statuses = _statuses(plan_ids)
    result.unsettled = _unsettled(result)
    result.timings["total"] = time.monotonic() - began
    return result


def _unsettled(result: ChaosResult) -> dict[str, dict[str, Any]]:
    """What is known about plans that did not end terminal, for people and for failures."""
    from approvals.models import Attempt

    cases = {c.plan_id: c for c in result.cases}
    found = {}
    for plan_id, status in result.final_statuses.items():
        if status in PlanStatus.terminal():
            continue
        attempt = Attempt.objects.filter(plan_id=plan_id).first()
        found[plan_id] = {
            "status": status,
            "action": cases[plan_id].action,
            "path": cases[plan_id].path,
            "attempt": None
            if attempt is None
            else {
                "state": attempt.state,
                "tries": attempt.tries,
                "sends": getattr(attempt, "sends", None),
                "sent_at": attempt.sent_at and attempt.sent_at.isoformat(),
                "error": attempt.error,
                "reconciliation": getattr(attempt, "reconciliation", None),
            },
        }
    return found


_SKIPPED = re.compile(r"Task executors\.execute_plan\[[0-9a-f-]+\] succeeded in \S+ 'skipped:")


def _chaos(result: ChaosResult, *, upstream, reviewer, redis, workers: Workers, rng) -> None:
    """Approve in batches while killing workers and restarting Redis; return when every
    plan has settled (or at the deadline)."""
    from approvals.services import approval_record

    config = result.config
    cases = result.cases
    plan_ids = [c.plan_id for c in cases]
    # The timeline, in seconds from the first approval. A kill, when due, waits until a
    # worker is consuming (it is the victim: killing one still booting proves little) and
    # work is in flight; the Redis restart waits for a consuming worker too, and no kill
    # follows it until the survivors have reconnected by themselves (at most
    # REDIS_RECONNECT seconds; one that has not by then is recorded as such).
    kills = sorted(
        rng.uniform(1.0, config.chaos_seconds) for _ in range(rng.randint(*config.kills))
    )
    redis_at: float | None = rng.uniform(3.0, config.approve_seconds)
    redis_back_at: float | None = None
    calm_until = 0.0
    reconnecting: dict[str, int] = {}  # survivor -> its "Connected to redis" lines so far
    applied_503_at = sorted(
        rng.uniform(0.5, config.approve_seconds) for _ in range(config.applied_503s)
    )
    restarts: list[tuple[float, int]] = []  # (when, slot)
    batches = max(1, math.ceil(config.approve_seconds / 0.25))
    per_batch = math.ceil(len(cases) / batches)
    to_approve = list(cases)
    next_batch = next_slow = next_sample = 0.0
    reconcile_fault_armed = False
    counter: Counter = Counter()

    t0 = time.monotonic()
    with publishing_to(redis.url, QUEUE, counter):
        while True:
            now = time.monotonic() - t0
            if to_approve and now >= next_batch:
                batch, to_approve = to_approve[:per_batch], to_approve[per_batch:]
                for case in batch:
                    approval_record(
                        plan_id=case.plan_id,
                        reviewer=reviewer,
                        decision="approve",
                        fingerprint_seen=case.fingerprint,
                    )
                next_batch += 0.25
            if now >= next_slow and (kills or restarts or redis_at or redis_back_at):
                # Slow answers keep requests in flight, so kills land between "sending"
                # and "answered".
                upstream.add_fault(
                    method="PATCH", path_prefix="/contacts/", times=1, delay=config.delay
                )
                upstream.add_fault(
                    method="POST", path_prefix="/reminders", times=1, delay=config.delay
                )
                next_slow += 0.5
            if applied_503_at and now >= applied_503_at[0]:
                applied_503_at.pop(0)
                # Writes only: a 503 on the re-read would merely defer the plan.
                method, path = rng.choice([("PATCH", "/contacts/"), ("POST", "/reminders")])
                upstream.add_fault(method=method, path_prefix=path, status=503, apply=True)
            for slot, proc in enumerate(workers.procs):
                if proc is not None and not proc.alive():
                    # Exited on its own: our kills clear the slot. Restart it, as the
                    # deployment's supervisor would, and say so in the figures.
                    result.crashes.append((round(now, 2), proc.name))
                    reconnecting.pop(proc.name, None)
                    with contextlib.suppress(Exception):
                        proc.kill(signal.SIGKILL)  # its pool and beat, if left behind
                    proc.stop()
                    workers.start(slot)
            ready = [slot for slot in range(len(workers.procs)) if workers.ready(slot)]
            if (
                kills
                and now >= max(kills[0], calm_until)
                and ready
                # Best while a plan executes; a kill never waits more than 5 s for one,
                # and once every plan is approved and settled it lands on an idle worker
                # (a kill still due then would otherwise hold the run to its deadline).
                and (
                    _executing(plan_ids)
                    or now >= kills[0] + 5
                    and (_in_flight(plan_ids) or not to_approve)
                )
            ):
                kills.pop(0)
                victim = rng.choice(ready)
                ready.remove(victim)
                name = workers.kill(victim)
                result.kills.append((round(now, 2), name))
                restarts.append((now + rng.uniform(0.3, 1.5), int(name.split("-")[1])))
                restarts.sort()
            if (
                len(result.reconcile_kills) < config.reconcile_kills
                and ready
                # Not while Redis is away or its survivors reconnect: that is watched.
                and redis_back_at is None
                and not reconnecting
                and now >= calm_until
            ):
                if not reconcile_fault_armed:
                    # The next contact update applies and answers 503: its outcome is
                    # unknown, and its reconciliation is the one to lose.
                    upstream.add_fault(
                        method="PATCH", path_prefix="/contacts/", status=503, apply=True
                    )
                    reconcile_fault_armed = True
                waiting = _reconcile_not_yet_run(plan_ids)
                if waiting:
                    # Whoever holds the reconciliation's message dies with it.
                    names = [workers.kill(slot) for slot in ready]
                    result.reconcile_kills.append((round(now, 2), waiting, names))
                    for name in names:
                        restarts.append((now + rng.uniform(0.3, 1.5), int(name.split("-")[1])))
                    restarts.sort()
                    ready = []
            if restarts and now >= restarts[0][0]:
                _, slot = restarts.pop(0)
                workers.start(slot)
            if redis_at is not None and now >= redis_at and ready:
                # Down for a moment while approvals go on: their wake-ups fail to publish.
                reconnecting = {
                    workers.procs[slot].name: _connects(workers, slot) for slot in ready
                }
                result.redis_survivors = list(reconnecting)
                redis.crash()
                result.redis_restarts.append(round(now, 2))
                redis_at, redis_back_at = None, now + rng.uniform(0.5, 1.5)
                calm_until = redis_back_at + REDIS_RECONNECT
            if redis_back_at is not None and now >= redis_back_at:
                redis.start()
                redis_back_at = None
            if reconnecting:
                for slot, proc in enumerate(workers.procs):
                    if proc is not None and proc.name in reconnecting:
                        if _connects(workers, slot) > reconnecting[proc.name]:
                            result.reconnected_after_redis_restart[proc.name] = True
                            del reconnecting[proc.name]
                if not reconnecting:
                    calm_until = 0.0
                elif now >= calm_until:
                    for name in reconnecting:
                        result.reconnected_after_redis_restart[name] = False
                    reconnecting = {}

            chaos_over = not (to_approve or kills or restarts or redis_at or redis_back_at)
            if now >= next_sample:
                counts = dict(Counter(_statuses(plan_ids).values()))
                result.progress.append((round(now, 1), counts))
                next_sample = now + 1.0
            if chaos_over:
                statuses = _statuses(plan_ids).values()
                busy = sum(1 for s in statuses if s in PlanStatus.in_flight())
                unknown = sum(1 for s in statuses if s == "unknown")
                if busy == 0 and unknown == 0:
                    break
            if now > config.deadline_seconds:
                result.timed_out = True
                break
            time.sleep(0.1 if not chaos_over else 0.25)
    result.timings["run"] = time.monotonic() - t0
    result.publish_failures = counter["publish_failures"]


def _reconcile_not_yet_run(plan_ids: list[str]) -> str | None:
    """A plan that went unknown whose first reconciliation is still at least half a
    second away (so killing the workers now loses its message), or None."""
    from datetime import timedelta

    from django.utils import timezone

    from approvals.models import Plan

    plan = (
        Plan.objects.filter(
            id__in=plan_ids,
            status="unknown",
            attempt__reconcile_checks=0,
            next_check_at__gt=timezone.now() + timedelta(seconds=0.5),
        )
        .values_list("id", flat=True)
        .first()
    )
    return str(plan) if plan else None


def _connects(workers: Workers, slot: int) -> int:
    return workers.procs[slot].log().count("Connected to redis")


def _in_flight(plan_ids: list[str]) -> bool:
    from approvals.models import Plan

    return Plan.objects.filter(id__in=plan_ids, status__in=["approved", "executing"]).exists()


def _executing(plan_ids: list[str]) -> bool:
    from approvals.models import Plan

    return Plan.objects.filter(id__in=plan_ids, status="executing").exists()


# --- what happened ----------------------------------------------------------------------


def upstream_writes(result: ChaosResult, upstream) -> dict[str, list[dict[str, Any]]]:
    """Write requests the upstream received during the run, per plan."""
    by_marker = {c.marker: c.plan_id for c in result.cases}
    by_path = {c.path: c.plan_id for c in result.cases if c.action == "update_contact_email"}
    writes: dict[str, list[dict[str, Any]]] = {c.plan_id: [] for c in result.cases}
    for entry in upstream.requests_log()[result.log_start :]:
        if entry["method"] in ("GET", "HEAD"):
            continue
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        plan_id = by_path.get(entry["path"]) or by_marker.get(body.get("message", ""))
        writes.setdefault(plan_id or "unattributed", []).append(entry)
    return writes


def upstream_effects(result: ChaosResult, upstream) -> dict[str, int]:
    """Changes visible in the upstream's state, per plan."""
    state = upstream.state()
    effects = {c.plan_id: 0 for c in result.cases}
    messages = Counter(r["message"] for r in state["reminders"].values())
    for case in result.cases:
        if case.action == "send_reminder":
            effects[case.plan_id] = messages[case.marker]
        else:
            contact = state["contacts"][case.path.rsplit("/", 1)[1]]
            effects[case.plan_id] = int(contact["email"] == case.marker)
    return effects


def figures(result: ChaosResult, upstream) -> dict[str, Any]:
    from actions.lib.models import AuditEvent

    writes = upstream_writes(result, upstream)
    effects = upstream_effects(result, upstream)
    plan_ids = [c.plan_id for c in result.cases]
    events = Counter(AuditEvent.objects.filter(plan_id__in=plan_ids).values_list("kind", flat=True))
    unknown = AuditEvent.objects.filter(plan_id__in=plan_ids, kind="execution.unknown")
    went_unknown = unknown.values("plan_id").distinct().count()
    unknown_after_kill = unknown.filter(actor="system:sweeper").count()
    keyed = [c.plan_id for c in result.cases if c.action == "send_reminder"]
    return {
        "seed": result.seed,
        "plans": len(result.cases),
        "contact_updates": len(result.cases) - len(keyed),
        "reminders": len(keyed),
        "changed_upstream": sum(c.changed_upstream for c in result.cases),
        "workers": result.config.workers,
        "concurrency": result.config.concurrency,
        "kills": len(result.kills),
        "kill_times": result.kills,
        "redis_restarts": len(result.redis_restarts),
        "redis_restart_times": result.redis_restarts,
        "publish_failures": result.publish_failures,
        "duplicate_wakeups": result.duplicate_wakeups,
        "reconnected_after_redis_restart": result.reconnected_after_redis_restart,
        "crashes": result.crashes,
        "at_end_of_run": dict(Counter(result.statuses_at_end_of_run.values())),
        "final": dict(Counter(result.final_statuses.values())),
        "went_unknown": went_unknown,
        "unknown_after_kill": unknown_after_kill,
        "settled_by_reconcile_task": AuditEvent.objects.filter(
            plan_id__in=plan_ids, kind="reconcile.settled"
        ).count(),
        "reconcile_kills": result.reconcile_kills,
        "not_terminal": sum(
            1 for s in result.final_statuses.values() if s not in PlanStatus.terminal()
        ),
        "recovered_by_sweeper": events["execution.recovered"],
        "max_write_requests_per_plan": max((len(writes[p]) for p in plan_ids), default=0),
        "max_write_requests_unkeyed": max(
            (len(writes[p]) for p in plan_ids if p not in keyed), default=0
        ),
        "max_effects_per_plan": max(effects.values(), default=0),
        "keyed_resends": sum(max(0, len(writes[p]) - 1) for p in keyed),
        "unattributed_writes": len(writes.get("unattributed", [])),
        "timed_out": result.timed_out,
        "unsettled": result.unsettled,
        "seconds": {k: round(v, 1) for k, v in result.timings.items()},
    }
