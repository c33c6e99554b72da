"""Plan status notifications: how a long-poll learns that its plan changed.

**Publishing.** ``plan_transition`` calls :func:`plan_changed`, which publishes
``"<plan id> <status>"`` on one Redis pub/sub channel (``COUNTERSIGN_NOTIFY_CHANNEL``)
once the transaction commits. Whatever process moves a plan — a web process, a Celery
worker, the sweeper — publishes. Publishing never fails the transition: a broken Redis
is logged and skipped for a few seconds (the waiters fall back to reading the database).

**Waiting.** Each process (each event loop) has one :class:`Watcher`: one Redis
subscription shared by every waiter, dispatching to per-plan :class:`asyncio.Event` s.
A waiter registers *before* it reads the plan's status, so a change that commits
between the read and the wait cannot be missed. Idle waiters hold an Event and nothing
else: no thread and no database connection.

When there is no Redis (embedded mode), or while the subscription is down, the watcher
reads the statuses of *all* the plans waited on in one query every
``COUNTERSIGN_WAIT_POLL_SECONDS`` — one query per process per interval, never one per
waiter. When the subscription comes (back) up, the same batched read runs once, so a
change published while nobody listened is still noticed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections, transaction

from actions.lib.metrics import LONGPOLL_WAITERS

from .models import Plan, PlanStatus

log = logging.getLogger(__name__)

# After a failed publish, skip publishing this long (a dead Redis must not slow every
# transition down by a connect timeout).
PUBLISH_BACKOFF_SECONDS = 5.0
# Longest pause between attempts to (re)subscribe while Redis is unreachable.
MAX_RECONNECT_SECONDS = 5.0
# An idle subscription (no waiters) is closed after this long.
LINGER_SECONDS = 60.0
# Plans read per batched status query.
CHECK_CHUNK = 500


def channel() -> str:
    return settings.COUNTERSIGN_NOTIFY_CHANNEL


def client_name() -> str:
    """How this process's subscription shows in Redis' CLIENT LIST."""
    return f"countersign-wakeups-{os.getpid()}"


# --- publishing -------------------------------------------------------------------------

_publish_down_until = 0.0


@functools.lru_cache(maxsize=4)
def _sync_redis(url: str):
    return redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)


def publish(plan_id: str, status: str) -> bool:
    """Publish one change now. Returns whether it was sent; never raises."""
    global _publish_down_until
    url = settings.REDIS_URL
    if not url or time.monotonic() < _publish_down_until:
        return False
    try:
        _sync_redis(url).publish(channel(), f"{plan_id} {status}")
    except Exception:  # noqa: BLE001 — any Redis failure: waiters fall back to the database
        _publish_down_until = time.monotonic() + PUBLISH_BACKOFF_SECONDS
        log.warning("could not publish a plan change; long-polls fall back to reading the DB")
        return False
    return True


def plan_changed(plan_id: Any, status: str) -> None:
    """Publish ``plan_id``'s new status once the surrounding transaction commits."""
    if not settings.REDIS_URL:
        return
    plan_id, status = str(plan_id), str(status)

    def publish_change() -> None:
        publish(plan_id, status)

    publish_change.plan_wakeup = True  # type: ignore[attr-defined]
    transaction.on_commit(publish_change)


def is_wakeup(callback: Callable[..., Any]) -> bool:
    """Is this on-commit callback a long-poll wake-up, or the metrics counting a move
    (approvals.lifecycle), rather than work handed over? (Tests counting callbacks.)"""
    return getattr(callback, "plan_wakeup", False) or getattr(callback, "metrics_only", False)


# --- database calls from async code -----------------------------------------------------


def db_call(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """Run ``fn`` in the loop's shared thread pool on a connection it closes afterwards.

    Not thread-sensitive, so no thread is set aside for the caller, and the connection
    is closed at once, so a caller that then waits for 30 s holds none."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return sync_to_async(run, thread_sensitive=False)


def _statuses(ids: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for start in range(0, len(ids), CHECK_CHUNK):
        rows = Plan.objects.filter(id__in=ids[start : start + CHECK_CHUNK]).values_list(
            "id", "status"
        )
        found.update((str(pk), status) for pk, status in rows)
    return found


# --- waiting ----------------------------------------------------------------------------


class Waiter:
    """One long-poll on one plan."""

    __slots__ = ("event", "seen", "heard", "recheck")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        # The status the waiter read; None until its first read returns.
        self.seen: str | None = None
        # A status announced before ``seen`` was known.
        self.heard: str | None = None
        # The subscription (re)started before ``seen`` was known: read once more.
        self.recheck = False


class Watcher:
    """The process's (event loop's) one subscription, shared by all its waiters."""

    def __init__(self) -> None:
        self.waiters: dict[str, set[Waiter]] = {}
        self.pushing = False  # subscribed: changes arrive as messages
        self.subscriptions = 0  # how many times the subscription came up (for tests)
        self.losses = 0  # how many times a live subscription was lost (for tests)
        self.checks = 0  # batched status reads (for tests)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()  # a waiter arrived (ends an idle linger early)

    # registration

    def register(self, plan_id: str) -> Waiter:
        waiter = Waiter()
        self.waiters.setdefault(plan_id, set()).add(waiter)
        LONGPOLL_WAITERS.inc()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="countersign-plan-watcher"
            )
        return waiter

    def unregister(self, plan_id: str, waiter: Waiter) -> None:
        waiters = self.waiters.get(plan_id)
        if waiters is not None and waiter in waiters:
            waiters.discard(waiter)
            LONGPOLL_WAITERS.dec()
            if not waiters:
                del self.waiters[plan_id]

    def count(self) -> int:
        return sum(len(w) for w in self.waiters.values())

    # dispatch

    def dispatch(self, plan_id: str, status: str) -> None:
        for waiter in self.waiters.get(plan_id, ()):
            if waiter.seen is None:
                waiter.heard = status
            elif status != waiter.seen:
                waiter.event.set()

    async def check(self, *, resync: bool = False) -> None:
        """Read every waited-on plan's status in one query; wake those that changed."""
        known = {
            plan_id: waiters
            for plan_id, waiters in self.waiters.items()
            if any(w.seen is not None for w in waiters)
        }
        if resync:
            for waiters in self.waiters.values():
                for waiter in waiters:
                    if waiter.seen is None:
                        waiter.recheck = True
        if not known:
            return
        self.checks += 1
        try:
            statuses = await db_call(_statuses)(list(known))
        except Exception:  # noqa: BLE001 — the database is down: try again next time
            log.warning("could not read plan statuses for long-polls", exc_info=True)
            return
        for plan_id, status in statuses.items():
            for waiter in self.waiters.get(plan_id, ()):
                if waiter.seen is not None and status != waiter.seen:
                    waiter.event.set()

    # the background task

    async def _run(self) -> None:
        url = settings.REDIS_URL
        delay = 0.25
        idle_since: float | None = None
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self.waiters:
                    idle_since = idle_since or loop.time()
                    if not url or loop.time() - idle_since >= LINGER_SECONDS:
                        return
                else:
                    idle_since = None
                if url:
                    subscribed = await self._listen(url)
                    if subscribed:
                        if not self.waiters:
                            return  # idle long enough; the next waiter starts it again
                        delay = 0.25
                        continue
                # No Redis, or it is unreachable: poll, in one query for all waiters,
                # until the next attempt to subscribe.
                await self._poll_for(delay if url else None)
                delay = min(delay * 2, MAX_RECONNECT_SECONDS)
        finally:
            self.pushing = False

    async def _poll_for(self, seconds: float | None) -> None:
        loop = asyncio.get_running_loop()
        until = None if seconds is None else loop.time() + seconds
        interval = settings.COUNTERSIGN_WAIT_POLL_SECONDS
        while self.waiters and (until is None or loop.time() < until):
            pause = interval if until is None else min(interval, max(0.0, until - loop.time()))
            await asyncio.sleep(pause)
            await self.check()
        if not self.waiters and until is not None:
            # Nobody waits: sleep until someone does (or the pause is over).
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, until - loop.time()))
            except TimeoutError:
                pass

    async def _listen(self, url: str) -> bool:
        """Subscribe and dispatch until the connection fails or nobody has waited for a
        while. Returns whether the subscription came up."""
        client = aioredis.Redis.from_url(
            url,
            socket_connect_timeout=1.0,
            socket_keepalive=True,
            health_check_interval=15,
            client_name=client_name(),
        )
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        subscribed = False
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(pubsub.subscribe(channel()), 2.0)
            # The SUBSCRIBE is acknowledged before any message: wait for it, so "pushing"
            # really means every later publish reaches us.
            while True:
                message = await asyncio.wait_for(pubsub.parse_response(block=True), 2.0)
                if message and message[0] in (b"subscribe", "subscribe"):
                    break
            subscribed = True
            self.pushing = True
            self.subscriptions += 1
            # Changes published while nobody listened: look them up once.
            await self.check(resync=True)
            idle_since: float | None = None
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is not None and message.get("type") == "message":
                    data = message["data"]
                    if isinstance(data, bytes):
                        data = data.decode("ascii", "replace")
                    plan_id, _, status = data.partition(" ")
                    self.dispatch(plan_id, status)
                if self.waiters:
                    idle_since = None
                elif idle_since is None:
                    idle_since = loop.time()
                elif loop.time() - idle_since >= LINGER_SECONDS:
                    return True
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 — connection refused, dropped, timed out
            if subscribed:
                self.losses += 1
                log.warning("plan notifications lost (%s); long-polls read the DB meanwhile", exc)
            else:
                log.debug("plan notifications unavailable: %s", exc)
            return subscribed
        finally:
            self.pushing = False
            try:
                await asyncio.shield(_close(pubsub, client))
            except Exception:  # noqa: BLE001
                pass

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass


async def _close(pubsub, client) -> None:
    try:
        await pubsub.aclose()
    finally:
        await client.aclose()


_watchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Watcher] = (
    weakref.WeakKeyDictionary()
)


def watcher() -> Watcher:
    """This event loop's watcher (created on first use)."""
    loop = asyncio.get_running_loop()
    found = _watchers.get(loop)
    if found is None:
        found = _watchers[loop] = Watcher()
    return found


async def shutdown() -> None:
    """Stop this loop's subscription (ASGI lifespan shutdown; tests)."""
    loop = asyncio.get_running_loop()
    found = _watchers.pop(loop, None)
    if found is not None:
        await found.aclose()


async def wait_for_change(
    plan_id: Any, *, read: Callable[[], Awaitable[str | None]], timeout: float
) -> str | None:
    """Wait up to ``timeout`` seconds for ``plan_id``'s status to change.

    ``read`` returns the plan's current status (None: not there, stop). It is called
    once *after* registering, so a change that commits before the wait begins is seen
    either by that read or as a message. Returns the status first read.
    """
    plan_key = str(plan_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    watch = watcher()
    waiter = watch.register(plan_key)
    try:
        seen = await read()
        if seen is None or seen in PlanStatus.terminal():
            return seen
        waiter.seen = seen
        if waiter.heard is not None and waiter.heard != seen:
            return seen  # announced while we were reading
        if waiter.recheck and await read() != seen:
            return seen
        try:
            await asyncio.wait_for(waiter.event.wait(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            pass
        return seen
    finally:
        watch.unregister(plan_key, waiter)
