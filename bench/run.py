"""``make bench``: Countersign under load, with real processes, against a baseline
measured in the same run.

What runs (all on 127.0.0.1, all stopped at the end, whatever happens):

* a scratch PostgreSQL database next to ``DATABASE_URL`` (created, migrated, dropped);
* Redis at ``BENCH_REDIS_URL`` (default DB 12 of the local server) with a queue of
  this run's own;
* the demo upstream (``python -m demo.upstream``);
* the web server: ``python -m config.web --workers N`` with ``COUNTERSIGN_BENCH=1``
  (which mounts the baseline endpoint of ``bench/baseline.py``);
* M Celery workers (``--concurrency=1`` each) holding the private key;
* the load generator ``bench/load.py``, a process of its own.

This process plays the admin (catalog, credentials) and the reviewers (approvals go
through ``approvals.services.approval_record``, as the review page does), and reads
``/proc`` and ``pg_stat_activity``. Results go to ``docs/benchmarks/results.json``;
``bench/report.py`` turns them into ``docs/benchmarks.md`` and PNG plots.

Scenarios: B1 submit (with the floor: the upstream's own GET rate and PostgreSQL's
single-row insert rate, measured in the same run; and with 200 decision rules, then 200
policies, loaded beside the demo's: bench/policies.py), B2 decision to effect, B3
executor throughput, B4 history, B5 waiting agents, B6 footprint, B7 decisions per
second, B8 a policy backtest over stored history, B9 a submission previewed through an
MCP server over stdio against a direct MCP client (bench/mcp_upstream.py), CPU the CPU
per plan of each process (bench/cpu.py; with py-spy profiles of the web and worker
processes) (see docs/benchmarks.md). B1 also times the policy engine in this process;
B1, B5 and B7 sample how long audit events wait to be sealed.

``--quick`` is a short run for development; the full run takes about a quarter of an
hour.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import logging
import os
import pstats
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import cpu as cpu_scenario  # noqa: E402
from bench.mcp_upstream import b9_mcp  # noqa: E402
from bench.procs import (  # noqa: E402
    Process,
    Stack,
    base_env,
    database_url,
    drop_database,
    machine_cpu,
    machine_facts,
    read_tree,
    scratch_database,
    start_upstream,
    start_web,
    start_worker,
    wait_ready,
)

log = logging.getLogger("bench")

CONTACT_BASE = 1_000_000  # contacts created upstream for the run: c-1000000, c-1000001 ...


@dataclass
class Sizes:
    b1_seconds: float = 20.0  # per endpoint, split in b1_alternations alternating rounds
    b1_alternations: int = 4
    b1_concurrency: int = 8
    b1_contacts: int = 2500  # one per plan where B1 is slow enough; its plans are reused
    b2_plans: int = 200
    b2_gap: float = 0.1
    b3_plans: int = 400
    b3_workers: tuple[int, ...] = (1, 2, 4)
    b4_repeat: int = 100  # requests per page and history, in as many alternating rounds
    b4_queue: int = 30  # awaiting plans on the queue page
    b5_waiters: int = 1000
    b5_few: int = 20
    b5_idle: float = 4.0
    profile_calls: int = 150
    b7_decisions: int = 1000
    b7_reviewers: int = 16
    floor_seconds: float = 6.0
    policy_eval_plans: int = 3000  # plans timed through policy_evaluate, per policy set
    b8_plans: tuple[int, ...] = (20_000, 100_000)


QUICK = Sizes(
    b1_seconds=6.0,
    b1_alternations=2,
    b1_concurrency=6,
    b1_contacts=400,
    b2_plans=40,
    b3_plans=100,
    b4_repeat=10,
    b5_waiters=200,
    b5_few=10,
    b5_idle=3.0,
    profile_calls=40,
    b7_decisions=200,
    b7_reviewers=8,
    floor_seconds=3.0,
    policy_eval_plans=1000,
    b8_plans=(4_000, 20_000),
)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summary(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50": pct(values, 0.5),
        "p90": pct(values, 0.9),
        "p99": pct(values, 0.99),
        "mean": statistics.fmean(values) if values else float("nan"),
        "max": max(values) if values else float("nan"),
    }


def say(message: str) -> None:
    print(f"[bench {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


# --- the deployment under test ----------------------------------------------------------


def wait_started(proc: Process, workers: int) -> None:
    """Until each of the web server's ``workers`` processes has started."""
    deadline = time.monotonic() + 60
    while proc.log().count("Started server process") < workers:
        if time.monotonic() > deadline or not proc.alive():
            raise RuntimeError(f"web workers did not start:\n{proc.log()[-3000:]}")
        time.sleep(0.2)


class Deployment:
    def __init__(self, stack: Stack, work: Path, args, sizes: Sizes) -> None:
        self.stack, self.work, self.args, self.sizes = stack, work, args, sizes
        self.web: Process | None = None
        self.url = ""
        self.workers: list[Process] = []
        self.upstream_url = ""
        self.read_token = "bench-read-" + uuid.uuid4().hex
        self.write_token = "bench-write-" + uuid.uuid4().hex
        self.next_contact = CONTACT_BASE
        self.db_name = ""
        # Plans awaiting approval, one per contact, left by B1 for later scenarios.
        self.pool: dict[str, dict] = {}

    # processes
    def setup(self) -> None:
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Permission
        from django.core.management import call_command
        from django.db import connection

        from actions.catalog import load_catalog
        from actions.lib.checkpoints import generate_signing_key
        from actions.models import Connector, Credential
        from actions.services import agent_create, credential_set
        from executors.vault import generate_keypair

        call_command("migrate", verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE TABLE bench_baseline (id uuid PRIMARY KEY, input jsonb NOT NULL, "
                "before jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), "
                "fingerprint text, canonical text)"
            )
            cursor.execute("CREATE INDEX ON bench_baseline (fingerprint)")
            cursor.execute(
                "CREATE TABLE bench_skeleton_event (id bigserial PRIMARY KEY, plan uuid NOT "
                "NULL, body jsonb NOT NULL, hash bytea NOT NULL, at timestamptz NOT NULL "
                "DEFAULT now())"
            )
        self.db_name = connection.settings_dict["NAME"]
        private, public = generate_keypair()
        key_file = self.work / "worker.key"
        key_file.write_text(private)
        key_file.chmod(0o600)
        settings.COUNTERSIGN_WORKER_PUBLIC_KEY = public
        audit_private, audit_public = generate_signing_key()
        audit_key = self.work / "audit.key"
        audit_key.write_text(audit_private)
        audit_key.chmod(0o600)
        settings.COUNTERSIGN_AUDIT_PUBLIC_KEY = audit_public

        proc, self.upstream_url = start_upstream(
            dict(os.environ), self.work, self.read_token, self.write_token
        )
        self.stack.add(proc)
        catalog = (ROOT / "demo" / "catalog.yaml").read_text()
        load_catalog(catalog, base_urls={"demo": self.upstream_url}, base_dir=ROOT / "demo")
        connector = Connector.objects.get(name="demo")
        credential_set(
            connector=connector, role=Credential.Role.READ, secret={"token": self.read_token}
        )
        credential_set(
            connector=connector, role=Credential.Role.WRITE, secret={"token": self.write_token}
        )
        self.agent, self.token = agent_create(
            name="bench-agent", action_names=["update_contact_email"], active=True
        )
        user = get_user_model().objects.create_user(username="bench-reviewer", password=None)
        user.user_permissions.add(Permission.objects.get(codename="review_plan"))
        self.reviewer = get_user_model().objects.get(pk=user.pk)

        # As production runs: every process's counters in one directory (multiprocess
        # mode), so B1 pays what a deployment pays for its metrics.
        self.metrics_dir = self.work / "metrics"
        self.metrics_dir.mkdir(exist_ok=True)
        common = {
            "PROMETHEUS_MULTIPROC_DIR": str(self.metrics_dir),
            "REDIS_URL": self.args.redis_url,
            "COUNTERSIGN_RATE_LIMIT": "1000000/minute",
            # Production's default: persistent connections (tests use 0).
            "COUNTERSIGN_DB_CONN_MAX_AGE": "60",
            "COUNTERSIGN_LOG_LEVEL": "WARNING",
            "COUNTERSIGN_NOTIFY_CHANNEL": f"countersign-bench-{os.getpid()}:plans",
        }
        env = base_env(
            database_url(connection.settings_dict),
            self.args.redis_url,
            self.args.queue,
            public,
            common,
        )
        self.web_env = {
            **env,
            # Production's default in the web processes too: each of Django's threads
            # (config/asgi.py) keeps its connection from request to request.
            "COUNTERSIGN_DB_CONN_MAX_AGE": "60",
            "COUNTERSIGN_BENCH": "1",
            "COUNTERSIGN_BENCH_UPSTREAM": self.upstream_url,
            "COUNTERSIGN_BENCH_READ_TOKEN": self.read_token,
        }
        if self.args.db_pool is not None:
            # Otherwise the web processes' own default (config/asgi.py).
            self.web_env["COUNTERSIGN_DB_POOL_SIZE"] = str(self.args.db_pool)
        self.worker_env = {
            **env,
            "COUNTERSIGN_WORKER_KEY_FILE": str(key_file),
            # The workers hold the audit key and seal (one at a time, by lease), as in
            # production.
            "COUNTERSIGN_AUDIT_KEY_FILE": str(audit_key),
            # The first runs beat, but the sweeper stays out of the measurements (no
            # bench scenario loses a message).
            "COUNTERSIGN_SWEEP_SECONDS": "3600",
            "COUNTERSIGN_LOG_LEVEL": "INFO",  # the worker's " ready." line
        }
        self.key_file = key_file
        self.start_web()
        self.start_workers(self.args.workers)

    def start_web(self) -> None:
        n = self.args.web_workers
        proc, self.url = start_web(self.web_env, self.work, name="web", workers=n)
        self.web = self.stack.add(proc)
        wait_started(proc, n)

    def start_workers(self, count: int) -> None:
        for proc in self.workers:
            self.stack.stop(proc)
        self.beats = getattr(self, "beats", 0) + 1
        started = [
            self.stack.add(
                start_worker(
                    self.worker_env,
                    self.work,
                    name=f"worker-{count}-{i}",
                    wait=False,
                    beat_schedule=self.work / f"beat-{self.beats}" if i == 0 else None,
                )
            )
            for i in range(count)
        ]
        for proc in started:
            wait_ready(proc, timeout=90)
        self.workers = started

    # data
    def contacts(self, n: int) -> list[str]:
        """Create ``n`` fresh contacts upstream (each plan that executes needs its own)."""
        import httpx

        ids = [f"c-{self.next_contact + i}" for i in range(n)]
        self.next_contact += n
        with httpx.Client(
            base_url=self.upstream_url,
            headers={"Authorization": f"Bearer {self.write_token}", "If-None-Match": "*"},
            timeout=10,
        ) as http:
            for cid in ids:
                http.put(
                    f"/contacts/{cid}",
                    json={
                        "name": f"Bench {cid}",
                        "email": f"{cid}@old.test",
                        "workspace": "ws-blue",
                    },
                ).raise_for_status()
        return ids

    def load(self, job: dict, *, wait: bool = True):
        job = {"url": self.url, "token": self.token, **job}
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "load.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        proc.stdin.write(json.dumps(job))
        proc.stdin.close()
        return self.finish(proc) if wait else proc

    @staticmethod
    def finish(proc: subprocess.Popen) -> dict:
        out = proc.stdout.read()
        err = proc.stderr.read()
        if proc.wait() != 0:
            raise RuntimeError(f"load generator failed:\n{err[-3000:]}")
        return json.loads(out)

    def prepare(self, n: int, tag: str) -> list[dict]:
        """``n`` plans awaiting approval, one fresh contact each, submitted over HTTP."""
        contacts = self.contacts(n)
        return self.load({"mode": "prepare", "contacts": contacts, "tag": tag, "concurrency": 8})[
            "plans"
        ]

    def take(self, n: int, tag: str) -> list[dict]:
        """``n`` plans awaiting approval on contacts of their own: those B1 left first,
        then fresh ones."""
        taken = []
        while self.pool and len(taken) < n:
            taken.append(self.pool.pop(next(iter(self.pool))))
        if len(taken) < n:
            taken += self.prepare(n - len(taken), tag)
        return taken

    def upstream_log(self) -> list[dict]:
        import httpx

        return httpx.get(self.upstream_url + "/_demo/requests", timeout=60).json()

    def db_connections(self) -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> "
                "pg_backend_pid()",
                [self.db_name],
            )
            return cursor.fetchone()[0]

    def web_reading(self):
        return read_tree(self.web.proc.pid)

    def worker_readings(self) -> list:
        return [read_tree(p.proc.pid) for p in self.workers]


def approve(plan: dict, reviewer, decision: str = "approve") -> float:
    """Record the decision; returns the wall-clock time its transaction committed."""
    from django.db import transaction

    from approvals.services import approval_record

    stamp: list[float] = []
    with transaction.atomic():
        # Registered before the service's own hooks, so it runs first: the commit time,
        # before the wake-up is published.
        transaction.on_commit(lambda: stamp.append(time.time()))
        approval_record(
            plan_id=plan["id"],
            reviewer=reviewer,
            decision=decision,
            fingerprint_seen=plan["fingerprint"],
        )
    return stamp[0]


def _terminal() -> frozenset[str]:
    """Where a plan stops: the product's own list (read once Django is set up)."""
    from approvals.models import PlanStatus

    return PlanStatus.terminal()


def statuses(ids: list[str]) -> dict[str, str]:
    from approvals.models import Plan

    return {str(k): v for k, v in Plan.objects.filter(id__in=ids).values_list("id", "status")}


def wait_settled(ids: list[str], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        found = statuses(ids)
        if all(s in _terminal() for s in found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@contextlib.contextmanager
def publishing_held():
    """Approvals' wake-ups are collected instead of published (then sent in one go)."""
    from actions.lib import dispatch

    held: list[str] = []
    original = dispatch.publish
    dispatch.publish = lambda name, plan_id, countdown=None: held.append(plan_id)
    try:
        yield held
    finally:
        dispatch.publish = original


@contextlib.contextmanager
def seal_lag(every: float = 0.25):
    """Samples, while the block runs, how long the oldest unsealed audit event has
    waited (actions.lib.checkpoints.audit_unsealed_age); yields the list it fills."""
    from django.db import connections

    from actions.lib.checkpoints import audit_unsealed_age

    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        try:
            while not stop.wait(every):
                with contextlib.suppress(Exception):
                    samples.append(audit_unsealed_age())
        finally:
            connections.close_all()

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


def lag_summary(samples: list[float]) -> dict:
    return {
        "samples": len(samples),
        "p50_s": pct(samples, 0.5) if samples else 0.0,
        "max_s": max(samples, default=0.0),
    }


def floor(d: Deployment, sizes: Sizes, concurrency: int) -> dict:
    """What a submission is built on, measured now: the demo upstream answering the GET a
    preview makes, and PostgreSQL committing single-row inserts, each from
    ``concurrency`` clients. A submission does one of each and more, so the lower of
    the two rates is a ceiling it cannot reach."""
    import psycopg
    from django.db import connection

    got = d.load(
        {
            "mode": "hammer",
            "url": d.upstream_url,
            "path": f"/contacts/c-{CONTACT_BASE}",
            "headers": {"Authorization": f"Bearer {d.read_token}"},
            "concurrency": concurrency,
            "seconds": sizes.floor_seconds,
        }
    )
    url = database_url(connection.settings_dict)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, body jsonb)"
        )
    counts = [0] * concurrency
    until = time.monotonic() + sizes.floor_seconds

    def inserter(i: int) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while time.monotonic() < until:
                conn.execute("INSERT INTO bench_floor (body) VALUES (%s)", ['{"n": 1}'])
                counts[i] += 1

    began = time.monotonic()
    threads = [threading.Thread(target=inserter, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    inserts = sum(counts) / (time.monotonic() - began)
    upstream = got["count"] / got["elapsed"] if got["elapsed"] else 0.0
    return {
        "concurrency": concurrency,
        "upstream_get_per_second": upstream,
        "pg_insert_per_second": inserts,
        "per_second": min(upstream, inserts),
    }


# --- B1 submit ------------------------------------------------------------------------------


# The rounds of B1, alternated: (name, path, what is loaded beside the demo catalog's own
# decision rules and policies for the round; bench/policies.py).
B1_ROUNDS = [
    ("baseline", "/bench/baseline/plans", None),
    ("skeleton", "/bench/baseline/skeleton", None),
    ("submit", "/api/v1/plans", None),
    ("submit_required", "/api/v1/plans", "required"),
    ("submit_rules", "/api/v1/plans", "rules"),
    ("submit_policies", "/api/v1/plans", "policies"),
]
# What a round's load generator puts in its addresses (each round its own, so no round
# proposes what another left awaiting a decision).
B1_TAGS = {
    "baseline": "b",
    "skeleton": "s",
    "submit": "s",
    "submit_required": "q",
    "submit_rules": "r",
    "submit_policies": "p",
}


def b1_extra(d: Deployment, extra: str | None) -> None:
    """Load 200 decision rules, 200 policies or the one rule that asks what their 5 that
    hold ask, beside the demo's (bench/policies.py), or (None) the demo's own sections
    back, through load_catalog as an admin would."""
    import yaml

    from actions.catalog import load_catalog
    from bench.policies import demo_sections, policies_200, policies_section, rule_1, rules_200

    demo = demo_sections(ROOT / "demo" / "catalog.yaml")
    document = {"version": 1, **demo}
    if extra == "required":
        document["reviewers"] = rule_1(demo)
    elif extra == "rules":
        document["reviewers"] = rules_200(demo)
    elif extra == "policies":
        document["policies"] = policies_section(demo, policies_200())
    load_catalog(yaml.safe_dump(document), source="bench", base_dir=ROOT / "demo")


def b1_submit(d: Deployment, sizes: Sizes) -> dict:
    from django.contrib.auth.models import Group

    from approvals.models import Plan
    from bench.policies import GROUP

    contacts = d.contacts(sizes.b1_contacts)
    # The rules and policies that hold for B1's plans ask for a support lead: the bench's
    # reviewer is one, so the plans can be decided (and are not refused up front).
    d.reviewer.groups.add(Group.objects.get_or_create(name=GROUP)[0])
    offsets = {name: 0 for name, _, _ in B1_ROUNDS}
    half = sizes.b1_seconds / sizes.b1_alternations
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in B1_ROUNDS}
    applied: dict[str, dict] = {}
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            with contextlib.suppress(Exception):
                samples.append(d.web_reading().rss_kb)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lag_context = seal_lag()
    lags = lag_context.__enter__()  # left in the finally below, with the sampler
    try:
        # Alternate, so drift on a shared machine hits every round alike.
        for name, path, extra in B1_ROUNDS * sizes.b1_alternations:
            if extra:
                b1_extra(d, extra)
            say(f"B1 {name} {half:g} s x{sizes.b1_concurrency}")
            try:
                web0, machine0, t0 = d.web_reading(), machine_cpu(), time.monotonic()
                run = d.load(
                    {
                        "mode": "submit",
                        "path": path,
                        "contacts": contacts,
                        "offset": offsets[name],
                        "seconds": half,
                        "concurrency": sizes.b1_concurrency,
                        "tag": B1_TAGS[name],
                        # Long enough for each web process to compile the new set (its
                        # first request after a load does it once).
                        "warmup": 3.0 if extra else 1.0,
                    }
                )
                wall = time.monotonic() - t0
                web1, machine1 = d.web_reading(), machine_cpu()
            finally:
                if extra:
                    b1_extra(d, None)
            run["web_cpu_seconds"] = web1.cpu_seconds - web0.cpu_seconds
            run["machine_busy_seconds"] = machine1[0] - machine0[0]
            run["machine_total_seconds"] = machine1[1] - machine0[1]
            run["wall_seconds"] = wall
            runs[name].append(run)
            if path == "/api/v1/plans":
                offsets[name] = run["next"]
                plans = run.pop("plans")
                if extra and plans and extra not in applied:
                    # What the 200 did to one of the round's plans: they were evaluated.
                    plan = Plan.objects.get(id=plans[-1]["id"])
                    applied[extra] = {
                        "requirement_rules": plan.requirement.get("rules", []),
                        "decided_by": (plan.policy.get("policies") or {}).get("decided_by", []),
                    }
                if name == "submit":
                    # Later scenarios decide these: only the plain ones, which any
                    # reviewer may decide.
                    for plan in plans:
                        d.pool.setdefault(plan["contact"], plan)
    finally:
        stop.set()
        sampler.join()
        lag_context.__exit__(None, None, None)
    out = {
        "concurrency": sizes.b1_concurrency,
        "seconds": sizes.b1_seconds,
        "alternations": sizes.b1_alternations,
    }
    for name, parts in runs.items():
        latencies = [x for p in parts for x in p["latencies"]]
        count = sum(p["count"] for p in parts)
        elapsed = sum(p["elapsed"] for p in parts)
        errors: dict[str, int] = {}
        for p in parts:
            for k, v in p["errors"].items():
                errors[k] = errors.get(k, 0) + v
        out[name] = {
            "count": count,
            "per_second": count / elapsed if elapsed else 0.0,
            # Each round's own rate: how much the machine drifted from one to the next.
            "rounds_per_second": [
                p["count"] / p["elapsed"] if p["elapsed"] else 0.0 for p in parts
            ],
            "errors": errors,
            "latency_ms": summary(latencies),
            # Cores the web processes kept busy, and the share of the whole machine's
            # CPU in use (anyone's), over the rounds (their warm-up included).
            "web_cores": sum(p["web_cpu_seconds"] for p in parts)
            / max(sum(p["wall_seconds"] for p in parts), 1e-9),
            "machine_busy": sum(p["machine_busy_seconds"] for p in parts)
            / max(sum(p["machine_total_seconds"] for p in parts), 1e-9),
        }
    out["ratio"] = out["submit"]["per_second"] / max(out["baseline"]["per_second"], 1e-9)
    # The most any submission could reach: the skeleton's unavoidable round trips alone.
    out["skeleton_ratio"] = out["skeleton"]["per_second"] / max(out["baseline"]["per_second"], 1e-9)
    # 200 decision rules, 200 policies: against the same plans with the requirement
    # their 5 that hold give (one rule asking it), and against plain B1.
    required = max(out["submit_required"]["per_second"], 1e-9)
    plain = max(out["submit"]["per_second"], 1e-9)
    out["required_ratio"] = out["submit_required"]["per_second"] / plain
    for key in ("rules", "policies"):
        out[f"{key}_ratio"] = out[f"submit_{key}"]["per_second"] / required
        out[f"{key}_ratio_plain"] = out[f"submit_{key}"]["per_second"] / plain
    out["applied"] = applied
    out["web_rss_peak_kb"] = max(samples, default=0)
    out["seal_lag"] = lag_summary(lags)
    say(f"B1 floor x{sizes.b1_concurrency}")
    out["floor"] = floor(d, sizes, sizes.b1_concurrency)
    out["of_floor"] = out["submit"]["per_second"] / max(out["floor"]["per_second"], 1e-9)
    out["metrics"] = b1_metrics_cost(d, out["submit"]["latency_ms"]["p50"])
    say("B1 policy evaluation, in this process")
    out["policy_evaluation"] = policy_evaluation(sizes)
    return out


def policy_evaluation(sizes: Sizes) -> dict:
    """``policy_evaluate`` timed here, one plan at a time, over B1's kind of plan (an
    address change of a bench contact, each a different contact and address), for the
    demo's three policies and for them with the 200 of bench/policies.py; and
    ``policy_evaluate_batch`` (what the backtest calls) over pages of 500."""
    from actions.models import Action
    from actions.policy.drafts import draft_compile, stored_actions
    from actions.policy.engine import PlanFacts, policy_evaluate, policy_evaluate_batch
    from actions.preview import planned_change
    from bench.policies import policies_200

    actions = stored_actions()
    demo_files = sorted((ROOT / "demo" / "policies").glob("*.cedar"))
    demo = [(p.name, p.read_text()) for p in demo_files]
    sets = {
        "demo (3)": draft_compile(demo, actions=actions),
        "demo + 200": draft_compile([*demo, ("bench", policies_200())], actions=actions),
    }
    spec = Action.objects.get(name="update_contact_email").spec
    facts = []
    for i in range(sizes.policy_eval_plans):
        cid = f"c-{CONTACT_BASE + i}"
        before = {
            "id": cid,
            "name": f"Bench {cid}",
            "email": f"{cid}@old.test",
            "workspace": "ws-blue",
            "tags": ["vip"] if i % 10 == 0 else [],
            "version": 1,
        }
        # Half stay in the contact's domain (the demo's routine-email approves them).
        email = f"e{i}@old.test" if i % 2 else f"e{i}@bench.test"
        values = {"contact_id": cid, "email": email}
        after, changes = planned_change(spec, values, before)
        facts.append(
            PlanFacts(
                action="update_contact_email",
                agent="bench-agent",
                target={"connector": "demo", "path": f"/contacts/{cid}"},
                input=values,
                before=before,
                after=after,
                changes=changes,
                now=datetime.now(UTC),
                rate_hour=i % 50,
                rate_day=i,
            )
        )
    out: dict = {"plans": len(facts)}
    for name, compiled in sets.items():
        for f in facts[:50]:  # warm
            policy_evaluate(f, compiled)
        times = []
        outcomes: dict[str, int] = {}
        for f in facts:
            began = time.perf_counter()
            result = policy_evaluate(f, compiled)
            times.append((time.perf_counter() - began) * 1000)
            outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
        began = time.perf_counter()
        for start in range(0, len(facts), 500):
            policy_evaluate_batch(facts[start : start + 500], compiled)
        batch_ms = (time.perf_counter() - began) * 1000 / len(facts)
        out[name] = {
            "policies": len(compiled.ids()),
            "ms": summary(times),
            "batch_ms_per_plan": batch_ms,
            "outcomes": outcomes,
        }
        say(
            f"  {name}: p50 {out[name]['ms']['p50']:.3f} ms, p90 {out[name]['ms']['p90']:.3f} "
            f"ms per plan; batched {batch_ms:.3f} ms"
        )
    return out


def b1_metrics_cost(d: Deployment, submit_p50_ms: float) -> dict:
    """The metrics' share of a submission: the counts and the JSON log line one
    submission makes, timed in a process of its own in multiprocess mode
    (bench/metrics_cost.py), against B1's median; and what one scrape of /metrics
    costs (the processes' files plus the database's figures, read when scraped)."""
    import httpx

    scratch = d.work / "metrics-cost"
    scratch.mkdir(exist_ok=True)
    child = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "metrics_cost.py")],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    cost = json.loads(child.stdout)
    scrapes, size = [], 0
    with httpx.Client(base_url=d.url, timeout=10) as http:
        for _ in range(20):
            t0 = time.perf_counter()
            response = http.get("/metrics")
            scrapes.append((time.perf_counter() - t0) * 1000)
            response.raise_for_status()
            size = len(response.content)
    per_submit = cost["counts_us"] + cost["json_line_us"]
    out = {
        **cost,
        "per_submit_us": per_submit,
        "share_of_submit_p50": per_submit / 1000 / submit_p50_ms if submit_p50_ms else None,
        "scrape_ms": summary(scrapes),
        "scrape_bytes": size,
    }
    say(
        f"B1 metrics: {per_submit:.1f} µs per submission (counts {cost['counts_us']:.1f}, "
        f"JSON line {cost['json_line_us']:.1f}), {out['share_of_submit_p50'] or 0:.3%} of the "
        f"p50 {submit_p50_ms:.1f} ms; a scrape p50 {out['scrape_ms']['p50']:.1f} ms, {size} B"
    )
    return out


# --- B7 decisions per second ----------------------------------------------------------------


def b7_decisions(d: Deployment, sizes: Sizes) -> dict:
    """Reviewers approving plans over HTTP against the web processes, as fast as they
    can: each reviewer a session of its own, posting the review page's form one plan
    after the other, all reviewers at once. The workers execute meanwhile, as they
    would; the audit trail is sealed meanwhile too (its lag is sampled)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.test import Client

    from approvals.models import Plan

    plans = d.take(sizes.b7_decisions, "d")
    permission = Permission.objects.get(codename="review_plan")
    lanes = []
    for i in range(sizes.b7_reviewers):
        user, _ = get_user_model().objects.get_or_create(username=f"bench-decider-{i}")
        user.user_permissions.add(permission)
        client = Client(HTTP_HOST="127.0.0.1")
        client.force_login(user)
        lanes.append(
            {
                "cookies": {
                    settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value
                },
                "plans": plans[i :: sizes.b7_reviewers],
            }
        )
    say(f"B7 {len(plans)} decisions by {len(lanes)} reviewers over HTTP")
    with seal_lag() as lags:
        web0, workers0, machine0 = d.web_reading(), d.worker_readings(), machine_cpu()
        run = d.load({"mode": "decide", "lanes": lanes})
        web1, machine1 = d.web_reading(), machine_cpu()
        ids = [p["id"] for p in plans]
        decided = Plan.objects.filter(id__in=ids).exclude(status="awaiting_approval").count()
        settled = wait_settled(ids, 120 + len(ids) / 5)
        workers1 = d.worker_readings()  # once every approved plan has been executed
        deadline = time.monotonic() + 30
        while lags and lags[-1] > 0 and time.monotonic() < deadline:
            time.sleep(0.25)
    return {
        "decisions": len(plans),
        "reviewers": len(lanes),
        "web_workers": d.args.web_workers,
        "decided": decided,
        "http": run["http"],
        "per_second": len(plans) / run["elapsed"] if run["elapsed"] else 0.0,
        "latency_ms": summary(run["latencies"]),
        "outcomes": _count(settled.values()),
        "seal_lag": lag_summary(lags),
        # Where the CPU went: the web processes' while the reviewers posted, the
        # workers' until every approved plan was executed (milliseconds per decision),
        # and how busy the whole machine was while they posted (every core, every
        # process on it, this run's or not).
        "cpu_ms_per_decision": {
            "web": (web1.cpu_seconds - web0.cpu_seconds) * 1000 / len(plans),
            "workers": sum(
                after.cpu_seconds - before.cpu_seconds
                for before, after in zip(workers0, workers1, strict=True)
            )
            * 1000
            / len(plans),
        },
        "machine_busy": (machine1[0] - machine0[0]) / max(machine1[1] - machine0[1], 1e-9),
    }


# --- B2 decision to effect ------------------------------------------------------------------


def b2_decision_to_effect(d: Deployment, sizes: Sizes) -> dict:
    import httpx

    plans = d.take(sizes.b2_plans, "d")
    log_start = len(d.upstream_log())
    committed: dict[str, float] = {}
    say(f"B2 approving {len(plans)} plans, one every {sizes.b2_gap:g} s")
    for plan in plans:
        committed[plan["id"]] = approve(plan, d.reviewer)
        time.sleep(sizes.b2_gap)
    found = wait_settled([p["id"] for p in plans], 60)
    received: dict[str, float] = {}
    for entry in d.upstream_log()[log_start:]:
        if entry["method"] == "PATCH":
            received.setdefault(entry["path"].rsplit("/", 1)[1], entry["at"])
    from actions.lib.models import AuditEvent
    from approvals.models import Plan

    rows = Plan.objects.filter(id__in=list(committed)).values_list("id", "claimed_at", "verified")
    claimed, verified = {}, {}
    for k, claimed_at, was_verified in rows:
        if claimed_at is not None:
            claimed[str(k)] = claimed_at.timestamp()
        verified[str(k)] = was_verified
    # The outcome's audit event is written after the verification read (the plan's
    # finished_at is taken before it), so its time is when the agent can see the outcome.
    finished = {
        str(k): at.timestamp()
        for k, at in AuditEvent.objects.filter(
            plan_id__in=list(committed),
            kind__in=["execution.completed", "execution.not_applied"],
        ).values_list("plan_id", "at")
    }
    total, to_claim, claim_to_write, to_outcome, write_to_outcome = [], [], [], [], []
    for plan in plans:
        at = received.get(plan["contact"])
        if at is None:
            continue
        total.append((at - committed[plan["id"]]) * 1000)
        if plan["id"] in claimed:
            to_claim.append((claimed[plan["id"]] - committed[plan["id"]]) * 1000)
            claim_to_write.append((at - claimed[plan["id"]]) * 1000)
        # The outcome is recorded after the verification read (check_with: get_contact),
        # so this is what an agent waiting on the plan sees.
        if plan["id"] in finished:
            to_outcome.append((finished[plan["id"]] - committed[plan["id"]]) * 1000)
            write_to_outcome.append((finished[plan["id"]] - at) * 1000)

    # The floor: the executor's unavoidable upstream work (re-read, then the conditional
    # write) done directly over a fresh connection, as the executor opens one.
    # (A new connection each time, as the executor opens one; the TLS context, which
    # httpx would otherwise build per client, is made once, as the executor does.)
    tls = ssl.create_default_context()
    floor = []
    for cid in d.contacts(min(50, sizes.b2_plans)):
        began = time.perf_counter()
        with httpx.Client(
            base_url=d.upstream_url,
            headers={"Authorization": f"Bearer {d.write_token}"},
            verify=tls,
        ) as http:
            etag = http.get(f"/contacts/{cid}").headers["ETag"]
            http.patch(
                f"/contacts/{cid}",
                json={"email": f"{cid}@floor.test"},
                headers={"If-Match": etag, "Content-Type": "application/merge-patch+json"},
            ).raise_for_status()
        floor.append((time.perf_counter() - began) * 1000)
    result = {
        "plans": len(plans),
        "executed": len(total),
        "statuses": _count(found.values()),
        "latency_ms": summary(total),
        "commit_to_claim_ms": summary(to_claim),
        "claim_to_write_ms": summary(claim_to_write),
        "commit_to_outcome_ms": summary(to_outcome),
        "write_to_outcome_ms": summary(write_to_outcome),
        "verified": _count(str(v).lower() for v in verified.values()),
        "floor_ms": summary(floor),
        "latencies": total,
    }
    result["ratio"] = result["latency_ms"]["p50"] / max(result["floor_ms"]["p50"], 1e-9)
    return result


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


# --- B3 executor throughput -----------------------------------------------------------------


def b3_throughput(d: Deployment, sizes: Sizes) -> dict:
    from actions.lib.dispatch import EXECUTE_PLAN, publish
    from approvals.models import Plan

    runs = []
    peak_worker_rss: list[int] = []
    for count in sizes.b3_workers:
        say(f"B3 {count} worker process(es)")
        d.start_workers(count)
        plans = d.take(sizes.b3_plans, f"t{count}")
        ids = [p["id"] for p in plans]
        with publishing_held() as held:
            for plan in plans:
                approve(plan, d.reviewer)
        samples: list[list[int]] = []
        began = time.time()
        for plan_id in held:
            publish(EXECUTE_PLAN, plan_id)
        while True:
            with contextlib.suppress(Exception):
                samples.append([r.rss_kb for r in d.worker_readings()])
            found = statuses(ids)
            if all(s in _terminal() for s in found.values()) or time.time() - began > 300:
                break
            time.sleep(0.2)
        finished = [
            v.timestamp()
            for v in Plan.objects.filter(id__in=ids).values_list("finished_at", flat=True)
            if v is not None
        ]
        elapsed = max(finished) - began if finished else float("nan")
        per_worker_peak = max((max(s) for s in samples if s), default=0)
        peak_worker_rss.append(per_worker_peak)
        runs.append(
            {
                "workers": count,
                "plans": len(ids),
                "statuses": _count(found.values()),
                "seconds": elapsed,
                "per_second": len(finished) / elapsed if finished else 0.0,
            }
        )
    base = runs[0]["per_second"] or 1e-9
    for run in runs:
        run["ratio"] = run["per_second"] / base
    d.start_workers(d.args.workers)
    return {"runs": runs, "worker_rss_peak_kb": max(peak_worker_rss, default=0)}


# --- B4 history ---------------------------------------------------------------------------


def _seed(total: int, events_per_plan: int) -> int:
    """Bring the plan table to ``total`` rows of settled history (demo/history.py: COPY);
    returns the rows added."""
    from approvals.models import Plan
    from demo.history import seed_plans

    have = Plan.objects.count()
    if total <= have:
        return 0
    step = max(100_000, (total - have) // 10)

    def progress(done: int) -> None:
        if done % step < 20_000:
            say(f"  seeded {done:,} of {total - have:,}")

    seed_plans(total - have, events_per_plan=events_per_plan, progress=progress)
    return total - have


def _quiesce(cursor, limit: float = 90.0) -> None:
    """Let PostgreSQL finish what a bulk load leaves it doing (writing out the dirty
    pages, autovacuum) before timing pages: measured in the middle of it, the first pages
    after a million-row load were half again as slow, and the last one not at all."""
    with contextlib.suppress(Exception):
        cursor.execute("CHECKPOINT")  # superuser or pg_checkpoint; otherwise just wait
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE backend_type = 'autovacuum worker' AND datname = current_database()"
        )
        if cursor.fetchone()[0] == 0:
            return
        time.sleep(1.0)


def _copy_database(url: str, suffix: str) -> tuple[str, str]:
    """A copy of the database at ``url`` as it is now (``pg_dump`` into a new scratch
    database, then ``VACUUM ANALYZE``); returns (its URL, its name). ``CREATE DATABASE
    ... TEMPLATE`` would need every other session out of the source, and the web and
    worker processes stay connected to it."""
    import psycopg

    copy_url, copy_name = scratch_database(url, suffix)
    dump = subprocess.Popen(
        ["pg_dump", "--no-owner", "--no-privileges", "--dbname", url], stdout=subprocess.PIPE
    )
    subprocess.run(
        ["psql", "--quiet", "--set", "ON_ERROR_STOP=1", "--dbname", copy_url],
        stdin=dump.stdout,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    dump.stdout.close()
    if dump.wait() != 0:
        raise RuntimeError("pg_dump failed")
    with psycopg.connect(copy_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return copy_url, copy_name


def b4_history(d: Deployment, sizes: Sizes, history: int, events_per_plan: int) -> dict:
    """The pages with a short history and with a long one, timed at the same moments.

    The short history is copied aside (a database of its own) before the long one is
    seeded; then a web server on each, started together, is timed in alternating rounds
    with the same warm-up. Timed one after the other, minutes apart on a machine other
    work shares, the two medians differed by as much as the machine's load did: 40
    requests against the next 40 on the same database, a page's median moved by a factor
    of 0.7 to 1.7."""
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from actions.lib.models import AuditEvent
    from approvals.models import Plan

    queue = d.prepare(sizes.b4_queue, "q")
    plan_id = queue[len(queue) // 2]["id"]
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(d.reviewer)
    cookie = {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}
    pages = {
        "queue page": ("/plans/", {}),
        "plan page": (f"/plans/{plan_id}/", {}),
        "GET /api/v1/plans/{id}": (
            f"/api/v1/plans/{plan_id}",
            {"HTTP_AUTHORIZATION": f"Bearer {d.token}"},
        ),
    }

    def settle(size: int) -> dict:
        """Seed to ``size`` plans, let PostgreSQL settle, count each page's queries."""
        added = _seed(size, events_per_plan)
        with connection.cursor() as cursor:
            for model in (Plan, AuditEvent):
                cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")
            _quiesce(cursor)
        out = {"plans": Plan.objects.count(), "seeded": added, "pages": {}}
        for name, (path, headers) in pages.items():
            client.get(path, **headers)  # warm
            with CaptureQueriesContext(connection) as ctx:
                response = client.get(path, **headers)
            assert response.status_code == 200, (path, response.status_code)
            out["pages"][name] = {"queries": len(ctx.captured_queries)}
        return out

    def targets(servers: dict[str, str]) -> list[dict]:
        """Each page at each history, the two histories of a page side by side: each
        request follows one to the other server, at either size alike."""
        return [
            {
                "name": f"{label} {name}",
                "url": url,
                "path": path,
                "cookies": cookie if not headers else {},
                "headers": {"Authorization": headers["HTTP_AUTHORIZATION"]} if headers else {},
            }
            for name, (path, headers) in pages.items()
            for label, url in servers.items()
        ]

    small_target = 1000
    say(f"B4 with {small_target} plans, copied aside")
    small = settle(small_target)
    small_url, small_name = _copy_database(os.environ["DATABASE_URL"], "b4small")
    try:
        say(f"B4 seeding to {history} plans")
        began = time.monotonic()
        large = settle(history)
        large["seed_seconds"] = time.monotonic() - began
        # Two web servers started together, one on each history, so neither has served
        # more than the other (the deployment's own has served every scenario so far).
        started: list[Process] = []
        servers: dict[str, str] = {}
        try:
            for label, url in (("small", small_url), ("large", os.environ["DATABASE_URL"])):
                proc, servers[label] = start_web(
                    {**d.web_env, "DATABASE_URL": url},
                    d.work,
                    name=f"web-b4-{label}",
                    workers=d.args.web_workers,
                )
                started.append(d.stack.add(proc))
            for proc in started:
                wait_started(proc, d.args.web_workers)
            # One request to each page of each history a round, the order reversed every
            # other round: a moment of load falls on both histories alike.
            rounds = sizes.b4_repeat
            say(f"B4 timing both histories in {rounds} alternating rounds")
            timed = d.load(
                {
                    "mode": "interleave",
                    "targets": targets(servers),
                    "repeat": sizes.b4_repeat,
                    "rounds": rounds,
                    "warmup": 5,
                }
            )["latencies"]
        finally:
            for proc in started:
                d.stack.stop(proc)
    finally:
        drop_database(os.environ["DATABASE_URL"], small_name)
    for label, out in (("small", small), ("large", large)):
        for name in pages:
            out["pages"][name]["latency_ms"] = summary(timed[f"{label} {name}"])
    ratios = {
        name: large["pages"][name]["latency_ms"]["p50"] / small["pages"][name]["latency_ms"]["p50"]
        for name in pages
    }
    return {
        "small": small,
        "large": large,
        "ratio": ratios,
        "seeded_events_per_plan": events_per_plan,
        "timed": {"interleaved_rounds": rounds, "warmup": 5},
    }


# --- B8 backtest ----------------------------------------------------------------------------

B8_PER_DAY = 20_000 / 6  # plans a day in the seeded history, the same at every size
# Refused submissions beside the plans, as a share of the plans (a forbid refuses about
# one proposal in twenty): the backtest replays them too.
B8_REFUSED_SHARE = 0.05
B8_FREEZE = (
    '@id("bench-freeze")\n'
    '@reason("no email change to this domain")\n'
    'forbid (principal, action == Action::"update_contact_email", resource)\n'
    'when { context.email_domains["/email"] has after &&\n'
    '       context.email_domains["/email"].after == "frozen.example" };\n'
)


def b8_templates(d: Deployment) -> list:
    """Seven plans to clone, proposed through the service with no rule or policy in force
    (so, like history from before policies, they record no rate): the demo's three
    policies approve the first, refuse the sixth and add a billing approver to the
    fourth; the rest go to people as before."""
    import httpx
    import yaml

    from actions.catalog import load_catalog
    from actions.services import agent_create
    from approvals.services import plan_cancel, plan_submit

    agent, _ = agent_create(
        name="bench-history",
        action_names=["update_contact_email", "send_invoice", "delete_contact"],
        active=True,
    )
    plain, other = d.contacts(2)
    httpx.post(
        d.upstream_url + "/_demo/mutate",
        json={"path": "/invoices/inv-2002", "patch": {"status": "draft", "amount": "45.00"}},
        timeout=10,
    ).raise_for_status()
    proposals = [
        ("update_contact_email", {"contact_id": plain, "email": f"renamed.{plain}@old.test"}),
        ("update_contact_email", {"contact_id": plain, "email": "someone@else.example"}),
        ("update_contact_email", {"contact_id": "c-1001", "email": "a.lovelace@example.test"}),
        ("send_invoice", {"invoice_id": "inv-2001"}),  # 120.00
        ("send_invoice", {"invoice_id": "inv-2002"}),  # 45.00
        ("delete_contact", {"contact_id": "c-1001"}),  # a VIP
        ("delete_contact", {"contact_id": other}),
    ]
    load_catalog(yaml.safe_dump({"version": 1, "reviewers": {}, "policies": {}}), source="bench")
    try:
        templates = [
            plan_submit(agent=agent, action_name=name, input=values, reason="bench history")[0]
            for name, values in proposals
        ]
    finally:
        b1_extra(d, None)
    for plan in templates:
        plan_cancel(agent=agent, plan_id=plan.id)
    return templates


def b8_refused_templates(d: Deployment) -> list:
    """Three refused submissions to clone, refused through the service by the demo's
    policies and one more forbid (``bench-freeze``, which the draft does not have): a
    VIP's deletion (the draft refuses it again), and two email changes to the frozen
    domain (the draft lets them through: one to people, one, within the contact's
    domain, to routine-email's automatic yes)."""
    import httpx
    import yaml

    from actions.catalog import load_catalog
    from actions.lib.exceptions import PolicyRefused
    from actions.models import Agent
    from approvals.models import RefusedSubmission
    from approvals.services import plan_submit
    from bench.policies import demo_sections, policies_section

    agent = Agent.objects.get(name="bench-history")
    plain, frozen = d.contacts(2)
    httpx.post(
        d.upstream_url + "/_demo/mutate",
        json={"path": f"/contacts/{frozen}", "patch": {"email": f"{frozen}@frozen.example"}},
        timeout=10,
    ).raise_for_status()
    proposals = [
        ("delete_contact", {"contact_id": "c-1001"}),
        ("update_contact_email", {"contact_id": plain, "email": f"moved.{plain}@frozen.example"}),
        ("update_contact_email", {"contact_id": frozen, "email": f"new.{frozen}@frozen.example"}),
    ]
    demo = demo_sections(ROOT / "demo" / "catalog.yaml")
    document = {"version": 1, **demo, "policies": policies_section(demo, B8_FREEZE)}
    load_catalog(yaml.safe_dump(document), source="bench", base_dir=ROOT / "demo")
    seen = set(RefusedSubmission.objects.values_list("id", flat=True))
    try:
        for name, values in proposals:
            try:
                plan_submit(agent=agent, action_name=name, input=values, reason="bench refused")
            except PolicyRefused:
                continue
            raise RuntimeError(f"B8: {name} {values} was not refused")
    finally:
        b1_extra(d, None)
    return list(RefusedSubmission.objects.exclude(id__in=seen).order_by("created_at"))


def b8_backtest(d: Deployment, sizes: Sizes) -> dict:
    """Seed histories of each size (demo/history.py, COPY) in windows of their own, well
    before anything else in the database, at the same plans per day; then run
    ``manage.py policy_backtest`` over each window with the demo's three policies as the
    draft, in a process of its own: its wall time and its peak resident memory
    (``ru_maxrss`` from wait4)."""
    from django.db import connection
    from django.utils import timezone

    from demo.history import seed_plans, seed_refused

    templates = b8_templates(d)
    refused_templates = b8_refused_templates(d)
    # Before B4's history (spread over the last 365 days), one window after the other.
    end = timezone.now() - timedelta(days=400)
    runs = []
    for n in sizes.b8_plans:
        days = n / B8_PER_DAY
        say(f"B8 seeding {n:,} plans over {days:.1f} days")
        seed_plans(n, templates=templates, end=end, days=days, events_per_plan=0)
        refused = round(n * B8_REFUSED_SHARE)
        seed_refused(refused, templates=refused_templates, end=end, days=days)
        since, until = end - timedelta(days=days, minutes=2), end
        end = since - timedelta(days=3)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE approvals_plan")
            cursor.execute("VACUUM ANALYZE approvals_refusedsubmission")
        say(f"B8 backtest over {n:,} plans")
        runs.append(b8_run(d, n, since, until))
        say(
            f"  {runs[-1]['seconds']:.1f} s ({runs[-1]['per_second']:,.0f} plans/s), "
            f"peak RSS {runs[-1]['peak_rss_kb'] / 1024:.0f} MB"
        )
    small, large = runs[0], runs[-1]
    return {
        "runs": runs,
        "plans_per_day": B8_PER_DAY,
        "refused_share": B8_REFUSED_SHARE,
        "rss_ratio": large["peak_rss_kb"] / max(small["peak_rss_kb"], 1),
        "seconds": large["seconds"],
        "plans": large["plans"],
    }


def b8_run(d: Deployment, n: int, since: datetime, until: datetime) -> dict:
    out_file = d.work / f"backtest-{n}.json"
    log_file = d.work / f"backtest-{n}.log"
    command = [
        sys.executable,
        str(ROOT / "manage.py"),
        "policy_backtest",
        str(ROOT / "demo" / "policies"),
        "--since",
        since.isoformat(),
        "--until",
        until.isoformat(),
        "--json",
        str(out_file),
        "--progress-pages",
        "40",
        "--actor",
        "bench",
    ]
    with log_file.open("w") as log:
        began = time.monotonic()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log, env=dict(os.environ))
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.monotonic() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"policy_backtest failed:\n{log_file.read_text()[-3000:]}")
    report = json.loads(out_file.read_text())
    return {
        "plans": report["totals"]["plans"],
        "seconds": seconds,
        "replay_seconds": report["read"]["seconds"],
        "per_second": report["totals"]["plans"] / seconds if seconds else 0.0,
        "pages": report["read"]["pages"],
        "page_size": report["read"]["page_size"],
        "peak_rss_kb": usage.ru_maxrss,  # kilobytes on Linux
        "draft": report["totals"]["draft"],
        "approve_disagreements": report["approve_disagreements"]["count"],
        "refuse_disagreements": report["refuse_disagreements"]["count"],
        "requirement_changes": report["requirement_changes"]["count"],
        "rate_counted": report["totals"]["rate_counted"],
        "errors": report["errors"]["plans"],
        "new_approvals": report["new_approvals"]["count"],
        "refused_read": report["refused_let_through"]["read"],
        "refused_let_through": report["refused_let_through"]["count"],
    }


# --- B5 waiting agents --------------------------------------------------------------------


def b5_waiting(d: Deployment, sizes: Sizes) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    def deny_all(plans: list[dict], threads: int, gap: float = 0.0) -> dict[str, float]:
        committed: dict[str, float] = {}

        def lane(chunk: list[dict]) -> None:
            try:
                for plan in chunk:
                    committed[plan["id"]] = approve(plan, d.reviewer, "deny")
                    if gap:
                        time.sleep(gap)
            finally:
                connections.close_all()

        # Each lane denies in the order the waits were sent (the oldest wait first).
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lane, [plans[i::threads] for i in range(threads)]))
        return committed

    def waiters(plans: list[dict], measure_idle: bool, threads: int, gap: float) -> dict:
        ready = d.work / f"ready-{uuid.uuid4().hex}"
        before = d.web_reading()
        conns_before = d.db_connections()
        # Idle CPU without waiters, for comparison.
        idle0 = d.web_reading()
        time.sleep(sizes.b5_idle if measure_idle else 0)
        idle1 = d.web_reading()
        proc = d.load(
            {
                "mode": "wait",
                "plan_ids": [p["id"] for p in plans],
                "wait": 30,
                "ready_file": str(ready),
            },
            wait=False,
        )
        deadline = time.monotonic() + 30
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("waiters did not start: " + proc.stderr.read()[-2000:])
            time.sleep(0.05)
        out: dict = {"waiters": len(plans)}
        if measure_idle:
            # Until the web processes have taken every wait in (their CPU settles), at
            # most a few seconds: the waits must not time out before the plans settle.
            settle = time.monotonic() + 6
            last = d.web_reading()
            while time.monotonic() < settle:
                time.sleep(0.5)
                now_reading = d.web_reading()
                busy = (now_reading.cpu_seconds - last.cpu_seconds) / 0.5
                last = now_reading
                if busy < 0.1:
                    break
            w0 = d.web_reading()
            conns = [d.db_connections()]
            t0 = time.monotonic()
            while time.monotonic() - t0 < sizes.b5_idle:
                time.sleep(0.5)
                conns.append(d.db_connections())
            w1 = d.web_reading()
            out.update(
                rss_before_kb=before.rss_kb,
                rss_waiting_kb=w1.rss_kb,
                extra_rss_kb=w1.rss_kb - before.rss_kb,
                threads_before=before.threads,
                threads_waiting=w1.threads,
                db_connections_before=conns_before,
                db_connections_waiting=max(conns),
                cpu_idle_percent=(idle1.cpu_seconds - idle0.cpu_seconds) / sizes.b5_idle * 100,
                cpu_waiting_percent=(w1.cpu_seconds - w0.cpu_seconds)
                / (time.monotonic() - t0)
                * 100,
                web_processes=w1.processes,
            )
        committed = deny_all(plans, threads, gap)
        results = d.finish(proc)["results"]
        if committed:
            span = max(committed.values()) - min(committed.values())
            out["settle_seconds"] = span
            out["settled_per_second"] = len(committed) / span if span else float("nan")
        wake = [
            (r["received"] - committed[r["id"]]) * 1000
            for r in results
            if r["status"] == "denied" and r["id"] in committed
        ]
        out["woken"] = len(wake)
        out["not_woken"] = len(results) - len(wake)
        out["answers"] = _count(f"{r['http']} {r['status']}" for r in results)
        out["asked_again"] = sum(1 for r in results if r.get("rounds", 1) > 1)
        out["wake_ms"] = summary(wake)
        out["wakes"] = wake
        return out

    say(f"B5 {sizes.b5_few} waiters, settled one at a time (baseline)")
    few = waiters(d.take(sizes.b5_few, "w"), False, 1, 0.2)
    say(f"B5 {sizes.b5_waiters} waiters")
    many = waiters(d.take(sizes.b5_waiters, "W"), True, 8, 0.0)
    return {
        "few": few,
        "many": many,
        "ratio": many["wake_ms"]["p50"] / max(few["wake_ms"]["p50"], 1e-9),
    }


# --- B6 footprint -------------------------------------------------------------------------


def footprint(d: Deployment) -> dict:
    web = d.web_reading()
    workers = d.worker_readings()
    return {
        "web_rss_kb": web.rss_kb,
        "web_processes": web.processes,
        "web_threads": web.threads,
        "worker_rss_kb": [r.rss_kb for r in workers],
        "worker_processes": [r.processes for r in workers],
    }


# --- profiles (where the time goes, in this process) -----------------------------------------


def profiles(d: Deployment, sizes: Sizes, out_dir: Path) -> dict:
    """cProfile of the submit and decide services and of executions, run in this process
    over the same database and upstream: the web and worker code paths without HTTP or
    Celery."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from approvals.services import plan_submit
    from executors.services import execution_run

    files: dict = {}
    # Queries of one submission and one execution (the profiles below time many).
    cid = d.contacts(1)[0]
    with CaptureQueriesContext(connection) as ctx:
        plan, _ = plan_submit(
            agent=d.agent,
            action_name="update_contact_email",
            input={"contact_id": cid, "email": "count@bench.test"},
            reason="bench profile",
        )
    counted = {"submit": len(ctx.captured_queries)}
    one = {"id": str(plan.id), "fingerprint": plan.fingerprint}
    with publishing_held():
        approve(one, d.reviewer)
    settings.COUNTERSIGN_WORKER_KEY_FILE = str(d.key_file)
    try:
        with CaptureQueriesContext(connection) as ctx:
            execution_run(plan_id=one["id"])
    finally:
        settings.COUNTERSIGN_WORKER_KEY_FILE = ""
    counted["execute"] = len(ctx.captured_queries)
    files["queries"] = counted

    contacts = d.contacts(sizes.profile_calls)
    profiler = cProfile.Profile()
    plans = []
    profiler.enable()
    for i, cid in enumerate(contacts):
        plan, _ = plan_submit(
            agent=d.agent,
            action_name="update_contact_email",
            input={"contact_id": cid, "email": f"prof{i}@bench.test"},
            reason="bench profile",
        )
        plans.append({"id": str(plan.id), "fingerprint": plan.fingerprint})
    profiler.disable()
    files["submit"] = _dump(profiler, out_dir / "profile-submit.txt", len(plans), "plan_submit")

    profiler = cProfile.Profile()
    with publishing_held():
        profiler.enable()
        for plan in plans:
            approve(plan, d.reviewer)
        profiler.disable()
    files["decide"] = _dump(profiler, out_dir / "profile-decide.txt", len(plans), "approval_record")
    settings.COUNTERSIGN_WORKER_KEY_FILE = str(d.key_file)
    try:
        profiler = cProfile.Profile()
        profiler.enable()
        for plan in plans:
            execution_run(plan_id=plan["id"])
        profiler.disable()
    finally:
        settings.COUNTERSIGN_WORKER_KEY_FILE = ""
    files["execute"] = _dump(profiler, out_dir / "profile-execute.txt", len(plans), "execution_run")
    return files


def _dump(profiler: cProfile.Profile, path: Path, calls: int, what: str) -> str:
    buffer = io.StringIO()
    stats = pstats.Stats(profiler, stream=buffer)
    stats.strip_dirs().sort_stats("cumulative").print_stats(35)
    text = buffer.getvalue()
    # Keep the table; drop the preamble with local paths.
    text = text[text.find("   ncalls") :] if "   ncalls" in text else text
    path.write_text(
        f"cProfile of {calls} calls of {what} (make bench), sorted by cumulative time.\n"
        f"Times are for all {calls} calls together.\n\n{text}"
    )
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# --- main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (smaller sizes)")
    parser.add_argument("--web-workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument(
        "--history",
        type=int,
        default=None,
        help="plans for the large B4 run (env BENCH_HISTORY; default 1,000,000, quick 20,000)",
    )
    parser.add_argument(
        "--seed-events",
        type=int,
        default=0,
        help="audit events per seeded plan in B4 (demo/history.py). The pages B4 measures "
        "read a plan's events by index, so the default 0 keeps seeding fast; 2 is closer "
        "to real history and about three times as slow to seed",
    )
    parser.add_argument(
        "--db-pool",
        type=int,
        default=None,
        help="database connections pooled per web process (COUNTERSIGN_DB_POOL_SIZE; "
        "default: none, each of Django's threads keeps its own connection)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated scenarios, e.g. B1,B4, or CPU (CPU per plan: bench/cpu.py); "
        "default: all",
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
    )
    parser.add_argument("--results", default=str(ROOT / "docs" / "benchmarks" / "results.json"))
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args(argv)
    # SIGTERM (timeout, a CI cancel) unwinds like Ctrl-C: every process started here is
    # stopped and the scratch database dropped by the finally blocks below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = QUICK if args.quick else Sizes()
    history = args.history or int(
        os.environ.get("BENCH_HISTORY") or (20_000 if args.quick else 1_000_000)
    )
    only = {s.strip().upper() for s in args.only.split(",") if s.strip()}
    args.queue = f"countersign-bench-{os.getpid()}"
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")

    base_url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/countersign"
    scratch_url, scratch_name = scratch_database(base_url, "bench")
    os.environ.update(
        DATABASE_URL=scratch_url,
        COUNTERSIGN_ENV="test",
        CELERY_BROKER_URL=args.redis_url,
        REDIS_URL=args.redis_url,
        COUNTERSIGN_QUEUE=args.queue,
        COUNTERSIGN_RATE_LIMIT="1000000/minute",
        COUNTERSIGN_DB_CONN_MAX_AGE="60",
        COUNTERSIGN_LOG_LEVEL="WARNING",
        COUNTERSIGN_NOTIFY_CHANNEL=f"countersign-bench-{os.getpid()}:plans",
        DJANGO_SETTINGS_MODULE="config.settings",
    )
    os.environ.pop("COUNTERSIGN_WORKER_KEY_FILE", None)
    work = Path(tempfile.mkdtemp(prefix="countersign-bench-"))
    out_dir = Path(args.results).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    results: dict = {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick,
        "machine": machine_facts(),
        "config": {
            "web_workers": args.web_workers,
            "celery_workers": args.workers,
            "db_pool": args.db_pool,
            "history": history,
            "sizes": asdict(sizes),
        },
    }
    if only:
        # A run of some scenarios keeps the others' figures from the last run, and says
        # so (bench/report.py prints which came from which run).
        _keep_previous(Path(args.results), results, only)
    measure_cpu = not only or "CPU" in only
    results.update(cpu_scenario.carried(Path(args.results), measuring=measure_cpu))
    ok = False
    try:
        import django

        django.setup()
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            results["machine"]["postgresql"] = cursor.fetchone()[0]
        import redis

        results["machine"]["redis"] = redis.Redis.from_url(args.redis_url).info()["redis_version"]
        say(f"scratch database {scratch_name}, logs in {work}")
        with Stack() as stack:
            d = Deployment(stack, work, args, sizes)
            d.setup()
            time.sleep(1.0)
            # B6 is read at rest, and under the load of B1 and B3: a run of neither keeps
            # the last run's (kept by _keep_previous).
            footprint_now = "B6" not in results
            if footprint_now:
                results["B6"] = {"rest": footprint(d)}
            say(f"up: web {d.url} ({args.web_workers} workers), {args.workers} Celery workers")
            scenarios = [
                ("B4", lambda: b4_history(d, sizes, history, args.seed_events)),
                ("B1", lambda: b1_submit(d, sizes)),
                ("B2", lambda: b2_decision_to_effect(d, sizes)),
                ("B3", lambda: b3_throughput(d, sizes)),
                ("B5", lambda: b5_waiting(d, sizes)),
                ("B7", lambda: b7_decisions(d, sizes)),
                ("B8", lambda: b8_backtest(d, sizes)),
                ("B9", lambda: b9_mcp(d, sizes, say)),
            ]
            for name, run in scenarios:
                if only and name not in only:
                    continue
                t0 = time.monotonic()
                results[name] = run()
                results[name]["wall_seconds"] = time.monotonic() - t0
                results[name]["measured"] = results["when"]
                results[name]["measured_quick"] = args.quick
                say(f"{name} done in {results[name]['wall_seconds']:.0f} s")
                _save(args.results, results)
            if measure_cpu:
                t0 = time.monotonic()
                cpu_scenario.record(results, cpu_scenario.cpu_per_plan(d, args.quick, out_dir))
                results["cpu_per_plan"]["wall_seconds"] = time.monotonic() - t0
                _save(args.results, results)
            if footprint_now:
                results["B6"]["after"] = footprint(d)
            if "B1" in results:
                results["B6"]["web_rss_peak_kb"] = results["B1"]["web_rss_peak_kb"]
            if "B3" in results:
                results["B6"]["worker_rss_peak_kb"] = results["B3"]["worker_rss_peak_kb"]
            if not only or "PROFILE" in only:
                say("profiles (cProfile, in this process)")
                found = profiles(d, sizes, out_dir)
                results["queries_per_call"] = found.pop("queries")
                results["profiles"] = found
        results["seconds"] = time.monotonic() - began
        _save(args.results, results)
        ok = True
    finally:
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        drop_database(base_url, scratch_name)
        with contextlib.suppress(Exception):
            import redis

            redis.Redis.from_url(args.redis_url).delete(args.queue)
    if ok and not args.no_report:
        from bench.report import write_report

        write_report(Path(args.results))
    if ok:
        shutil.rmtree(work, ignore_errors=True)  # logs and the run's throwaway worker key
        say(f"done in {time.monotonic() - began:.0f} s")
    return 0


SCENARIOS = ("B1", "B2", "B3", "B4", "B5", "B7", "B8", "B9")


def _keep_previous(path: Path, results: dict, only: set[str]) -> None:
    """The scenarios this run does not measure, as the last run left them, each with the
    date (and quickness) of the run that measured it."""
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    for name in SCENARIOS:
        if name in previous and name not in only:
            results[name] = previous[name]
            results[name].setdefault("measured", previous.get("when"))
            results[name].setdefault("measured_quick", previous.get("quick"))
    if "B6" in previous and not only & {"B1", "B3"}:
        results["B6"] = previous["B6"]
    if "PROFILE" not in only:
        for key in ("queries_per_call", "profiles"):
            if key in previous:
                results[key] = previous[key]


def _save(path: str, results: dict) -> None:
    Path(path).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
