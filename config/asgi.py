"""ASGI entry point: one server carries the pages, the agent API and its long-polls, and
the MCP server at /mcp (with its RFC 9728 metadata)."""

from __future__ import annotations

import asyncio
import json
import logging
import os

from a2wsgi import WSGIMiddleware
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Django runs as a WSGI application on a fixed pool of threads in each process
# (COUNTERSIGN_WEB_THREADS), behind the ASGI pieces in front of it: the long-poll gate
# and the MCP server. Django's own ASGI handler started a thread for every request and
# ended it with the request, so no database connection could outlive a request, and it
# adapted each middleware between the event loop and that thread. A pooled thread serves
# request after request and keeps its connection from one to the next
# (COUNTERSIGN_DB_CONN_MAX_AGE, as the Celery workers do, with Django's health check at
# the start of each request): at most one connection per thread, none per request
# (docs/deployment.md, "Database connections").
wsgi_application = get_wsgi_application()

from django.conf import settings  # noqa: E402  (configured by the line above)

from actions.lib.problems import PROBLEM_CONTENT_TYPE, problem_body  # noqa: E402
from actions.openapi import MAX_DOCUMENT_BYTES  # noqa: E402  (needs the apps loaded)
from approvals.api.longpoll import LongPollGate, LoopSemaphore  # noqa: E402

log = logging.getLogger(__name__)


class SizedBodies:
    """Give a request body sent without ``Content-Length`` (chunked) its length.

    A WSGI application reads exactly ``Content-Length`` bytes of the body, so Django would
    see a chunked body as empty. Such a body is read here first, whole, up to
    ``limit`` bytes (more is answered 413 without reaching Django), and passed on with its
    length; a body with a length goes through untouched."""

    def __init__(self, app, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = scope.get("headers") or ()
        names = {name for name, _ in headers}
        if b"transfer-encoding" not in names or b"content-length" in names:
            return await self.app(scope, receive, send)
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            if len(body) > self.limit:
                return await _too_large(scope, send, self.limit)
            if not message.get("more_body"):
                break
        inner = dict(scope)
        inner["headers"] = [(n, v) for n, v in headers if n != b"transfer-encoding"] + [
            (b"content-length", str(len(body)).encode("ascii"))
        ]
        pending = [{"type": "http.request", "body": bytes(body), "more_body": False}]

        async def replay():
            return pending.pop() if pending else await receive()

        return await self.app(inner, replay, send)


async def _too_large(scope, send, limit: int) -> None:
    """413 for a chunked body over the limit: a problem document on the agent API (as
    Django's own 413 there is), a line of text elsewhere."""
    if scope.get("path", "").startswith("/api/"):
        content_type = PROBLEM_CONTENT_TYPE.encode()
        body = json.dumps(
            problem_body(
                status=413,
                type="body-too-large",
                title="The body is too large",
                detail=f"at most {limit} bytes",
            )
        ).encode()
    else:
        content_type = b"text/plain; charset=utf-8"
        body = f"Request body larger than {limit} bytes.\n".encode()
    await send(
        {"type": "http.response.start", "status": 413, "headers": [(b"content-type", content_type)]}
    )
    await send({"type": "http.response.body", "body": body})


class Admission:
    """At most ``threads`` requests in Django at once per process, and no request waits
    longer than ``timeout`` seconds for one of its threads.

    The rest wait here, as coroutines, in the order they came; one that has waited
    ``timeout`` seconds (every thread held, by submissions whose upstream answers slowly,
    say) is answered 503 with ``Retry-After: 1`` without reaching Django: a problem
    document on the agent API, a line of text elsewhere."""

    def __init__(self, app, *, threads: int, timeout: float) -> None:
        self.app = app
        self.timeout = timeout
        self._threads = LoopSemaphore(threads)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        semaphore = self._threads.get()
        try:
            await asyncio.wait_for(semaphore.acquire(), self.timeout)
        except TimeoutError:
            log.warning("every thread stayed busy for %g s; answered 503", self.timeout)
            return await _busy(scope, send)
        try:
            return await self.app(scope, receive, send)
        finally:
            semaphore.release()


async def _busy(scope, send) -> None:
    if scope.get("path", "").startswith("/api/"):
        content_type = PROBLEM_CONTENT_TYPE.encode()
        body = json.dumps(
            problem_body(
                status=503, type="busy", title="The service is busy", detail="try again shortly"
            )
        ).encode()
    else:
        content_type = b"text/plain; charset=utf-8"
        body = b"The service is busy; try again shortly.\n"
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [(b"content-type", content_type), (b"retry-after", b"1")],
        }
    )
    await send({"type": "http.response.body", "body": body})


# The pages need their stylesheet and the vendored htmx (no CDN); uvicorn serves no files
# itself, so the app does, from the static finders (a front proxy may take /static/ over).
django_application = SizedBodies(
    Admission(
        WSGIMiddleware(
            StaticFilesHandler(wsgi_application), workers=settings.COUNTERSIGN_WEB_THREADS
        ),
        threads=settings.COUNTERSIGN_WEB_THREADS,
        timeout=settings.COUNTERSIGN_WEB_QUEUE_TIMEOUT,
    ),
    # The largest body any page or endpoint takes: an OpenAPI document on the admin page
    # (with room for the form around it).
    limit=max(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, MAX_DOCUMENT_BYTES + 64 * 1024),
)

from approvals import wakeups  # noqa: E402  (needs the apps loaded above)
from approvals.mcp.http import PATHS as MCP_PATHS  # noqa: E402
from approvals.mcp.http import McpHttpApp  # noqa: E402


class Router:
    """``/mcp``, its protected resource metadata and the OAuth authorization server
    paths (approvals/mcp/http.py) to the MCP server, everything else to Django.

    Lifespan events (which Django does not speak) are answered here: startup needs
    nothing, since the MCP app starts its session manager on first use; shutdown stops
    it. Servers run with lifespan off simply never send them.
    """

    def __init__(self, django_app, mcp_app: McpHttpApp) -> None:
        self.django_app = django_app
        self.mcp_app = mcp_app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http" and scope["path"].rstrip("/") in MCP_PATHS:
            await self.mcp_app(scope, receive, send)
        else:
            await self.django_app(scope, receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.mcp_app.aclose()
                await wakeups.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return


# Long-polls wait in front of Django, holding no thread (see approvals.api.longpoll).
application = Router(LongPollGate(django_application), McpHttpApp())
