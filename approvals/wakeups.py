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

**Agents cut off.** A wait is also ended when its agent stops being usable — revoked,
deactivated, expired, deleted, its token replaced — however that happened (the admin,
``revoke_agent``, ``QuerySet.update()``, psql). Whatever waits for an agent holds an
:class:`AgentLease`; each event loop's :class:`AgentWatcher` reads the catalog
generation (actions/generation.py, which database triggers replace on every write to the
agents table) every ``COUNTERSIGN_AGENT_CHECK_SECONDS`` while any lease is held, and when
it changed, reads which of the leased tokens still authenticate, in one query. A lease
whose agent is gone is cut: its waits end with :class:`AgentGone`.

Over 600 lines: one mechanism, one process's watch on the change channel, with the two
kinds of wait built on it (a plan's status, an agent's lease). They share the per-loop
watcher, the batched fallback read and the rule that a waiter registers before it reads;
apart, each would have to restate that rule and its race.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from actions.cache import current_generation
from actions.lib.metrics import LONGPOLL_WAITERS
from actions.services import agent_tokens_usable
from actions.tokens import token_hash

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


def counted_on_commit(increment: Callable[[], Any]) -> None:
    """Run a metric's ``increment`` once the transaction commits, marked as bookkeeping
    (``is_wakeup``) like the counting of a move in approvals.lifecycle. Here, below the
    lifecycle and the decisions, so that whatever counts can use it without importing
    the module that changes a plan's state."""

    def count() -> None:
        increment()

    count.metrics_only = True  # type: ignore[attr-defined]
    transaction.on_commit(count)


def is_wakeup(callback: Callable[..., Any]) -> bool:
    """Is this on-commit callback a long-poll wake-up, or metrics counted on commit (a
    move in approvals.lifecycle, ``counted_on_commit``), rather than work handed over?
    (Tests counting callbacks.)"""
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
        await _stopped(task)


async def _stopped(task: asyncio.Task | None) -> None:
    """Cancel a watcher's loop and wait for it to end, whatever it ends with."""
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _close(pubsub, client) -> None:
    try:
        await pubsub.aclose()
    finally:
        await client.aclose()


class _PerLoop[T]:
    """One ``factory()`` per event loop, made on first use and forgotten with the loop."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        found = self._by_loop.get(loop)
        if found is None:
            found = self._by_loop[loop] = self._factory()
        return found

    def pop(self) -> T | None:
        return self._by_loop.pop(asyncio.get_running_loop(), None)


_watchers = _PerLoop(Watcher)


def watcher() -> Watcher:
    """This event loop's watcher (created on first use)."""
    return _watchers.get()


async def shutdown() -> None:
    """Stop this loop's subscription (ASGI lifespan shutdown; tests)."""
    found = _watchers.pop()
    if found is not None:
        await found.aclose()
    agents = _agent_watchers.pop()
    if agents is not None:
        await agents.aclose()


async def wait_for_change(
    plan_id: Any,
    *,
    read: Callable[[], Awaitable[str | None]],
    timeout: float,
    lease: AgentLease | None = None,
) -> str | None:
    """Wait up to ``timeout`` seconds for ``plan_id``'s status to change.

    ``read`` returns the plan's current status (None: not there, stop). It is called
    once *after* registering, so a change that commits before the wait begins is seen
    either by that read or as a message. Returns the status first read. With a
    ``lease``, raises :class:`AgentGone` as soon as the lease is cut, and when it was
    cut by the time the wait ends.
    """
    plan_key = str(plan_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    watch = watcher()
    waiter = watch.register(plan_key)
    stop_watching = lease.on_cut(waiter.event.set) if lease is not None else None
    try:
        seen = await _watched(waiter, read, deadline)
    finally:
        watch.unregister(plan_key, waiter)
        if stop_watching is not None:
            stop_watching()
    if lease is not None:
        lease.raise_if_cut()
    return seen


async def _watched(
    waiter: Waiter, read: Callable[[], Awaitable[str | None]], deadline: float
) -> str | None:
    if waiter.event.is_set():
        return None  # cut before it began
    seen = await read()
    if seen is None or seen in PlanStatus.terminal():
        return seen
    waiter.seen = seen
    if waiter.heard is not None and waiter.heard != seen:
        return seen  # announced while we were reading
    if waiter.recheck and await read() != seen:
        return seen
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(waiter.event.wait(), max(0.0, deadline - loop.time()))
    except TimeoutError:
        pass
    return seen


# --- agents cut off ---------------------------------------------------------------------


class AgentGone(Exception):
    """The agent a wait is for no longer authenticates: revoked, deactivated, expired,
    deleted, or its token replaced."""


class AgentLease:
    """What a wait (or a stream) for the agent holding one token holds while it lasts."""

    __slots__ = ("digest", "cut", "_watcher", "_callbacks")

    def __init__(self, watcher: AgentWatcher, digest: str) -> None:
        self.digest = digest
        self.cut = False
        self._watcher = watcher
        self._callbacks: dict[object, Callable[[], Any]] = {}

    def on_cut(self, callback: Callable[[], Any]) -> Callable[[], None]:
        """Call ``callback`` (on the event loop) when the lease is cut, at once if it is
        already. Returns what stops that."""
        if self.cut:
            callback()
            return lambda: None
        key = object()
        self._callbacks[key] = callback

        def remove() -> None:
            self._callbacks.pop(key, None)

        return remove

    def release(self) -> None:
        """No longer held (what :meth:`AgentWatcher.lease` does at the end of its block)."""
        self._watcher.unregister(self)

    def raise_if_cut(self) -> None:
        if self.cut:
            raise AgentGone("the agent no longer authenticates")

    async def confirm(self) -> None:
        """Check now, not at the next interval, that the agent is still usable (before
        a notification, after a wait); raises :class:`AgentGone` if it is not."""
        if not self.cut:
            await self._watcher.confirm(self.digest)
        self.raise_if_cut()

    def _cut(self) -> None:
        if self.cut:
            return
        self.cut = True
        callbacks, self._callbacks = list(self._callbacks.values()), {}
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 — one waiter's callback must not spare the others
                log.exception("a callback for a cut-off agent failed")


_ABSENT = object()


def _usable(found: dict[str, Any], digest: str, now) -> bool:
    expires_at = found.get(digest, _ABSENT)
    return expires_at is not _ABSENT and (expires_at is None or expires_at > now)


def _agents_now(
    digests: list[str], generation_seen: str | None, known: dict[str, Any]
) -> tuple[str | None, dict[str, Any]]:
    """(the catalog generation, the usable tokens among ``digests`` with their expiry).

    Under the generation of the last read, only the tokens not read then are looked up;
    a new generation (any write to the agents table) reads them all again. The
    generation is read first, so a change committed after it shows as the next one."""
    generation = current_generation()
    if generation is None or generation != generation_seen:
        ask, found = digests, {}
    else:
        ask = [d for d in digests if d not in known]
        found = {d: known[d] for d in digests if d in known}
    if ask:
        found.update(agent_tokens_usable(ask))
    return generation, found


DbRunner = Callable[[Callable[..., Any]], Callable[..., Awaitable[Any]]]


class AgentWatcher:
    """The check of the agents an event loop's leases are for: one read of the catalog
    generation per interval while any lease is held, and one query for all the leased
    tokens when it changed (or a lease on a token not read yet arrived).

    ``run`` turns a database function into a coroutine (default :func:`db_call`: a pool
    thread, on a connection closed at once)."""

    def __init__(self, run: DbRunner | None = None) -> None:
        self.leases: dict[str, set[AgentLease]] = {}
        self.checks = 0  # reads of the agents (for tests)
        self._run_db = run
        self._generation: str | None = None
        self._usable: dict[str, Any] = {}
        self._task: asyncio.Task[None] | None = None

    def _db(self, fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        return (self._run_db or db_call)(fn)

    def register(self, token: str) -> AgentLease:
        lease = AgentLease(self, token_hash(token))
        self.leases.setdefault(lease.digest, set()).add(lease)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="countersign-agent-watcher"
            )
        return lease

    def unregister(self, lease: AgentLease) -> None:
        leases = self.leases.get(lease.digest)
        if leases is not None:
            leases.discard(lease)
            if not leases:
                del self.leases[lease.digest]

    def count(self) -> int:
        return sum(len(leases) for leases in self.leases.values())

    def cut(self, digest: str) -> None:
        """Cut every lease on this token (its agent is gone)."""
        self._usable.pop(digest, None)
        for lease in list(self.leases.get(digest, ())):
            lease._cut()

    async def check(self) -> None:
        digests = list(self.leases)
        if not digests:
            return
        self.checks += 1
        generation, found = await self._db(_agents_now)(digests, self._generation, self._usable)
        self._generation, self._usable = generation, found
        now = timezone.now()
        for digest in digests:
            if not _usable(found, digest, now):
                self.cut(digest)

    async def confirm(self, digest: str) -> None:
        """Read this one token now; cut its leases if its agent is gone."""
        found = await self._db(agent_tokens_usable)([digest])
        if not _usable(found, digest, timezone.now()):
            self.cut(digest)

    async def _run(self) -> None:
        # Checked at once (an agent cut off between its request's check and the lease),
        # then every interval for as long as a lease is held.
        while self.leases:
            try:
                await self.check()
            except Exception:  # noqa: BLE001 — the database is down: try again next time
                log.warning("could not check the agents of open waits", exc_info=True)
            await asyncio.sleep(max(0.05, settings.COUNTERSIGN_AGENT_CHECK_SECONDS))

    @contextlib.asynccontextmanager
    async def lease(self, token: str) -> AsyncIterator[AgentLease]:
        """Hold a lease on the agent holding ``token`` for the block."""
        held = self.register(token)
        try:
            yield held
        finally:
            held.release()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        await _stopped(task)


_agent_watchers = _PerLoop(AgentWatcher)


def agent_watcher() -> AgentWatcher:
    """This event loop's agent watcher (created on first use)."""
    return _agent_watchers.get()


def agent_lease(token: str) -> contextlib.AbstractAsyncContextManager[AgentLease]:
    """Hold a lease on the agent holding ``token`` for the block: it is cut within
    ``COUNTERSIGN_AGENT_CHECK_SECONDS`` of the agent ceasing to authenticate."""
    return agent_watcher().lease(token)
