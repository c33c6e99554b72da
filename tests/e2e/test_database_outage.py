"""The database goes away under load, and comes back.

A private PostgreSQL cluster (initdb and pg_ctl on a free loopback port, in a temporary
directory; the machine's shared server is never touched) is migrated with the product's
``migrate``, and a web server and a worker (with the sweeper's beat) run against it, with
the demo upstream of the suite. Three agents submit and long-poll while a write is at the
upstream, held there by a delay fault; the cluster is stopped (``-m immediate``: a crash)
while the upstream still holds the write, and started again a few seconds later.

While it is down: the API answers 503 with Retry-After and a problem document (a long-poll
too, at once), MCP answers 503 with Retry-After and a JSON-RPC error that says when to
try again (in both protocol eras), a page answers the styled 503. After: every plan an
agent was given is there, the write in flight is recorded ``completed`` by the worker
that holds the upstream's answer (the lease is ten minutes here, so only that retry can
explain it), a plan approved before the outage is executed, each plan wrote at most
once, and the logs hold a bounded number of lines for the outage, whatever the number of
requests that met it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from clients.countersign_client import Countersign
from demo.processes import ROOT, base_env, free_port, start_web, start_worker, wait_ready
from tests.conftest import READ_TOKEN, WRITE_TOKEN, log_leaks
from tests.e2e.support import ReviewerClient, eventually

pytestmark = pytest.mark.e2e

# The product's migrate, then the demo catalog, an agent and a reviewer, in one process.
SETUP = """
import django, json, sys
django.setup()
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from actions.catalog import load_catalog
from actions.models import Connector, Credential
from actions.services import agent_create, credential_set
load_catalog(open("demo/catalog.yaml").read(), base_urls={"demo": sys.argv[1]}, base_dir="demo")
connector = Connector.objects.get(name="demo")
credential_set(connector=connector, role=Credential.Role.READ, secret={"token": sys.argv[2]})
credential_set(connector=connector, role=Credential.Role.WRITE, secret={"token": sys.argv[3]})
_, token = agent_create(name="outage-agent", action_names=["update_contact_email"], active=True)
user = get_user_model().objects.create_user(username="rita", password="pw-rita")
user.user_permissions.add(Permission.objects.get(codename="review_plan"))
print(json.dumps({"token": token}))
"""


def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PrivateCluster:
    """A PostgreSQL cluster of the test's own; as root, its programs run as ``postgres``."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="countersign-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.root, "postgres", "postgres")

    def _run(self, *args: str) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root}"
            " -c fsync=off -c max_connections=50"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                  "-w", "start")  # fmt: skip

    def crash(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def remove(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            pass  # not running
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"


@pytest.fixture
def cluster():
    bindir = _postgres_bin()
    if bindir is None:
        pytest.fail("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
    pg = PrivateCluster(bindir)
    pg.init()
    pg.start()
    yield pg
    pg.remove()


@pytest.fixture
def deployment(cluster, upstream, worker_keys, tmp_path, canary):
    """The private cluster, migrated and loaded; a web server and a worker on it."""
    import psycopg
    from django.conf import settings

    with psycopg.connect(cluster.url("postgres"), autocommit=True) as conn:
        conn.execute("CREATE DATABASE countersign")
    queue = f"countersign-outage-{os.getpid()}"
    env = base_env(
        cluster.url("countersign"),
        settings.CELERY_BROKER_URL,
        queue,
        worker_keys["public"],
        extra={
            "COUNTERSIGN_RATE_LIMIT": "1000000/minute",
            "COUNTERSIGN_NOTIFY_CHANNEL": f"{queue}:plans",
            # Only the worker's own retry can record the write in flight in time.
            "COUNTERSIGN_EXECUTION_LEASE_SECONDS": "600",
            "COUNTERSIGN_SWEEP_SECONDS": "1",
            "COUNTERSIGN_REQUEUE_AFTER_SECONDS": "3",
        },
    )
    run = {"cwd": ROOT, "env": env, "check": True, "capture_output": True, "text": True}
    out = subprocess.run(
        [sys.executable, "-c", SETUP, upstream.url, READ_TOKEN, WRITE_TOKEN], timeout=240, **run
    ).stdout
    token = json.loads(out.strip().splitlines()[-1])["token"]
    worker_env = {**env, "COUNTERSIGN_WORKER_KEY_FILE": worker_keys["private_file"]}
    # Both start at once; the worker is waited for after the web server is up.
    worker = start_worker(
        worker_env,
        tmp_path,
        "outage-worker",
        concurrency=2,
        beat_schedule=tmp_path / "beat",
        wait=False,
    )
    web = None
    try:
        web, url = start_web(env, tmp_path, name="outage-web")
        wait_ready(worker, timeout=90)
    except BaseException:
        worker.stop()
        if web is not None:
            web.stop()
        raise
    # Every answer of this web server is read for secrets, addresses and stack traces.
    canary.ours.add(url)
    canary.internal_urls.add(upstream.url)
    yield {"url": url, "token": token, "web": web, "worker": worker}
    worker.stop()
    web.stop()


def _propose(http: httpx.Client, contact: str, email: str) -> httpx.Response:
    return http.post(
        "/api/v1/plans",
        json={"action": "update_contact_email", "input": {"contact_id": contact, "email": email}},
    )


class Agents:
    """A few agents proposing and long-polling all along; every plan they were given."""

    def __init__(self, url: str, token: str, count: int = 3) -> None:
        self.url, self.token = url, token
        self.given: set[str] = set()
        self.statuses: list[int] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(n,)) for n in range(count)]

    def __enter__(self) -> Agents:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def _run(self, n: int) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=20) as http:
            i = 0
            while not self.stop.is_set():
                i += 1
                try:
                    answer = _propose(http, "c-1001", f"agent{n}-{i}@new.example")
                    statuses = [answer.status_code]
                    if answer.status_code == 201:
                        plan_id = answer.json()["id"]
                        with self.lock:
                            self.given.add(plan_id)
                        polled = http.get(f"/api/v1/plans/{plan_id}", params={"wait": 0.5})
                        statuses.append(polled.status_code)
                except httpx.HTTPError:
                    statuses = [0]
                with self.lock:
                    self.statuses += statuses
                if 503 in statuses:
                    self.stop.wait(0.2)  # a shorter wait than Retry-After: more load


def _lines(path: Path, start: int) -> list[str]:
    """The lines logged since ``start``, but the INFO lines of ordinary work (tasks
    received and finished, plans moving): what an outage adds is warnings and errors."""
    with open(path, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("utf-8", "replace")
    return [line for line in text.splitlines() if " INFO " not in line and "INFO/" not in line]


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def test_the_database_goes_away_and_comes_back(cluster, deployment, upstream):
    url, token = deployment["url"], deployment["token"]
    agent = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    rita = ReviewerClient(url, "rita", "pw-rita")

    # A plan approved and executed before the outage, and one whose write the upstream
    # holds (2 s after it applied it) when the database goes away.
    before = _propose(agent, "c-1003", "alan@new.example").json()
    rita.decide(before["id"], "approve")
    in_flight = _propose(agent, "c-1002", "grace@new.example").json()
    upstream.add_fault(method="PATCH", path_prefix="/contacts/c-1002", delay=2, apply=True)
    eventually(
        lambda: agent.get(f"/api/v1/plans/{before['id']}").json()["status"] == "completed",
        timeout=20,
        what="the first plan executed",
    )
    rita.decide(in_flight["id"], "approve")

    with Agents(url, token) as agents:
        eventually(lambda: len(agents.given) >= 3, timeout=20, what="agents under way")
        eventually(
            lambda: any(w["path"] == "/contacts/c-1002" for w in upstream.writes()),
            timeout=20,
            what="the write at the upstream",
        )
        marks = {p: p.log_path.stat().st_size for p in (deployment["web"], deployment["worker"])}
        cluster.crash()
        down_at = time.monotonic()

        # The API: 503, Retry-After, a problem document, for reads, writes and long-polls.
        actions = agent.get("/api/v1/actions")
        assert actions.status_code == 503, actions.text
        assert actions.headers["Retry-After"] == "2"
        assert actions.headers["Content-Type"] == "application/problem+json"
        problem = actions.json()
        assert problem["type"] == "urn:countersign:problem:database-unavailable"
        assert problem["status"] == 503
        assert "Traceback" not in actions.text
        proposed = _propose(agent, "c-1001", "down@new.example")
        assert proposed.status_code == 503
        assert proposed.headers["Retry-After"] == "2"
        # A long-poll is answered, not held for its 30 s (the client gives up after 15).
        polled = agent.get(f"/api/v1/plans/{in_flight['id']}", params={"wait": 30}, timeout=15)
        assert polled.status_code == 503
        assert polled.headers["Retry-After"] == "2"

        # MCP, in the handshake era and in 2026-07-28: 503 with Retry-After, and the
        # JSON-RPC error says "unavailable" with when to try again.
        from approvals.mcp.protocol import UNAVAILABLE

        for version in ("2025-11-25", "2026-07-28"):
            answer = httpx.post(
                url + "/mcp",
                json={"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}},
                headers={
                    **MCP_HEADERS,
                    "Authorization": f"Bearer {token}",
                    "MCP-Protocol-Version": version,
                },
                timeout=30,
            )
            assert answer.status_code == 503, answer.text
            assert answer.headers["Retry-After"] == "2"
            error = answer.json()["error"]
            assert answer.json()["id"] == 7
            assert error["code"] == UNAVAILABLE
            assert error["data"]["type"] == "urn:countersign:problem:database-unavailable"
            assert error["data"]["retry_after"] == 2

        # A page: the product's own, saying so, 503.
        page = rita.http.get("/plans/")
        assert page.status_code == 503
        assert page.headers["Retry-After"] == "2"
        assert "Temporarily unavailable" in page.text
        assert "/static/css/app.css" in page.text
        assert "Server Error (500)" not in page.text

        # Load goes on against the outage for a while.
        eventually(
            lambda: agents.statuses.count(503) >= 30, timeout=20, what="agents meeting the outage"
        )
        met = agents.statuses.count(503)
        # The cluster comes back 4 s after the crash; meanwhile the agents' client follows
        # the write in flight, riding out the 503s as Retry-After asks.
        restart = threading.Timer(max(0.0, 4 - (time.monotonic() - down_at)), cluster.start)
        restart.start()
        try:
            with Countersign(url, token) as client:
                done = client.wait(in_flight["id"], timeout=45)
        finally:
            restart.join()

        # Back: the write in flight is recorded completed by the worker that held it.
        assert done.status == "completed", done
        assert done.outcome.request_sent is True
        eventually(
            lambda: agent.get("/api/v1/actions").status_code == 200, timeout=15, what="API back"
        )
        assert rita.http.get("/plans/").status_code == 200
    recovered = time.monotonic()

    # Nothing lost: every plan an agent was given is there, readable.
    for plan_id in agents.given:
        assert agent.get(f"/api/v1/plans/{plan_id}").status_code == 200
    assert 503 in agents.statuses and 500 not in agents.statuses, sorted(set(agents.statuses))
    # At most one write per plan: the upstream saw one PATCH of each contact executed.
    writes = [(w["method"], w["path"]) for w in upstream.writes()]
    assert writes.count(("PATCH", "/contacts/c-1002")) == 1
    assert writes.count(("PATCH", "/contacts/c-1003")) == 1
    assert upstream.state()["contacts"]["c-1002"]["email"] == "grace@new.example"

    # The logs: a bounded number of lines for the outage, no traceback, however many
    # requests and tasks met it.
    web_lines = _lines(deployment["web"].log_path, marks[deployment["web"]])
    worker_lines = _lines(deployment["worker"].log_path, marks[deployment["worker"]])
    assert not [line for line in web_lines + worker_lines if "Traceback" in line]
    assert any("the database cannot be reached" in line for line in web_lines), web_lines
    assert any("the database is reachable again" in line for line in web_lines), web_lines
    assert any("recorded once the database was back" in line for line in worker_lines)
    assert len(web_lines) <= 12, "\n".join(web_lines)
    assert len(worker_lines) <= 40, "\n".join(worker_lines)
    assert met >= 30
    logs = deployment["web"].log() + deployment["worker"].log()
    assert log_leaks(logs, upstream.issued_tokens()) == []
    print(
        f"outage: {met} agent requests answered 503; {len(web_lines)} web and "
        f"{len(worker_lines)} worker log lines; recovered {recovered - down_at:.1f} s after "
        "the crash"
    )
