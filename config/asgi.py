"""ASGI entry point: one server carries the pages, the agent API and its long-polls, and
the MCP server at /mcp (with its RFC 9728 metadata)."""

from __future__ import annotations

import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Under ASGI each request runs on a thread of its own that ends with it, so a persistent
# connection is never reused: it would only linger, open, until garbage collection
# (dozens at once under load). Close it when the request finishes instead, as Django
# advises for ASGI; Celery workers keep their persistent connections.
os.environ.setdefault("COUNTERSIGN_DB_CONN_MAX_AGE", "0")
# On PostgreSQL, a pool per process instead of a new connection per request (a server
# backend started and stopped for every request): a request borrows a connection at its
# first query and gives it back when it finishes (docs/deployment.md). 0 turns it off.
os.environ.setdefault("COUNTERSIGN_DB_POOL_SIZE", "16")

# The pages need their stylesheet and the vendored htmx (no CDN); uvicorn serves no files
# itself, so the app does, from the static finders (a front proxy may take /static/ over).
django_application = ASGIStaticFilesHandler(get_asgi_application())

from approvals import wakeups  # noqa: E402  (needs the apps loaded above)
from approvals.longpoll import LongPollGate  # noqa: E402
from approvals.mcp.http import MCP_PATH, METADATA_PATHS, McpHttpApp  # noqa: E402


class Router:
    """``/mcp`` and its protected resource metadata to the MCP server, everything else
    to Django.

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
        elif scope["type"] == "http" and (
            scope["path"].rstrip("/") == MCP_PATH or scope["path"].rstrip("/") in METADATA_PATHS
        ):
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


# Long-polls wait in front of Django, holding no thread (see approvals.longpoll).
application = Router(LongPollGate(django_application), McpHttpApp())
