"""A web process runs Django on a fixed number of threads (COUNTERSIGN_WEB_THREADS,
config/asgi.py), each keeping its database connection from request to request, or
borrows connections from a bounded pool (COUNTERSIGN_DB_POOL_SIZE): either way many
requests at once never open more connections than that bound, the connections outlive
the requests that used them, and what a kept connection sees is exact: an agent revoked
between two requests is refused on the very next one, whichever connection serves it
(the catalog cache reads the generation on every request, docs/scaling.md)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection

from actions.services import agent_create, agent_revoke
from demo.processes import start_web
from tests.e2e.support import while_a_slow_submission_runs

pytestmark = pytest.mark.e2e

BOUND = 2


# The pooled server names its connections, so that the workers, sealers and other servers
# of the session, which connect as they please, are never counted as its own.
APPLICATION = "countersign-pool-test"


def _backends() -> set[int]:
    """The pooled web server's connections to this database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s",
            [APPLICATION],
        )
        return {row[0] for row in cursor.fetchall()}


@pytest.fixture
def pooled_web(live_env, live_logs, transactional_db, catalog, canary):
    """Start a web server with ``env``; returns (url, backends before it)."""
    started = []

    def start(**env: str) -> tuple[str, set[int]]:
        before = _backends()
        named = {"DATABASE_URL": f"{live_env['DATABASE_URL']}?application_name={APPLICATION}"}
        proc, url = start_web({**live_env, **named, **env}, live_logs)
        started.append(proc)
        canary.ours.add(url)
        return url, before

    yield start
    for proc in started:
        proc.stop(timeout=15)


@pytest.mark.parametrize(
    "env",
    [
        # Production's default: each thread keeps its connection.
        {"COUNTERSIGN_WEB_THREADS": str(BOUND), "COUNTERSIGN_DB_CONN_MAX_AGE": "60"},
        # A pool smaller than the threads.
        {"COUNTERSIGN_DB_POOL_SIZE": str(BOUND)},
    ],
    ids=["threads", "pool"],
)
def test_concurrent_requests_share_a_bounded_set_of_connections(pooled_web, env):
    url, before = pooled_web(**env)
    agent, token = agent_create(
        name="pool-agent", action_names=["update_contact_email"], active=True
    )
    headers = {"Authorization": f"Bearer {token}"}
    seen: set[int] = set()
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            now = _backends() - before
            seen.update(now)
            peak = max(peak, len(now))
        connection.close()

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            with ThreadPoolExecutor(16) as pool:
                statuses = list(
                    pool.map(lambda _: http.get("/api/v1/actions").status_code, range(200))
                )
    finally:
        done.set()
        sampler.join()
    assert statuses == [200] * 200
    # At most the bound at any moment, and the same connections throughout
    # (a connection per request would have shown up to 16 at once, 200 in all).
    assert 1 <= peak <= BOUND
    assert len(seen) <= BOUND
    # They stay open for the next requests.
    assert _backends() - before

    # Revoked between two requests: the very next one is refused.
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        assert http.get("/api/v1/actions").status_code == 200
        agent_revoke(name=agent.name)
        answers = [http.get("/api/v1/actions").status_code for _ in range(2 * BOUND)]
    assert answers == [401] * (2 * BOUND)


def test_a_request_that_finds_no_free_connection_is_told_to_come_back(pooled_web, upstream):
    """One connection, held by a submission whose preview read the upstream answers
    slowly (a request keeps its connection until it ends): another request waits
    COUNTERSIGN_DB_POOL_TIMEOUT seconds for it, then gets a 503 with Retry-After, not a
    500; the pool serves again once the connection is back."""
    url, _ = pooled_web(COUNTERSIGN_DB_POOL_SIZE="1", COUNTERSIGN_DB_POOL_TIMEOUT="1")
    _, token = agent_create(name="busy-agent", action_names=["update_contact_email"], active=True)
    submitted, busy = while_a_slow_submission_runs(
        url, token, upstream, lambda http: http.get("/api/v1/actions")
    )
    assert busy.status_code == 503, busy.text
    assert busy.headers["Retry-After"] == "1"
    assert busy.json()["type"].endswith("busy")
    assert submitted.status_code == 201, submitted.text
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{url}/api/v1/actions", headers=headers, timeout=30).status_code == 200
