"""Operating Countersign, over real processes: two uvicorn web servers and one Celery
worker (with the sweeper's beat) sharing one metrics directory, JSON log lines, a queue of
their own (so the session's live worker is none of theirs), and a real Prometheus server.

* metrics from the two web servers and the worker add up: after a known number of plans
  one scrape of one server shows exactly that many proposals, approvals and outcomes;
* ``grep <correlation id>`` over the three logs follows each plan from its submission to
  its effect, and no line holds a secret;
* ``/readyz`` is 503 as soon as the worker (and with it the sweeper) has stopped, and 200
  again once it is back;
* Prometheus scrapes ``/metrics`` with the bearer token, loads the example alert rules of
  docs/deploy/, and its query API answers with the series.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from demo.processes import ROOT, Process, free_port, start_web, start_worker, wait_ready
from tests.conftest import log_leaks
from tests.e2e.support import AgentClient, ReviewerClient, eventually
from tests.e2e.test_multiprocess import _contacts
from tests.security.test_canary_db import use_oauth2_credentials

pytestmark = pytest.mark.e2e

METRICS_TOKEN = "scrape-" + uuid.uuid4().hex
PLANS = 6  # half through each web server
RULES = ROOT / "docs" / "deploy" / "prometheus" / "alerts.yml"


@pytest.fixture(scope="module")
def ops(live_env, live_logs, worker_keys, tmp_path_factory):
    metrics_dir = tmp_path_factory.mktemp("metrics")
    env = {
        **live_env,
        "COUNTERSIGN_QUEUE": live_env["COUNTERSIGN_QUEUE"] + "-ops",
        "COUNTERSIGN_RATE_LIMIT": "",
        "COUNTERSIGN_HEALTH_RATE_LIMIT": "",  # the test polls /readyz
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "COUNTERSIGN_LOG_FORMAT": "json",
        "COUNTERSIGN_SWEEP_SECONDS": "1",
        "COUNTERSIGN_HEARTBEAT_SECONDS": "1",
        "COUNTERSIGN_METRICS_TOKEN": METRICS_TOKEN,
        # No address may scrape without the token (the loopback would by default).
        "COUNTERSIGN_METRICS_ALLOW": "192.0.2.0/24",
    }
    worker_env = {**env, "COUNTERSIGN_WORKER_KEY_FILE": worker_keys["private_file"]}
    beat_schedule = tmp_path_factory.mktemp("beat") / "schedule"
    state: dict = {"procs": []}

    def start_the_worker() -> Process:
        proc = start_worker(
            worker_env, live_logs, name="ops-worker", beat_schedule=beat_schedule, wait=False
        )
        state["procs"].append(proc)
        state["worker"] = proc
        return proc

    try:
        state["webs"] = []
        for name in ("ops-web-a", "ops-web-b"):
            proc, url = start_web(env, live_logs, name=name)
            state["procs"].append(proc)
            state["webs"].append(url)
        wait_ready(start_the_worker())
        state["start_worker"] = start_the_worker
        state["logs"] = live_logs
        state["env"] = env
        yield state
    finally:
        for proc in reversed(state["procs"]):
            proc.stop(timeout=15)


@pytest.fixture
def cluster(ops, canary, transactional_db):
    for url in ops["webs"]:
        canary.ours.add(url)  # every response of theirs is checked for leaks
    return ops


def readyz(url: str) -> tuple[int, dict]:
    response = httpx.get(url + "/readyz", timeout=10)
    return response.status_code, response.json()


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    response = httpx.get(
        url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10
    )
    assert response.status_code == 200, response.text
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def delta(after: dict, before: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def upstream_total(found: dict, role: str, status_class: str) -> float:
    return sum(
        value
        for (name, labels), value in found.items()
        if name == "countersign_upstream_requests_total"
        and dict(labels).get("role") == role
        and dict(labels).get("status_class") == status_class
    )


def log_entries(ops, name: str) -> list[dict]:
    text = (ops["logs"] / f"{name}.log").read_text(errors="replace")
    entries = []
    for line in text.splitlines():
        if line.startswith("{"):
            entries.append(json.loads(line))  # every JSON-looking line is one object
    return entries


def test_metrics_add_up_and_logs_follow_each_plan(
    cluster, catalog, agent_token, reviewer, upstream
):
    use_oauth2_credentials()
    web_a, web_b = cluster["webs"]
    eventually(lambda: readyz(web_a)[0] == 200, timeout=30, interval=0.2, what="ready")
    contacts = _contacts(upstream, PLANS)
    before = scrape(web_a)
    agents = [AgentClient(web_a, agent_token), AgentClient(web_b, agent_token)]
    reviewers = [ReviewerClient(web, "rita", "pw-rita") for web in (web_a, web_b)]
    plans = []
    for i, contact in enumerate(contacts):
        plans.append(agents[i % 2].propose(contact_id=contact, email=f"{contact}@ops.test"))
    for i, plan in enumerate(plans):
        reviewers[(i + 1) % 2].decide(plan["id"], "approve")
    done = [agents[0].wait_for(plan["id"]) for plan in plans]
    assert [plan["status"] for plan in done] == ["completed"] * PLANS
    # A waiting agent is counted while it waits (a long-poll on a settled plan returns
    # at once, so one on a plan that will wait: a new proposal, left undecided).
    waiting = agents[1].propose(contact_id=contacts[0], email="later@ops.test")

    after = scrape(web_a)  # one server; the other and the worker wrote their counts too
    action = {"action": "update_contact_email", "consequence_class": "reversible"}
    assert delta(after, before, "countersign_plans_proposed_total", **action) == PLANS + 1
    assert delta(after, before, "countersign_decisions_total", decision="approve") == PLANS
    assert delta(after, before, "countersign_outcomes_total", state="completed") == PLANS
    assert delta(after, before, "countersign_decision_to_effect_seconds_count") == PLANS
    assert delta(after, before, "countersign_submit_seconds_count", result="created") == PLANS + 1
    writes = upstream_total(after, "write", "2xx") - upstream_total(before, "write", "2xx")
    assert writes == PLANS  # one write per plan, counted in the worker
    # Previews (both web servers) and revalidations and read-backs (the worker).
    assert upstream_total(after, "read", "2xx") - upstream_total(before, "read", "2xx") >= 3 * PLANS
    assert after[("countersign_plans_awaiting_decision", ())] == 1
    assert after[("countersign_workers_alive", ())] == 1
    assert after[("countersign_vault_locked", ())] == 0
    assert ("countersign_queue_depth", ()) in after
    text = httpx.get(web_b + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
    for plan in plans:
        assert plan["id"] not in text
    assert METRICS_TOKEN not in text
    assert httpx.get(web_b + "/metrics").status_code == 401  # no token, address not allowed

    # --- the logs: one JSON object per line; one grep follows a plan ------------------
    names = ("ops-web-a", "ops-web-b", "ops-worker")
    entries = {name: log_entries(cluster, name) for name in names}
    tokens = upstream.issued_tokens()
    assert upstream.token_requests() >= 2  # OAuth2 tokens in the web servers and the worker
    for name in names:
        text = (cluster["logs"] / f"{name}.log").read_text(errors="replace")
        assert log_leaks(text, tokens) == [], name
    for plan in done:
        cid = plan["outcome"]["correlation_id"]
        about = {name: [e for e in entries[name] if cid in json.dumps(e)] for name in names}
        lines = [e for found in about.values() for e in found]
        assert all(
            e["plan_id"] == plan["id"]
            and e["correlation_id"] == cid
            and e["action"] == "update_contact_email"
            and e["agent"]
            for e in lines
        ), lines
        messages = " | ".join(e["message"] for e in lines)
        submitted = about[names[done.index(plan) % 2]]
        assert any("proposed" in e["message"] for e in submitted), messages
        assert any("awaiting_approval -> approved" in e["message"] for e in lines), messages
        worker = " | ".join(e["message"] for e in about["ops-worker"])
        assert "approved -> executing" in worker and "executing -> completed" in worker, worker
    levels = Counter(e["level"] for name in names for e in entries[name])
    assert levels["INFO"] > 0

    # --- a long-poll held on web b is counted in web a's scrape, and leaves it ---------
    with ThreadPoolExecutor(1) as pool:
        poll = pool.submit(agents[1].http.get, f"/plans/{waiting['id']}", params={"wait": 25})
        eventually(
            lambda: scrape(web_a).get(("countersign_longpoll_waiters", ())) == 1,
            timeout=20,
            interval=0.2,
            what="the waiter counted",
        )
        assert agents[0].http.post(f"/plans/{waiting['id']}/cancel").status_code == 200
        assert poll.result(timeout=30).json()["status"] == "cancelled"
    eventually(
        lambda: scrape(web_a).get(("countersign_longpoll_waiters", ())) == 0,
        timeout=20,
        interval=0.2,
        what="the waiter gone",
    )
    after = scrape(web_a)
    assert delta(after, before, "countersign_decisions_total", decision="cancel") == 1
    for client in (*agents, *reviewers):
        client.close()


def test_readyz_follows_the_worker(cluster, catalog):
    web = cluster["webs"][1]
    status, body = eventually(
        lambda: (r := readyz(web))[0] == 200 and r, timeout=30, interval=0.2, what="ready"
    )
    assert [c["name"] for c in body["checks"]] == [
        "database",
        "broker",
        "migrations",
        "sweeper",
        "workers",
    ]
    cluster["worker"].stop(timeout=20)  # a warm shutdown, as systemd stops it
    status, body = readyz(web)
    assert status == 503
    checks = {c["name"]: c for c in body["checks"]}
    assert checks["workers"]["ok"] is False and checks["database"]["ok"]
    # The sweeper ran inside that worker: it goes stale after three of its periods.
    eventually(
        lambda: not {c["name"]: c for c in readyz(web)[1]["checks"]}["sweeper"]["ok"],
        timeout=30,
        interval=0.2,
        what="the sweeper seen as stale",
    )
    cluster["start_worker"]()
    status, body = eventually(
        lambda: (r := readyz(web))[0] == 200 and r, timeout=60, interval=0.2, what="ready again"
    )
    assert all(c["ok"] for c in body["checks"])


def test_a_prometheus_server_scrapes_the_metrics(cluster, catalog, tmp_path):
    # Never skipped: a missing server would hide the scrape. .ci/run installs it.
    assert shutil.which("prometheus"), "needs Debian's prometheus package (.ci/run installs it)"
    web_a = cluster["webs"][0]
    host = web_a.removeprefix("http://")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n"
        "  - job_name: countersign\n"
        "    metrics_path: /metrics\n"
        f"    authorization: {{type: Bearer, credentials: '{METRICS_TOKEN}'}}\n"
        f"    static_configs: [{{targets: ['{host}']}}]\n"
    )
    if shutil.which("promtool"):
        checked = subprocess.run(
            ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    proc = Process(
        "prometheus",
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        {"PATH": "/usr/bin:/bin"},
        cluster["logs"],
    )
    api = f"http://127.0.0.1:{port}/api/v1"

    def query(expr: str) -> list[dict]:
        try:
            answer = httpx.get(api + "/query", params={"query": expr}, timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return []
        return answer.get("data", {}).get("result", [])

    try:
        up = eventually(lambda: query('up{job="countersign"} == 1'), timeout=60, interval=0.3)
        assert up[0]["metric"]["instance"] == host
        series = eventually(lambda: query("countersign_workers_alive"), timeout=30, interval=0.3)
        assert float(series[0]["value"][1]) >= 1
        assert query("countersign_vault_locked")[0]["value"][1] == "0"
        assert query("countersign_sweep_period_seconds")[0]["value"][1] == "1"
        rules = httpx.get(api + "/rules", timeout=5).json()["data"]["groups"]
        loaded = {rule["name"]: rule["health"] for g in rules for rule in g["rules"]}
        assert {
            "CountersignSweeperStale",
            "CountersignPlansStuckUnknown",
            "CountersignAwaitingPlanNearExpiry",
            "CountersignVaultLocked",
        } <= set(loaded)
        eventually(
            lambda: all(
                r["health"] == "ok"
                for g in httpx.get(api + "/rules", timeout=5).json()["data"]["groups"]
                for r in g["rules"]
            ),
            timeout=30,
            interval=0.3,
            what="every rule evaluated",
        )
    finally:
        proc.stop()


def test_a_worker_host_serves_its_counters_without_a_web_server(cluster, catalog):
    """manage.py serve_metrics: what a worker-only host runs for its scraper."""
    port = free_port()
    proc = Process(
        "ops-serve-metrics",
        [sys.executable, "manage.py", "serve_metrics", "--port", str(port)],
        cluster["env"],
        cluster["logs"],
    )
    url = f"http://127.0.0.1:{port}/metrics"

    def get(**headers):
        try:
            return httpx.get(url, headers=headers, timeout=5)
        except httpx.HTTPError:
            return None

    try:
        eventually(lambda: get() is not None, timeout=30, interval=0.2, what="serve_metrics")
        assert get().status_code == 401
        answer = get(Authorization=f"Bearer {METRICS_TOKEN}")
        assert answer.status_code == 200
        families = {f.name for f in text_string_to_metric_families(answer.text)}
        # The host's processes' metrics (those with no labels exist from the start, in
        # whatever order the tests run), not the database's.
        assert {"countersign_decision_to_effect_seconds", "countersign_longpoll_waiters"} <= (
            families
        )
        assert "countersign_plans_awaiting_decision" not in families
        assert METRICS_TOKEN not in answer.text
    finally:
        proc.stop()
