"""The production layout, small: two web servers and two Celery workers on one PostgreSQL
database and one Redis (issue 8; docs/deployment.md).

Plans are submitted through both web servers at once (each plan updates a contact
of its own on the demo upstream), approved concurrently by two reviewers posting the
review form to both servers as the plans arrive, and executed by two worker processes
that compete for the same queue. Each plan must end ``completed`` with exactly one
attempt, and the upstream must have received exactly one write for it: no plan lost,
none executed twice, whichever server took it and whichever worker ran it.

The web servers and workers are processes of their own (``demo/processes.py``), on a
queue of this test's own, so the session's ``live_worker`` (if running) never takes part.
The suite runs 200 plans; ``make soak`` runs 1,000 (``COUNTERSIGN_MP_PLANS``).
"""

from __future__ import annotations

import os
import queue
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from approvals.models import Approval, Attempt, Plan
from demo.processes import start_web, start_worker
from tests.conftest import WRITE_TOKEN
from tests.e2e.support import ReviewerClient, WorkerLogs, csrf_token, eventually

pytestmark = pytest.mark.e2e

PLANS = int(os.environ.get("COUNTERSIGN_MP_PLANS", "200"))
CONTACT_BASE = 700_000
CLIENTS = 8  # concurrent agent connections per web server


@pytest.fixture
def cluster(live_env, live_logs, worker_keys, canary):
    """2 web servers, 2 workers (concurrency 2), their own queue; stopped at the end."""
    env = {
        **live_env,
        "COUNTERSIGN_QUEUE": live_env["COUNTERSIGN_QUEUE"] + "-mp",
        "COUNTERSIGN_RATE_LIMIT": "",  # one agent submits all its plans in seconds
        # As docs/deployment.md advises: none kept under ASGI, persistent in workers.
        "COUNTERSIGN_DB_CONN_MAX_AGE": "0",
    }
    started = []
    try:
        webs = []
        for name in ("web-a", "web-b"):
            proc, url = start_web(env, live_logs, name=name)
            started.append(proc)
            webs.append(url)
            canary.ours.add(url)  # their responses are checked like every live server's
        worker_env = {
            **env,
            "COUNTERSIGN_WORKER_KEY_FILE": worker_keys["private_file"],
            "COUNTERSIGN_DB_CONN_MAX_AGE": "60",
        }
        workers = [
            start_worker(worker_env, live_logs, name=f"mp-worker-{i}", concurrency=2, wait=False)
            for i in range(2)
        ]
        started += workers
        yield {"webs": webs, "workers": workers, "env": env}
    finally:
        for proc in reversed(started):
            proc.stop(timeout=15)


def _contacts(upstream, n: int) -> list[str]:
    ids = [f"c-{CONTACT_BASE + i}" for i in range(n)]

    def put(chunk: list[str]) -> None:
        with httpx.Client(
            base_url=upstream.url,
            headers={"Authorization": f"Bearer {WRITE_TOKEN}", "If-None-Match": "*"},
            timeout=10,
        ) as http:
            for cid in chunk:
                body = {"name": cid, "email": f"{cid}@old.test", "workspace": "ws-blue"}
                http.put(f"/contacts/{cid}", json=body).raise_for_status()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, [ids[i::4] for i in range(4)]))
    return ids


def test_two_web_servers_and_two_workers_execute_each_plan_exactly_once(
    transactional_db, catalog, agent_token, reviewer, second_reviewer, upstream, cluster
):
    from demo.processes import wait_ready

    began = time.monotonic()
    webs = cluster["webs"]
    contacts = _contacts(upstream, PLANS)
    log_start = len(upstream.requests_log())

    # The workers boot while the contacts are created; both consume the same queue.
    for worker in cluster["workers"]:
        wait_ready(worker, timeout=60)
    logs = WorkerLogs(*cluster["workers"])
    reviewers = [
        ReviewerClient(web, name, f"pw-{name}") for name in ("rita", "sam") for web in webs
    ]
    tokens = [csrf_token(r.http.get("/plans/").text) for r in reviewers]
    ready: queue.Queue[dict | None] = queue.Queue()  # submitted plans, to be approved

    # --- agents submit through both web servers, CLIENTS connections each; reviewers
    # approve concurrently, as plans arrive: rita and sam, each on both servers --------
    def submit(job: tuple[int, list[str]]) -> list[tuple[str, dict]]:
        server, chunk = job
        out = []
        with httpx.Client(
            base_url=webs[server] + "/api/v1",
            headers={"Authorization": f"Bearer {agent_token}"},
            timeout=60,
        ) as http:
            for cid in chunk:
                response = http.post(
                    "/plans",
                    json={
                        "action": "update_contact_email",
                        "input": {"contact_id": cid, "email": f"{cid}@new.test"},
                        "reason": "multi-process test",
                    },
                )
                assert response.status_code == 201, response.text
                out.append((webs[server], response.json()))
                ready.put(response.json())
        return out

    def approve(lane: int) -> int:
        client, token, done = reviewers[lane], tokens[lane], 0
        while (plan := ready.get()) is not None:
            response = client.http.post(
                f"/plans/{plan['id']}/decide",
                data={
                    "decision": "approve",
                    "fingerprint": plan["fingerprint"],
                    "comment": "",
                    "csrfmiddlewaretoken": token,
                },
                headers={"Referer": client.base_url + f"/plans/{plan['id']}/"},
            )
            assert response.status_code == 302, response.text[:500]
            done += 1
        return done

    lanes = 2 * CLIENTS
    jobs = [(lane % 2, contacts[lane::lanes]) for lane in range(lanes)]
    try:
        with ThreadPoolExecutor(lanes + len(reviewers)) as pool:
            approvals = [pool.submit(approve, lane) for lane in range(len(reviewers))]
            try:
                submitted = [item for chunk in pool.map(submit, jobs) for item in chunk]
            finally:
                for _ in reviewers:
                    ready.put(None)
            submitted_at = time.monotonic()
            approved = sum(f.result() for f in approvals)
    finally:
        for client in reviewers:
            client.close()
    assert len(submitted) == PLANS
    by_server = Counter(server for server, _ in submitted)
    assert set(by_server) == set(webs), by_server
    plans = [plan for _, plan in submitted]
    assert len({p["id"] for p in plans}) == PLANS
    assert all(p["status"] == "awaiting_approval" for p in plans)
    assert approved == PLANS
    approved_at = time.monotonic()

    # --- every plan executed, each exactly once ---------------------------------------
    ids = [p["id"] for p in plans]

    def settled() -> bool:
        return not Plan.objects.filter(
            id__in=ids, status__in=["awaiting_approval", "approved", "executing"]
        ).exists()

    eventually(settled, timeout=max(60, PLANS * 0.1), interval=0.25, what="every plan settled")
    executed_at = time.monotonic()

    final = Counter(Plan.objects.filter(id__in=ids).values_list("status", flat=True))
    assert final == {"completed": PLANS}, final
    assert Attempt.objects.filter(plan_id__in=ids).count() == PLANS
    per_plan = Counter(Approval.objects.filter(plan_id__in=ids).values_list("plan_id", flat=True))
    assert len(per_plan) == PLANS and set(per_plan.values()) == {1}

    writes = Counter(
        entry["path"]
        for entry in upstream.requests_log()[log_start:]
        if entry["method"] not in ("GET", "HEAD")
    )
    expected = {f"/contacts/{cid}" for cid in contacts}
    assert set(writes) == expected, set(writes) ^ expected
    assert set(writes.values()) == {1}, [p for p, n in writes.items() if n > 1][:10]
    state = upstream.state()["contacts"]
    assert all(state[cid]["email"] == f"{cid}@new.test" for cid in contacts)

    # Both workers took part; a duplicate wake-up, if any, found its plan taken.
    per_worker = {}
    for worker in cluster["workers"]:
        text = worker.log()
        per_worker[worker.name] = len(re.findall(r"succeeded in \S+ 'completed'", text))
    assert all(per_worker.values()), per_worker
    assert sum(per_worker.values()) == PLANS, per_worker
    assert len(logs.finished()) >= PLANS

    print(
        f"\nmulti-process: {PLANS} plans; submitted in {submitted_at - began:.1f} s "
        f"({dict(by_server)}), all approved {approved_at - submitted_at:.1f} s later, "
        f"executed {executed_at - approved_at:.1f} s after the last approval; "
        f"per worker {per_worker}"
    )
