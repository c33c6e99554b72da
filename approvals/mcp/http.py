"""The MCP server over streamable HTTP (``/mcp``, routed by config/asgi.py), its
OAuth 2.0 protected resource metadata (RFC 9728), and a JSON answer where OAuth clients
look for an authorization server (there is none).

Stateless: every POST stands alone (no session kept in a process), so any number of web
processes can serve one client, and a long wait (``get_plan``, a consent round, a
``subscriptions/listen`` stream) holds nothing but its own request. Answers are JSON,
except ``subscriptions/listen`` (2026-07-28), whose answer is an event stream by
definition. There is no standing stream: ``GET /mcp`` (and ``DELETE``) is ``405``.

Authentication is the agent's bearer token on every request. A request without an
acceptable one is answered ``401`` with a bearer challenge naming the metadata document
(``resource_metadata``, RFC 9728 §5.1) and, for a token that was sent, the reason
(``error="invalid_token"``, ``error_description``, RFC 6750 §3), and with the API's
problem in a JSON-RPC error in the body, for the request's id: clients that read the
body (SDK 2.x) show the problem, clients that raise on the status (SDK 1.x) carry the
header's reason in the exception's response.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from actions.lib.bearer import bearer_token
from actions.lib.outage import database_unavailable
from actions.lib.problems import problem_body_from, problem_line
from actions.services import agent_authenticate

from ..api.endpoints import Unauthenticated
from ..wakeups import db_call
from .protocol import INVALID_PARAMS, UNAUTHENTICATED, build_server, unavailable_error

MCP_PATH = "/mcp"
# RFC 9728 §3.1: the metadata of the resource https://host/mcp is at this path.
METADATA_PATH = "/.well-known/oauth-protected-resource" + MCP_PATH
# The same document at the well-known root, for clients that look there first.
METADATA_ROOT_PATH = "/.well-known/oauth-protected-resource"
METADATA_PATHS = frozenset({METADATA_PATH, METADATA_ROOT_PATH})

# Where an OAuth client looks for an authorization server once the metadata names none:
# the MCP SDKs fall back to the resource's origin (RFC 8414 metadata, OpenID discovery,
# with the path inserted and appended), then POST /register for dynamic registration,
# and /authorize or /token with a client they were given. Countersign is no
# authorization server (it signs people in with one, as a client: approvals/identity/oidc.py),
# so each answers 404 with an OAuth error body saying how to authenticate, which the
# SDKs put in their error instead of failing to parse an HTML page.
NO_AUTHORIZATION_SERVER_PATHS = frozenset(
    {
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-authorization-server" + MCP_PATH,
        "/.well-known/openid-configuration",
        "/.well-known/openid-configuration" + MCP_PATH,
        MCP_PATH + "/.well-known/openid-configuration",
        "/register",
        "/authorize",
        "/token",
    }
)
# Every path the MCP app answers (config/asgi.py routes them here).
PATHS = frozenset({MCP_PATH}) | METADATA_PATHS | NO_AUTHORIZATION_SERVER_PATHS

_MISSING = "send Authorization: Bearer <agent token>"
_REFUSED = "the token is not an active agent's; ask an administrator for one"


def resource_url() -> str:
    return settings.PUBLIC_URL + MCP_PATH


def metadata_url() -> str:
    return settings.PUBLIC_URL + METADATA_PATH


def protected_resource_metadata() -> dict[str, Any]:
    """The RFC 9728 document for ``/mcp``.

    Agent tokens are issued by an administrator (``create_agent``), not by an OAuth
    authorization server, so ``authorization_servers`` is left out (RFC 9728 §2 makes it
    optional); the documentation says how to get a token and how to send it. (The SDK's
    ``ProtectedResourceMetadata`` model insists on an authorization server, as the MCP
    authorization profile does for servers that have one, so the document is built here
    to the RFC.)"""
    return {
        "resource": resource_url(),
        "bearer_methods_supported": ["header"],
        "resource_name": "Countersign",
        "resource_documentation": settings.PUBLIC_URL + "/api/v1/docs",
        "countersign_token": (
            "An administrator registers the agent and gives it its token "
            "(python manage.py create_agent); send it as Authorization: Bearer <token>."
        ),
    }


def no_authorization_server() -> dict[str, Any]:
    """The body of every OAuth authorization server path: an OAuth error response
    (RFC 6749 §5.2 shape, which the SDKs parse) that says how this server authenticates."""
    return {
        "error": "access_denied",
        "error_description": (
            "Countersign has no OAuth authorization server and no client registration. "
            "Its MCP server takes an agent token that a Countersign administrator issues "
            "(python manage.py create_agent): configure the client to send it as the "
            "header Authorization: Bearer <token>. A refused token is not an active "
            "agent's: ask the administrator for one."
        ),
        "resource_metadata": metadata_url(),
    }


def challenge(*, token_sent: bool) -> str:
    """The WWW-Authenticate value (RFC 6750 §3, RFC 9728 §5.1)."""
    parts = [f'resource_metadata="{metadata_url()}"']
    if token_sent:
        # No error code when no credentials were sent (RFC 6750 §3.1).
        parts = ['error="invalid_token"', f'error_description="{_REFUSED}"', *parts]
    return "Bearer " + ", ".join(parts)


class McpHttpApp:
    """The ASGI app behind ``/mcp`` and its metadata: checks the host and the bearer
    token, then hands the request to the SDK's session manager.

    The session manager needs a running task group; it is started on the first request
    rather than in a lifespan handler, so the app works whether or not the server sends
    lifespan events (uvicorn ``--lifespan off``); ``aclose`` stops it.
    """

    def __init__(self) -> None:
        self.server = build_server()
        self._manager: StreamableHTTPSessionManager | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not _host_allowed(headers.get("host", "")):
            await _send_json(send, 400, _rpc_error(None, INVALID_PARAMS, "Invalid Host header"))
            return
        method = scope.get("method")
        if scope["path"].rstrip("/") in NO_AUTHORIZATION_SERVER_PATHS:
            await _send_json(send, 404, no_authorization_server())
            return
        if scope["path"].rstrip("/") in METADATA_PATHS:
            if method not in ("GET", "HEAD"):
                await _send_empty(send, 405, {"allow": "GET, HEAD"})
                return
            await _send_json(
                send, 200, protected_resource_metadata(), {"cache-control": "max-age=3600"}
            )
            return
        if method != "POST":
            # No standing event stream and no session to delete: every exchange is a POST.
            await _send_empty(send, 405, {"allow": "POST"})
            return
        token = bearer_token(headers.get("authorization"))
        try:
            agent = None if token is None else await db_call(agent_authenticate)(token)
        except Exception as exc:
            if not database_unavailable(exc):
                raise
            # Every request checks its token first, so during an outage this is where it
            # stops: 503 with Retry-After, and the JSON-RPC error for SDKs that read it.
            body, receive = await _peek_body(receive)
            error = unavailable_error(exc, where="MCP over HTTP").error
            retry_after = str(error.data["retry_after"])
            await _send_json(
                send,
                503,
                _rpc_error(_request_id(body), error.code, error.message, error.data),
                {"retry-after": retry_after},
            )
            return
        if agent is None:
            body, receive = await _peek_body(receive)
            # Worded as the JSON API words it; the header says why a sent token failed.
            problem = problem_body_from(Unauthenticated(_MISSING))
            error = _rpc_error(_request_id(body), UNAUTHENTICATED, problem_line(problem), problem)
            await _send_json(
                send, 401, error, {"www-authenticate": challenge(token_sent=token is not None)}
            )
            return
        manager = await self._started()
        await manager.handle_request(scope, receive, send)

    async def _started(self) -> StreamableHTTPSessionManager:
        if self._manager is not None:
            return self._manager
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._manager is None:
                manager = StreamableHTTPSessionManager(
                    app=self.server,
                    stateless=True,
                    json_response=True,
                    # Tool arguments are small JSON documents, like the API's bodies.
                    max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
                )
                ready = asyncio.Event()
                self._stop = asyncio.Event()

                async def run() -> None:
                    async with manager.run():
                        ready.set()
                        await self._stop.wait()

                self._runner = asyncio.create_task(run(), name="countersign-mcp")
                waiter = asyncio.create_task(ready.wait())
                await asyncio.wait({self._runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if not ready.is_set():
                    waiter.cancel()
                    self._runner.result()  # raises what stopped it
                self._manager = manager
        return self._manager

    async def aclose(self) -> None:
        """Stop the session manager; a later request starts a new one."""
        runner, stop = self._runner, self._stop
        self._manager = self._runner = self._stop = None
        if runner is not None and stop is not None:
            stop.set()
            await runner


def _host_allowed(host: str) -> bool:
    domain, _port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return bool(domain) and validate_host(domain, allowed)


async def _peek_body(receive):
    """The refused request's body (at most the body limit, for its id), and a receive
    that replays it."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    chunks: list[bytes] = []
    size = 0
    messages = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        if not message.get("more_body") or size > limit:
            break

    async def replay():
        return messages.pop(0) if messages else await receive()

    return (b"".join(chunks) if size <= limit else b""), replay


def _request_id(body: bytes) -> Any:
    """The JSON-RPC id of a single request, so the error answers it (else null)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(message, dict):
        rid = message.get("id")
        if isinstance(rid, str | int) and not isinstance(rid, bool):
            return rid
    return None


def _rpc_error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


async def _send_json(send, status: int, body: dict[str, Any], headers=None) -> None:
    payload = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


async def _send_empty(send, status: int, headers: dict[str, str]) -> None:
    raw = [(b"content-length", b"0")] + [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": b""})
