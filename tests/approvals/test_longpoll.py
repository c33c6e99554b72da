"""Long-polls (GET /api/v1/plans/{id}?wait=N) are woken by a notification, not by each
waiter reading the database: they wake when another thread or process moves the plan,
hold no thread or connection while idle, and still work without Redis."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import uuid

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.db import connection, connections

from approvals import wakeups
from approvals.models import Plan, PlanStatus
from approvals.services import plan_cancel
from demo.processes import ROOT, base_env, database_url, free_port

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 20  # seconds a waiter asks for; every wake-up below must come well before


@pytest.fixture(autouse=True)
def _fresh_publisher():
    wakeups._publish_down_until = 0.0
    yield
    wakeups._publish_down_until = 0.0


@pytest.fixture(autouse=True)
def _close_request_connections(monkeypatch):
    """Requests served in-process by Django's ASGI handler each run on a thread of their
    own; with persistent connections those would outlive the test (see docs/reliability)."""
    from django.db import connections

    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)


@pytest.fixture
def no_redis(settings):
    """Redis configured at a closed port: the notification path is down."""
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    settings.COUNTERSIGN_WAIT_POLL_SECONDS = 0.1


def run(coro):
    async def main():
        try:
            return await coro
        finally:
            await wakeups.shutdown()
            # The connection Django's test client left on the thread-sensitive thread.
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


def asgi_client() -> httpx.AsyncClient:
    from config.asgi import application

    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://127.0.0.1", timeout=60
    )


async def until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def settled_waiters() -> int:
    """Waiters of this loop that have read their plan and are now idle."""
    return sum(1 for ws in wakeups.watcher().waiters.values() for w in ws if w.seen is not None)


def in_thread(fn, *args, **kwargs) -> threading.Thread:
    thread = threading.Thread(target=fn, args=args, kwargs=kwargs)
    thread.start()
    return thread


def cancel_later(agent, plan_id) -> None:
    plan_cancel(agent=agent, plan_id=plan_id)


def clone_plans(plan: Plan, n: int) -> list[Plan]:
    """n more awaiting plans like ``plan`` (no preview needed to wait on them)."""
    copies = []
    for _ in range(n):
        copy = Plan.objects.get(pk=plan.pk)
        copy.pk = uuid.uuid4()
        copies.append(copy)
    return Plan.objects.bulk_create(copies)


# --- waking ---------------------------------------------------------------------------------


def test_a_waiter_wakes_when_another_thread_moves_the_plan(make_plan, agent, api_headers):
    plan = make_plan()
    headers = {"Authorization": api_headers["HTTP_AUTHORIZATION"]}

    async def main():
        async with asgi_client() as http:
            started = time.monotonic()
            request = asyncio.ensure_future(
                http.get(f"/api/v1/plans/{plan.id}", params={"wait": WAIT}, headers=headers)
            )
            await until(lambda: settled_waiters() == 1)
            await until(lambda: wakeups.watcher().pushing)
            await wakeups.db_call(cancel_later)(agent, plan.id)
            response = await request
            return response, time.monotonic() - started

    response, elapsed = run(main())
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert elapsed < WAIT  # woken, not timed out


def test_the_view_itself_wakes_without_the_gate(make_plan, agent, api_headers, async_client):
    """Django's own handler (the test client, a WSGI server) waits the same way."""
    plan = make_plan()

    async def main():
        started = time.monotonic()
        request = asyncio.ensure_future(
            async_client.get(
                f"/api/v1/plans/{plan.id}",
                {"wait": WAIT},
                headers={"Authorization": api_headers["HTTP_AUTHORIZATION"]},
            )
        )
        await until(lambda: settled_waiters() == 1)
        await wakeups.db_call(cancel_later)(agent, plan.id)
        response = await request
        return response, time.monotonic() - started

    response, elapsed = run(main())
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert elapsed < WAIT


def test_a_waiter_wakes_when_another_process_moves_the_plan(
    make_plan, agent, api_headers, worker_keys
):
    """The publish happens wherever plan_transition runs: here a separate process (as a
    Celery worker would be)."""
    plan = make_plan()
    headers = {"Authorization": api_headers["HTTP_AUTHORIZATION"]}
    env = base_env(
        database_url(connection.settings_dict),
        django_settings.CELERY_BROKER_URL,
        django_settings.CELERY_TASK_DEFAULT_QUEUE,
        worker_keys["public"],
        {"REDIS_URL": django_settings.REDIS_URL},
    )
    script = (
        "import django; django.setup()\n"
        "from actions.models import Agent\n"
        "from approvals.services import plan_cancel\n"
        f"plan_cancel(agent=Agent.objects.get(pk='{agent.pk}'), plan_id='{plan.id}')\n"
    )

    async def main():
        async with asgi_client() as http:
            started = time.monotonic()
            request = asyncio.ensure_future(
                http.get(f"/api/v1/plans/{plan.id}", params={"wait": WAIT}, headers=headers)
            )
            await until(lambda: settled_waiters() == 1)
            await until(lambda: wakeups.watcher().pushing)
            checks = wakeups.watcher().checks
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", script, cwd=ROOT, env=env
            )
            assert await proc.wait() == 0
            response = await request
            # Woken by the message: no batched database read was needed.
            assert wakeups.watcher().checks == checks
            return response, time.monotonic() - started

    response, elapsed = run(main())
    assert response.json()["status"] == "cancelled"
    assert elapsed < WAIT


def test_a_change_between_the_read_and_the_wait_is_not_missed(make_plan, agent):
    """The waiter registers before reading: a change committed (and announced) after its
    read but before it starts waiting still wakes it."""
    plan = make_plan()

    async def main():
        await until_subscribed()

        async def read():
            status = await wakeups.db_call(
                lambda: Plan.objects.values_list("status", flat=True).get(pk=plan.pk)
            )()
            await wakeups.db_call(cancel_later)(agent, plan.id)  # commits, publishes
            await asyncio.sleep(0.3)  # the message arrives before we wait
            return status

        started = time.monotonic()
        seen = await wakeups.wait_for_change(plan.id, read=read, timeout=WAIT)
        return seen, time.monotonic() - started

    seen, elapsed = run(main())
    assert seen == PlanStatus.AWAITING_APPROVAL
    assert elapsed < WAIT


async def until_subscribed() -> None:
    """Start this loop's subscription (a waiter on nothing) and wait for it to be up."""
    watch = wakeups.watcher()
    waiter = watch.register("warm-up")
    try:
        await until(lambda: watch.pushing)
    finally:
        watch.unregister("warm-up", waiter)


# --- an agent cut off while it waits -------------------------------------------------------

CUT_WITHIN = 10  # seconds after the cut by which the wait must have ended (it asked WAIT)


def cut(agent, how: str) -> None:
    """Revoke (``revoke_agent``), deactivate (as a bare UPDATE: no signal, no service),
    or let the token expire a moment from now."""
    from datetime import timedelta

    from django.utils import timezone

    from actions.models import Agent
    from actions.services import agent_revoke

    if how == "revoke":
        agent_revoke(name=agent.name)
    elif how == "deactivate":
        Agent.objects.filter(pk=agent.pk).update(is_active=False)
    else:
        Agent.objects.filter(pk=agent.pk).update(expires_at=timezone.now() + timedelta(seconds=0.5))


def assert_refused_soon(response, since_cut: float) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "urn:countersign:problem:unauthenticated"
    assert response.headers["www-authenticate"] == "Bearer"
    assert since_cut < CUT_WITHIN


@pytest.mark.parametrize("how", ["revoke", "deactivate", "expire"])
def test_an_open_long_poll_is_answered_401_when_its_agent_is_cut_off(
    make_plan, agent, api_headers, how
):
    """Not when the wait times out: the gate's lease on the agent is cut, and Django
    answers the request at once, as it answers any request with that token."""
    plan = make_plan()
    headers = {"Authorization": api_headers["HTTP_AUTHORIZATION"]}

    async def main():
        async with asgi_client() as http:
            request = asyncio.ensure_future(
                http.get(f"/api/v1/plans/{plan.id}", params={"wait": WAIT}, headers=headers)
            )
            await until(lambda: settled_waiters() == 1)
            assert wakeups.agent_watcher().count() == 1
            await wakeups.db_call(cut)(agent, how)
            cut_at = time.monotonic()
            response = await request
            return response, time.monotonic() - cut_at

    response, since_cut = run(main())
    assert_refused_soon(response, since_cut)
    assert Plan.objects.get(pk=plan.pk).status == PlanStatus.AWAITING_APPROVAL


@pytest.mark.parametrize("how", ["revoke", "deactivate"])
def test_the_views_own_wait_is_cut_off_too(make_plan, agent, api_headers, async_client, how):
    """Without the gate (the test client, a WSGI server), Django's own wait holds the
    same kind of lease, checked on the request's thread."""
    plan = make_plan()

    async def main():
        request = asyncio.ensure_future(
            async_client.get(
                f"/api/v1/plans/{plan.id}",
                {"wait": WAIT},
                headers={"Authorization": api_headers["HTTP_AUTHORIZATION"]},
            )
        )
        await until(lambda: settled_waiters() == 1)
        await wakeups.db_call(cut)(agent, how)
        cut_at = time.monotonic()
        response = await request
        return response, time.monotonic() - cut_at

    response, since_cut = run(main())
    assert_refused_soon(response, since_cut)


def test_one_check_serves_every_lease_and_reads_agents_only_after_a_change(
    make_plan, agent, other_agent, api_headers
):
    """Forty waiters of two agents: the watcher reads the agents once for all of them,
    then only the catalog generation until something in the catalog changes."""
    other, other_token = other_agent
    plans = clone_plans(make_plan(), 20)
    Plan.objects.filter(pk__in=[p.pk for p in plans[10:]]).update(agent=other)
    headers = {
        "mine": {"Authorization": api_headers["HTTP_AUTHORIZATION"]},
        "theirs": {"Authorization": f"Bearer {other_token}"},
    }
    measured = {}

    async def main():
        async with asgi_client() as http:
            requests = [
                asyncio.ensure_future(
                    http.get(
                        f"/api/v1/plans/{p.id}",
                        params={"wait": WAIT},
                        headers=headers["mine" if i < 10 else "theirs"],
                    )
                )
                for _ in range(2)
                for i, p in enumerate(plans)
            ]
            agents = wakeups.agent_watcher()
            await until(lambda: settled_waiters() == 40)
            assert agents.count() == 40
            queries = []
            original = wakeups.agent_tokens_usable

            def counted(digests):
                queries.append(len(digests))
                return original(digests)

            wakeups.agent_tokens_usable = counted
            try:
                checks = agents.checks
                await until(lambda: agents.checks >= checks + 3)
                measured["idle"] = list(queries)
                await wakeups.db_call(cut)(agent, "deactivate")
                refused = await asyncio.gather(*(r for i, r in enumerate(requests) if i % 20 < 10))
                measured["after"] = queries[len(measured["idle"]) :]
            finally:
                wakeups.agent_tokens_usable = original
            # The other agent's waits go on; cancelled, they answer.
            for p in plans[10:]:
                await wakeups.db_call(cancel_later)(other, p.id)
            answered = await asyncio.gather(*(r for i, r in enumerate(requests) if i % 20 >= 10))
            return refused, answered

    refused, answered = run(main())
    # Nothing changed: no agent was read, however many checks ran.
    assert measured["idle"] == []
    # The change: both tokens read in one query; only the deactivated agent's waits end.
    assert measured["after"][:1] == [2]
    assert [r.status_code for r in refused] == [401] * 20
    assert [r.json()["status"] for r in answered] == ["cancelled"] * 20


# --- what idle waiters hold -------------------------------------------------------------------


def database_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


def test_200_idle_waiters_hold_no_thread_and_no_connection(make_plan, agent, api_headers):
    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL connections")
    n, wait = 200, 30
    # 50 plans, four agents' worth of waiters on each (settling 200 plans one by one
    # would take longer than a wait on a loaded machine).
    plans = [make_plan(), *clone_plans(make_plan(), 49)]
    waited = plans * 4
    headers = {"Authorization": api_headers["HTTP_AUTHORIZATION"]}
    measured = {}

    async def main():
        async with asgi_client() as http:
            # Warm up: the shared thread pool starts its (few) threads once.
            await asyncio.gather(
                *(
                    http.get(f"/api/v1/plans/{p.id}", params={"wait": 0.05}, headers=headers)
                    for p in plans[:40]
                )
            )
            await until_subscribed()
            await asyncio.sleep(0.2)
            gc.collect()  # connections of finished requests' threads
            measured["threads_before"] = threading.active_count()
            measured["connections_before"] = await wakeups.db_call(database_connections)()
            started = time.monotonic()
            requests = [
                asyncio.ensure_future(
                    http.get(f"/api/v1/plans/{p.id}", params={"wait": wait}, headers=headers)
                )
                for p in waited
            ]
            await until(lambda: settled_waiters() == n, timeout=60)
            await asyncio.sleep(0.3)
            measured["threads_waiting"] = threading.active_count()
            measured["connections_waiting"] = await wakeups.db_call(database_connections)()
            measured["waiters"] = wakeups.watcher().count()

            def cancel_all():
                for p in plans:
                    plan_cancel(agent=agent, plan_id=p.id)

            await wakeups.db_call(cancel_all)()
            responses = await asyncio.gather(*requests)
            measured["elapsed"] = time.monotonic() - started
            return responses

    responses = run(main())
    assert measured["waiters"] == n
    # Not one thread or connection per waiter (a pooled thread may come and go).
    assert measured["threads_waiting"] <= measured["threads_before"] + 2, measured
    assert measured["connections_waiting"] <= measured["connections_before"] + 1, measured
    assert [r.json()["status"] for r in responses] == ["cancelled"] * n
    assert measured["elapsed"] < wait


# --- without Redis ------------------------------------------------------------------------


@pytest.mark.parametrize("redis_url", ["", "closed-port"])
def test_without_redis_waiters_fall_back_to_one_batched_read(
    settings, make_plan, agent, api_headers, redis_url
):
    """Embedded mode (no Redis) or Redis unreachable: the process reads all waited-on
    statuses in one query per interval; waiters still wake before their deadline."""
    settings.REDIS_URL = redis_url and f"redis://127.0.0.1:{free_port()}/0"
    settings.COUNTERSIGN_WAIT_POLL_SECONDS = 0.1
    plans = [make_plan(), *clone_plans(make_plan(), 9)]
    headers = {"Authorization": api_headers["HTTP_AUTHORIZATION"]}

    async def main():
        async with asgi_client() as http:
            started = time.monotonic()
            requests = [
                asyncio.ensure_future(
                    http.get(f"/api/v1/plans/{p.id}", params={"wait": WAIT}, headers=headers)
                )
                for p in plans
            ]
            await until(lambda: settled_waiters() == len(plans))
            assert not wakeups.watcher().pushing
            await asyncio.sleep(0.5)
            checks_before = wakeups.watcher().checks
            await wakeups.db_call(cancel_later)(agent, plans[0].id)
            first = await requests[0]
            # One read per interval for all ten waiters, not ten.
            checks = wakeups.watcher().checks - checks_before
            for p in plans[1:]:
                await wakeups.db_call(cancel_later)(agent, p.id)
            rest = await asyncio.gather(*requests[1:])
            return first, rest, checks, time.monotonic() - started

    first, rest, checks, elapsed = run(main())
    assert first.json()["status"] == "cancelled"
    assert all(r.json()["status"] == "cancelled" for r in rest)
    assert checks < 20
    assert elapsed < WAIT


def test_publishing_with_redis_down_does_not_fail_the_transition(no_redis, make_plan, agent):
    plan = make_plan()
    started = time.monotonic()
    plan_cancel(agent=agent, plan_id=plan.id)
    assert Plan.objects.get(pk=plan.pk).status == PlanStatus.CANCELLED
    assert not wakeups.publish(str(plan.id), "cancelled")  # skipped while Redis is down
    assert time.monotonic() - started < 5


def test_a_dropped_subscription_reconnects_and_catches_up(make_plan, agent, api_headers):
    """Redis drops the subscriber's connection: the subscription comes back (at once,
    with one catch-up read for what it may have missed; batched reads if it cannot), and
    a change made around the reconnect still wakes the waiter."""
    import redis

    plan = make_plan()
    headers = {"Authorization": api_headers["HTTP_AUTHORIZATION"]}
    client = redis.Redis.from_url(django_settings.REDIS_URL)

    async def main():
        async with asgi_client() as http:
            started = time.monotonic()
            request = asyncio.ensure_future(
                http.get(f"/api/v1/plans/{plan.id}", params={"wait": WAIT}, headers=headers)
            )
            await until(lambda: settled_waiters() == 1)
            watch = wakeups.watcher()
            await until(lambda: watch.pushing)
            assert watch.subscriptions == 1
            # Kill our own subscriber connection (other runs may share this Redis).
            name = wakeups.client_name()
            for entry in client.client_list():
                if entry.get("name") == name:
                    client.client_kill_filter(_id=entry["id"])
            # The reconnect may follow within microseconds, so "not pushing" can come
            # and go unseen: wait for the loss to be counted instead.
            await until(lambda: watch.losses >= 1)
            await wakeups.db_call(cancel_later)(agent, plan.id)
            response = await request
            await until(lambda: watch.subscriptions >= 2)
            return response, time.monotonic() - started

    response, elapsed = run(main())
    assert response.json()["status"] == "cancelled"
    assert elapsed < WAIT
