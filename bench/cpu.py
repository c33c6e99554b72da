"""CPU per plan (``make bench``, ``--only CPU``): what one plan costs each process that
serves it, summed from ``/proc`` over a batch of plans.

A gateway is on the path of every agent action, so the CPU a plan takes is what a team
pays for it. Wall-clock rates (B1, B3, B7) move with whatever else the machine runs;
``utime + stime`` of the processes that did the work does not, or much less. Three paths,
each a batch of plans on fresh contacts, one after the other:

* ``submit``: plans submitted over HTTP and left awaiting a person;
* ``decided``: submitted, approved by a person over HTTP (the review page's form),
  executed and verified by the workers, the audit trail sealed;
* ``policy``: submitted with an address in the contact's own domain, which the demo's
  ``routine-email`` policy approves, executed and verified, sealed.

Four groups are read: the web server's process tree, each Celery worker's tree, the
PostgreSQL backends serving this run's database (found by ``pg_stat_activity.datname``,
the bench process's own connection left out; the postmaster's shared helpers, such as
the WAL writer and checkpointer, serve every database on the server and are left out),
and the Redis server (its pid from ``INFO server``; shared with anything else using that
server, so its figure is an upper bound). Processes are only read, never signalled. Every
process is sampled every 0.2 s, so a backend that comes and goes within the batch is
counted up to its last sample.

Queries per step are counted with Django's ``CaptureQueriesContext`` in this process,
over the same middleware and views the web processes run (Django's test client posting
the API's JSON and the review form) and the same ``execution_run`` the worker task calls:
the server has no ``pg_stat_statements`` loaded, and ``pg_stat_database.xact_commit`` of
the run's database (also recorded, per plan) counts transactions, not statements.

Profiles: a second batch of each executing path with ``py-spy record`` attached to the
real web and worker processes (``--subprocesses``), folded into top frames in
``docs/benchmarks/profile-cpu-web.txt`` and ``profile-cpu-worker.txt``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
GROUPS = ("web", "workers", "postgresql", "redis")
PATHS = ("submit", "decided", "policy")
BATCH = {"quick": 60, "full": 300}
PROFILE_BATCH = {"quick": 100, "full": 200}
SPY_RATE = 400  # samples per second of py-spy
RESULT_KEY = "cpu_per_plan"
BEFORE_KEY = "cpu_per_plan_before"


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S', time.gmtime())}] {message}", flush=True)


# --- reading /proc -----------------------------------------------------------------------


def proc_cpu(pid: int) -> float | None:
    """utime + stime of one process, in seconds (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return None


def tree(pid: int) -> list[int]:
    from bench.procs import children_of

    return [pid, *children_of(pid)]


class Meter:
    """CPU seconds per group between ``start`` and ``stop``. Each group is a function
    returning its pids now; every pid is read every ``every`` seconds, so one that
    appears during the window counts from zero and one that exits counts up to its last
    reading."""

    def __init__(self, groups: dict[str, Callable[[], list[int]]], every: float = 0.2) -> None:
        self.groups, self.every = groups, every
        self.first: dict[str, dict[int, float]] = {g: {} for g in groups}
        self.last: dict[str, dict[int, float]] = {g: {} for g in groups}
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.began = 0.0
        self.errors = 0

    def _read(self, initial: bool) -> None:
        for group, pids_of in self.groups.items():
            try:
                pids = pids_of()
            except Exception:  # noqa: BLE001 - a sample missed; the next one counts
                self.errors += 1
                continue
            for pid in pids:
                cpu = proc_cpu(pid)
                if cpu is None:
                    continue
                if pid not in self.first[group]:
                    self.first[group][pid] = cpu if initial else 0.0
                self.last[group][pid] = cpu

    def start(self) -> None:
        self._read(initial=True)
        self.began = time.monotonic()

        def loop() -> None:
            while not self.stop_event.wait(self.every):
                self._read(initial=False)

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def stop(self) -> dict[str, float]:
        self.stop_event.set()
        if self.thread:
            self.thread.join()
        self._read(initial=False)
        out = {
            g: sum(self.last[g][p] - self.first[g][p] for p in self.last[g]) for g in self.groups
        }
        out["wall"] = time.monotonic() - self.began
        return out


class Backends:
    """This run's PostgreSQL backends, read over a connection to the ``postgres``
    database (so reading them adds nothing to the run's own database)."""

    def __init__(self, admin_url: str, db_name: str, own_pid: Callable[[], int]) -> None:
        import psycopg

        self.conn = psycopg.connect(admin_url, autocommit=True)
        self.db_name, self.own_pid = db_name, own_pid
        self.lock = threading.Lock()
        self.exclude: set[int] = set()

    def pids(self) -> list[int]:
        with self.lock:
            rows = self.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.db_name]
            ).fetchall()
        return [r[0] for r in rows if r[0] not in self.exclude]

    def commits(self) -> int:
        with self.lock:
            row = self.conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [self.db_name]
            ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


# --- the deployment's processes -----------------------------------------------------------


def own_backend_pid() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def redis_pid(url: str) -> int:
    import redis

    return int(redis.Redis.from_url(url).info("server")["process_id"])


def meter_for(d: Any, backends: Backends) -> Meter:
    redis = redis_pid(d.args.redis_url)
    return Meter(
        {
            "web": lambda: tree(d.web.proc.pid),
            "workers": lambda: [p for w in d.workers for p in tree(w.proc.pid)],
            "postgresql": backends.pids,
            "redis": lambda: [redis],
        }
    )


def settle(ids: list[str], timeout: float, terminal: bool = True) -> tuple[dict[str, int], float]:
    """Wait until every plan is terminal (unless ``terminal`` is false: submit-only),
    then until the audit trail is sealed (the workers seal every plan's events); returns
    the statuses counted and when (``time.monotonic()``) the last plan was seen terminal,
    polled every 0.05 s."""
    from actions.lib.checkpoints import audit_unsealed_age
    from approvals.models import Plan, PlanStatus

    deadline = time.monotonic() + timeout
    while True:
        found = dict(Plan.objects.filter(id__in=ids).values_list("id", "status"))
        if not terminal or all(s in PlanStatus.terminal() for s in found.values()):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    reached = time.monotonic()
    while audit_unsealed_age() > 0 and time.monotonic() < deadline:
        time.sleep(0.25)
    counts: dict[str, int] = {}
    for status in found.values():
        counts[status] = counts.get(status, 0) + 1
    return counts, reached


def reviewer_lanes(plans: list[dict], reviewers: int = 4) -> list[dict]:
    """Sessions of reviewers allowed to decide, each with its share of the plans (as
    B7 posts them)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.middleware.csrf import CSRF_ALLOWED_CHARS, CSRF_SECRET_LENGTH
    from django.test import Client
    from django.utils.crypto import get_random_string

    permission = Permission.objects.get(codename="review_plan")
    lanes = []
    for i in range(reviewers):
        user, _ = get_user_model().objects.get_or_create(username=f"bench-cpu-{i}")
        user.user_permissions.add(permission)
        client = Client(HTTP_HOST="127.0.0.1")
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        # The CSRF cookie a browser would have (a secret of Django's form): the lane
        # posts at once, so the batch measures decisions, not the queue page.
        token = get_random_string(CSRF_SECRET_LENGTH, allowed_chars=CSRF_ALLOWED_CHARS)
        lanes.append(
            {
                "cookies": {settings.SESSION_COOKIE_NAME: cookie, settings.CSRF_COOKIE_NAME: token},
                "csrftoken": token,
                "plans": plans[i::reviewers],
            }
        )
    return lanes


def run_path(
    d: Any, backends: Backends, path: str, n: int, tag: str, floor: dict[str, float]
) -> dict:
    """One batch of ``n`` plans down ``path``; CPU seconds per group, per step where the
    path has more than one, gross and net of ``floor`` (ms per second each group takes
    idle, times the batch's wall time)."""
    contacts = d.contacts(n)
    job = {"mode": "prepare", "contacts": contacts, "tag": tag, "concurrency": 8}
    if path == "policy":
        job["domain"] = "old.test"  # the contacts' own domain: routine-email approves
    steps: dict[str, dict] = {}
    backends.exclude = {own_backend_pid()}
    commits0 = backends.commits()
    meter = meter_for(d, backends)
    meter.start()
    began = time.monotonic()
    plans = d.load(job)["plans"]
    if path == "decided":
        steps["submit"] = meter.stop()
        lanes = reviewer_lanes(plans)
        meter = meter_for(d, backends)
        meter.start()
        began = time.monotonic()
        decided = d.load({"mode": "decide", "lanes": lanes})
        if any(int(code) >= 400 for code in decided["http"]):
            raise RuntimeError(f"decisions failed: {decided['http']}")
    ids = [p["id"] for p in plans]
    statuses, reached = settle(ids, 120 + n, terminal=path != "submit")
    backends.exclude.add(own_backend_pid())
    last = meter.stop()
    if path == "decided":
        steps["decide_execute"] = last
        total = {k: steps["submit"][k] + last[k] for k in last}
    else:
        total = last
    # Statistics reach pg_stat_database when a backend flushes them (within ~10 s idle).
    time.sleep(11)
    commits = backends.commits() - commits0
    return {
        "plans": len(plans),
        "statuses": statuses,
        "cpu_seconds": total,
        "steps_cpu_seconds": steps,
        "steps_ms_per_plan": {k: per_plan(net_of(v, floor), len(plans)) for k, v in steps.items()},
        "ms_per_plan_gross": per_plan(total, len(plans)),
        "ms_per_plan": per_plan(net_of(total, floor), len(plans)),
        "xact_per_plan": commits / max(len(plans), 1),
        # Plans a second through the timed step: submissions (submit), effects from the
        # first decision posted (decided), effects from the first submission (policy).
        "per_second": len(plans) / max(reached - began, 1e-6),
    }


def net_of(seconds: dict[str, float], floor: dict[str, float]) -> dict[str, float]:
    return {g: max(0.0, seconds[g] - floor.get(g, 0.0) * seconds["wall"] / 1000) for g in GROUPS}


def per_plan(seconds: dict[str, float], plans: int) -> dict[str, float]:
    out = {g: seconds[g] * 1000 / max(plans, 1) for g in GROUPS}
    out["total"] = sum(out[g] for g in GROUPS)
    return out


def idle(d: Any, backends: Backends, seconds: float = 5.0) -> dict[str, float]:
    """Milliseconds of CPU per second each group takes with no plan moving: the floor
    under every batch (the workers' beat and sealer, Redis's other clients)."""
    backends.exclude = {own_backend_pid()}
    meter = meter_for(d, backends)
    meter.start()
    time.sleep(seconds)
    got = meter.stop()
    return {g: got[g] * 1000 / got["wall"] for g in GROUPS}


# --- queries per step ---------------------------------------------------------------------


@contextlib.contextmanager
def held_wakeups():
    """Wake-ups collected instead of sent, so the probe's plans wait for the probe."""
    from actions.lib import dispatch

    original = dispatch.publish
    dispatch.publish = lambda *args, **kwargs: True
    try:
        yield
    finally:
        dispatch.publish = original


def count_queries(d: Any, rounds: int = 4) -> dict[str, Any]:
    """Queries of each step through the web's middleware and views (Django's test
    client) and the worker's ``execution_run``, in this process; the median of the
    rounds after the first (which fills caches)."""
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from executors.services import execution_run

    agent = Client(HTTP_HOST="127.0.0.1")
    reviewer = Client(HTTP_HOST="127.0.0.1")
    reviewer.force_login(d.reviewer)
    counted: dict[str, list[int]] = {}
    texts: dict[str, list[str]] = {}

    def count(step: str, call: Callable[[], Any]) -> Any:
        with CaptureQueriesContext(connection) as ctx:
            result = call()
        counted.setdefault(step, []).append(len(ctx.captured_queries))
        texts[step] = [statement(q["sql"]) for q in ctx.captured_queries]
        return result

    def submit(cid: str, email: str) -> dict:
        body = {
            "action": "update_contact_email",
            "input": {"contact_id": cid, "email": email},
            "reason": "bench cpu",
        }
        response = agent.post(
            "/api/v1/plans",
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {d.token}",
        )
        if response.status_code != 201:
            raise RuntimeError(f"probe submit: {response.status_code} {response.content[:300]}")
        return response.json()

    settings.COUNTERSIGN_WORKER_KEY_FILE = str(d.key_file)
    try:
        with held_wakeups():
            for i, cid in enumerate(d.contacts(rounds * 2)):
                if i % 2:
                    plan = count("submit (policy)", lambda c=cid: submit(c, f"q{c}@old.test"))
                    count("execute (policy)", lambda p=plan: execution_run(plan_id=p["id"]))
                    continue
                plan = count("submit", lambda c=cid: submit(c, f"q{c}@bench.test"))
                response = count(
                    "decide",
                    lambda p=plan: reviewer.post(
                        f"/plans/{p['id']}/decide",
                        {"decision": "approve", "fingerprint": p["fingerprint"]},
                    ),
                )
                if response.status_code >= 400:
                    raise RuntimeError(f"probe decide: {response.status_code}")
                count("execute", lambda p=plan: execution_run(plan_id=p["id"]))
    finally:
        settings.COUNTERSIGN_WORKER_KEY_FILE = ""
    out: dict[str, Any] = {k: statistics.median(v[1:] or v) for k, v in counted.items()}
    out["statements"] = texts  # the last round's, to see which repeat or could be joined
    return out


def statement(sql: str, limit: int = 200) -> str:
    """A query's SQL with its literals left out (the probe's ids, addresses and times are
    of no interest), cut to ``limit`` characters."""
    sql = re.sub(r"'(?:[^']|'')*'", "'…'", sql)
    sql = re.sub(r"\b\d+(\.\d+)?\b", "N", sql)
    return sql if len(sql) <= limit else sql[: limit - 1] + "…"


def steps_of(path: str, queries: dict[str, float]) -> dict[str, float]:
    names = {
        "submit": ["submit"],
        "decided": ["submit", "decide", "execute"],
        "policy": ["submit (policy)", "execute (policy)"],
    }[path]
    return {n: queries[n] for n in names if n in queries}


def _queries_only(queries: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in queries.items() if k != "statements"}


# --- profiles -----------------------------------------------------------------------------


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profiled(d: Any, backends: Backends, n: int, out_dir: Path) -> dict:
    """A batch of each executing path again, with py-spy on the web and worker
    processes; summaries written under ``out_dir``."""
    binary = py_spy()
    if not binary:
        say("CPU: py-spy not found; no profiles (pip install py-spy)")
        return {}
    targets = {"web": [d.web.proc.pid], "worker": [w.proc.pid for w in d.workers]}
    spies: list[tuple[str, Path, subprocess.Popen]] = []
    for group, pids in targets.items():
        for pid in pids:
            raw = d.work / f"spy-{group}-{pid}.txt"
            command = [binary, "record", "--pid", str(pid), "--subprocesses", "--gil"]
            command += ["--rate", str(SPY_RATE), "--full-filenames"]
            command += ["--format", "raw", "--output", str(raw)]
            log = (d.work / f"spy-{group}-{pid}.log").open("wb")
            spies.append((group, raw, subprocess.Popen(command, stdout=log, stderr=log)))
    time.sleep(2.0)  # attached
    plans = 0
    try:
        for path in ("decided", "policy"):
            plans += run_path(d, backends, path, n, f"y{path[0]}", {})["plans"]
    finally:
        for _, _, spy in spies:
            with contextlib.suppress(ProcessLookupError):
                spy.send_signal(signal.SIGINT)
        for _, _, spy in spies:
            try:
                spy.wait(60)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait(5)
    from bench.spy import summarize

    keep = os.environ.get("BENCH_SPY_DIR")  # the raw stacks, to fold again by hand
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for _, raw, _ in spies:
            if raw.exists():
                shutil.copy(raw, keep)

    files = {}
    for group in targets:
        raws = [raw for g, raw, _ in spies if g == group and raw.exists()]
        target = out_dir / f"profile-cpu-{group}.txt"
        target.write_text(summarize(raws, group, plans, ROOT, rate=SPY_RATE))
        files[group] = str(target.relative_to(ROOT)) if target.is_relative_to(ROOT) else str(target)
    return files


# --- the scenario ---------------------------------------------------------------------------


def cpu_per_plan(d: Any, quick: bool, out_dir: Path, profile: bool = True) -> dict:
    """The scenario: idle floor, the three paths, queries per step, then profiles."""
    from django.db import connection

    from bench.procs import database_url

    n = BATCH["quick" if quick else "full"]
    admin = database_url({**connection.settings_dict, "NAME": "postgres"})
    backends = Backends(admin, d.db_name, own_backend_pid)
    try:
        # Every web process and worker has served each path once before it is timed
        # (first requests compile the policies, fill caches, open connections).
        for path in PATHS:
            run_path(d, backends, path, 12, f"w{path[0]}", {})
        floor = idle(d, backends)
        out: dict = {"batch": n, "idle_ms_per_second": floor}
        queries = count_queries(d)
        out["queries_per_step"] = _queries_only(queries)
        out["query_statements"] = queries["statements"]
        out["paths"] = {}
        for path in PATHS:
            say(f"CPU per plan: {path}, {n} plans")
            got = run_path(d, backends, path, n, f"u{path[0]}", floor)
            got["queries_per_step"] = steps_of(path, queries)
            out["paths"][path] = got
            ms = got["ms_per_plan"]
            say(
                f"  web {ms['web']:.1f}, workers {ms['workers']:.1f}, PostgreSQL "
                f"{ms['postgresql']:.1f}, Redis {ms['redis']:.1f} = {ms['total']:.1f} ms per plan, "
                f"{got['per_second']:.0f} plans/s"
            )
        if profile:
            say("CPU per plan: profiles (py-spy on the web and worker processes)")
            out["profiles"] = profiled(
                d, backends, PROFILE_BATCH["quick" if quick else "full"], out_dir
            )
    finally:
        backends.close()
    return out


def carried(path: Path, measuring: bool) -> dict:
    """What results.json keeps across runs: the first recorded run (the "before"), and
    the last one when this run does not measure."""
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    keys = [BEFORE_KEY] if measuring else [BEFORE_KEY, RESULT_KEY]
    return {k: previous[k] for k in keys if k in previous}


def record(results: dict, measured: dict) -> None:
    """This run's figures; the first ever recorded is kept as the "before"."""
    measured["measured"] = results["when"]
    measured["measured_quick"] = results.get("quick")
    results[RESULT_KEY] = measured
    results.setdefault(BEFORE_KEY, measured)


# --- the report -----------------------------------------------------------------------------


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _queries(steps: dict[str, float], before: dict[str, float] | None = None) -> str:
    """``submit 9 + decide 16 (before 17)``: the before's count where it differs."""
    before = before or {}
    parts = []
    for k, v in steps.items():
        was = before.get(k)
        parts.append(f"{k} {v:g}" + (f" (before {was:g})" if was is not None and was != v else ""))
    return " + ".join(parts) or "–"


def report_section(r: dict) -> str:
    """The "CPU per plan" section of docs/benchmarks.md ('' before any run)."""
    before, after = r.get(BEFORE_KEY), r.get(RESULT_KEY)
    if not before:
        return ""
    if after and after.get("measured") == before.get("measured"):
        after = None
    latest = after or before
    rows = []
    for path in PATHS:
        now = latest["paths"].get(path)
        if not now:
            continue
        ms = now["ms_per_plan"]
        b = before["paths"].get(path, {})
        rows.append(
            [
                path,
                _ms(ms["web"]),
                _ms(ms["workers"]),
                _ms(ms["postgresql"]),
                _ms(ms["redis"]),
                _ms(ms["total"]),
                _queries(now.get("queries_per_step", {}), b.get("queries_per_step")),
                _ms(b.get("ms_per_plan", {}).get("total")),
                _ms(after["paths"][path]["ms_per_plan"]["total"] if after else None),
                _rate(now.get("per_second")),
            ]
        )
    header = ["path", "web ms/plan", "worker ms/plan", "PostgreSQL ms/plan", "Redis ms/plan"]
    header += ["total", "queries per step", "total before", "total after", "plans/s"]
    idle_ms = latest.get("idle_ms_per_second", {})
    code = f"the code at {before['code']}, " if before.get("code") else ""
    which = (
        f"before: {code}{before.get('measured')}, after: {after.get('measured')}"
        if after
        else f"before: {before.get('measured')}; no later run yet"
    )
    return f"""## CPU per plan

Batches of {latest["batch"]} plans per path (`make bench BENCH_ARGS="--only CPU"`;
bench/cpu.py): *submit* leaves each plan awaiting a person; *decided* adds a person's
approval over HTTP, the workers' execution and verification, and the sealing of the
audit trail; *policy* submits an address in the contact's own domain, which the demo's
routine-email policy approves, then executes and seals. Milliseconds of CPU per plan
(utime + stime from /proc, summed over the batch) of the web processes, the Celery
workers, the PostgreSQL backends serving the run's database and the Redis server (shared
with anything else on it: an upper bound). The columns show the latest run ({which});
queries per step are counted with Django's CaptureQueriesContext over the same views
and services in the bench process (no pg_stat_statements on the server).

{table(header, rows)}

*plans/s* is the pace of the timed step with 8 agents, 4 reviewers and 2 workers
(`--concurrency=1` each) on this machine: submissions a second (submit), effects a second
from the first decision posted to the last plan settled (decided), and effects a second
from the first submission to the last write verified (policy, no person in the loop).

With nothing moving, the groups take (ms of CPU per second): web {_ms(idle_ms.get("web"))},
workers {_ms(idle_ms.get("workers"))}, PostgreSQL {_ms(idle_ms.get("postgresql"))}, Redis
{_ms(idle_ms.get("redis"))}; that floor, over each batch's seconds, is taken out of the
figures above (results.json keeps them gross too, as `ms_per_plan_gross`).
Profiles of the real processes (py-spy): profile-cpu-web.txt, profile-cpu-worker.txt.
"""
