"""Long-polls held in front of Django, so a waiting agent costs a coroutine, not a thread.

Django runs on a fixed pool of threads per web process (config/asgi.py). A
``GET /api/v1/plans/{id}?wait=30`` that waited inside Django would hold one of them, and
its database connection, for 30 s: sixteen waiting agents would stop the process from
serving anything else.

:class:`LongPollGate` therefore does the waiting itself, before Django sees the
request: it checks the token and that the plan is the agent's (one short query each, on
a pooled thread whose connection is closed at once), waits for the plan's status to
change through :mod:`approvals.wakeups`, and then hands the request to Django *without*
``wait``, so Django answers it as an ordinary read, with the same rendering, headers
and errors (at most ``COUNTERSIGN_LONGPOLL_CONCURRENCY`` at a time per process, so a
thousand plans settling at once queue here as coroutines rather than in front of
Django's threads). Anything unusual (no or bad token, unknown plan, malformed ``wait``)
goes straight through: Django gives the proper answer, and the view's own wait still
works. A client that hangs up while waiting ends the wait. An agent revoked or
deactivated while it waits is cut off within ``COUNTERSIGN_AGENT_CHECK_SECONDS``
(:func:`approvals.wakeups.agent_lease`): the request goes on to Django at once, which
answers it ``401``.
"""

from __future__ import annotations

import asyncio
import math
import re
import uuid
import weakref
from urllib.parse import parse_qsl, urlencode

from django.conf import settings

from actions.lib.bearer import bearer_token
from actions.services import agent_authenticate

from ..models import Plan
from ..wakeups import AgentGone, agent_lease, db_call, wait_for_change

PLAN_PATH = re.compile(r"^/api/v1/plans/(?P<plan_id>[^/]+)/?$")


def _wait_param(query_string: bytes) -> tuple[float, bytes] | None:
    """(seconds, the query string without ``wait``), or None to leave the request be."""
    try:
        pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    except ValueError:
        return None
    waits = [v for k, v in pairs if k == "wait"]
    if len(waits) != 1:
        return None
    try:
        seconds = float(waits[0])
    except ValueError:
        return None
    if not math.isfinite(seconds) or not 0 < seconds <= settings.COUNTERSIGN_MAX_WAIT_SECONDS:
        return None
    rest = urlencode([(k, v) for k, v in pairs if k != "wait"])
    return seconds, rest.encode("latin-1")


def _bearer(scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return bearer_token(value)
    return None


def _plan_status(token: str, plan_id: uuid.UUID) -> str | None:
    """The status of the token holder's plan, or None (no such agent or plan)."""
    agent = agent_authenticate(token)
    if agent is None:
        return None
    return Plan.objects.filter(id=plan_id, agent=agent).values_list("status", flat=True).first()


class LoopSemaphore:
    """An ``asyncio.Semaphore`` of ``size`` for each running event loop (a semaphore
    belongs to one loop; a process may run more than one, tests especially)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._by_loop = weakref.WeakKeyDictionary()

    def get(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        semaphore = self._by_loop.get(loop)
        if semaphore is None:
            semaphore = self._by_loop[loop] = asyncio.Semaphore(self.size)
        return semaphore


_answering = LoopSemaphore(settings.COUNTERSIGN_LONGPOLL_CONCURRENCY)


class LongPollGate:
    """ASGI middleware: hold ``GET /api/v1/plans/{id}?wait=N`` until the plan changes."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            return await self.app(scope, receive, send)
        match = PLAN_PATH.match(scope.get("path", ""))
        wait = _wait_param(scope.get("query_string", b"")) if match else None
        token = _bearer(scope) if wait else None
        if match is None or wait is None or token is None:
            return await self.app(scope, receive, send)
        try:
            plan_id = uuid.UUID(match["plan_id"])
        except ValueError:
            return await self.app(scope, receive, send)
        seconds, rest = wait

        # The request body (empty for a GET) is read now and replayed to Django, so a
        # disconnect can be noticed while waiting.
        buffered = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            buffered.append(message)
            if not message.get("more_body"):
                break

        read = db_call(_plan_status)
        async with agent_lease(token) as lease:
            waiting = asyncio.ensure_future(
                wait_for_change(
                    plan_id, read=lambda: read(token, plan_id), timeout=seconds, lease=lease
                )
            )
            hangup = asyncio.ensure_future(receive())
            try:
                await asyncio.wait({waiting, hangup}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not waiting.done():
                    waiting.cancel()
        if hangup.done():
            message = hangup.result()
            if message["type"] == "http.disconnect":
                return
            buffered.append(message)  # not expected after the body; pass it on
            hangup = None
        else:
            hangup.cancel()
        failed = waiting.exception() if waiting.done() and not waiting.cancelled() else None
        if failed is not None and not isinstance(failed, AgentGone):
            # The database or the token check failed: let Django answer (and wait) itself.
            return await self.app(scope, self._replay(buffered, receive), send)

        # Woken, timed out, or the agent was cut off (Django then answers 401 at once).
        inner = dict(scope)
        inner["query_string"] = rest
        # Many waiters wake at once when many plans settle together (a reviewer approves
        # a batch): each answer is an ordinary Django request with a thread and a
        # connection, so only so many are answered at a time; the rest queue here.
        async with _answering.get():
            return await self.app(inner, self._replay(buffered, receive), send)

    @staticmethod
    def _replay(buffered, receive):
        pending = list(buffered)

        async def replay():
            if pending:
                return pending.pop(0)
            return await receive()

        return replay
