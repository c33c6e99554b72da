"""One connection to an upstream MCP server: its transport, the guard every message
the server sends passes, and the errors callers see (``sessions`` re-exports them).

This is the loop side of ``sessions``: everything here runs on the sessions' event loop.
A ``_Connection`` is a task that owns ``async with mcp.Client(...)`` (anyio needs a
context entered and left in the same task) and waits until it is closed or dropped.
Between the transport and the SDK's dispatcher sits a guard (``_Connection.pump``) that
drops the session when the server misbehaves past a bound: too many invalid lines, a
flood of notifications or requests, a message over the size limit. Requests the server
makes of us (sampling, elicitation, roots) are refused by the SDK's default handlers, and
no capability advertises them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types as types
from django.conf import settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from actions.lib.redaction import filter_text, scrub_text

from .stdio import BoundedStdio, MessageTooLarge, safe_environment

logger = logging.getLogger("actions.connectors.mcp.sessions")

MAX_INVALID_MESSAGES = 100
MAX_UNSOLICITED_MESSAGES = 10_000
_REFUSED_REQUESTS = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}
# How the SDK's HTTP transport words the errors it writes for answers it could not read.
_SYNTHESIZED = (
    "Failed to parse",
    "Unexpected content type",
    "server answered a request with 202",
    "Redirect to",
)
CLIENT_INFO = types.Implementation(name="countersign", version="1")
# How many server processes or HTTP sessions this process has started.
started = 0


def setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


class _ScrubSdkLogs(logging.Filter):
    """The SDK logs what it could not parse or use, and a pydantic error quotes its
    input: the upstream's bytes, maybe a credential it echoed. Its records are filtered
    and scrubbed like every upstream text, and lose their tracebacks (the type stays)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record still gets logged, as its template
            message = str(record.msg)
        text, _ = scrub_text(filter_text(message, limit=500))
        if record.exc_info and record.exc_info[0] is not None:
            text += f" ({record.exc_info[0].__name__})"
        record.msg, record.args, record.exc_info, record.exc_text = text, None, None, None
        return True


_SDK_LOGGERS = (
    "client",  # mcp.client.session's
    "mcp.client.client",
    "mcp.client.streamable_http",
    "mcp.shared.dispatcher",
    "mcp.shared.jsonrpc_dispatcher",
    "mcp.shared.tool_name_validation",
)
for _name in _SDK_LOGGERS:
    logging.getLogger(_name).addFilter(_ScrubSdkLogs())


# --- what callers see --------------------------------------------------------------------


class McpError(Exception):
    """Base: ``str()`` is text Countersign wrote, never the upstream's words."""

    sent: bool = False


class McpUnavailable(McpError):
    """Could not start, connect or finish the handshake: nothing was sent."""

    sent = False


class McpCallLost(McpError):
    """The request left but no answer came (timeout, crash, broken pipe, end of stream)."""

    sent = True


class McpProtocolError(McpError):
    """Invalid JSON-RPC, an oversized message or result, a server that misbehaved."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


@dataclass(frozen=True)
class ServerSpec:
    """Everything that shapes one upstream session; a changed field means a new session."""

    transport: str  # "stdio" | "http"
    command: str = ""
    args: tuple[str, ...] = ()
    # Merged over a minimal environment (stdio.SAFE_ENV), never this process's own.
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    url: str = ""  # the Streamable HTTP endpoint
    headers: tuple[tuple[str, str], ...] = ()
    connect_timeout: float = 10.0  # start + handshake
    call_timeout: float = 30.0  # one tools/call or tools/list
    secrets: tuple[str, ...] = ()  # scrubbed from everything read back


# --- one connection to an upstream ----------------------------------------------------------


class _CappedBody(httpx2.AsyncByteStream):
    """A response body that stops past ``limit`` bytes (the SDK reads JSON bodies whole)."""

    def __init__(self, stream, limit: int, on_oversize) -> None:
        self._stream, self._limit, self._on_oversize = stream, limit, on_oversize

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                self._on_oversize()
                raise httpx2.StreamError("the response was larger than the limit")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class _CappedTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, limit: int, on_oversize) -> None:
        super().__init__()
        self._limit, self._on_oversize = limit, on_oversize

    async def handle_async_request(self, request):
        response = await super().handle_async_request(request)
        # SSE streams are long-lived; the SDK caps each of their events instead.
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.stream = _CappedBody(response.stream, self._limit, self._on_oversize)
        return response


class _CountingWrite:
    """The write stream, counting the requests that leave (an answer nobody asked for
    is told apart by the count)."""

    def __init__(self, inner, conn: _Connection) -> None:
        self._inner, self._conn = inner, conn

    async def send(self, item: SessionMessage) -> None:
        if isinstance(item.message, types.JSONRPCRequest):
            self._conn.requests_sent += 1
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self._inner.aclose()


class _Guarded:
    """A transport between another and the SDK, every message passing ``conn.pump``."""

    def __init__(self, inner, conn: _Connection) -> None:
        self._inner, self._conn = inner, conn
        self._stack = AsyncExitStack()

    async def __aenter__(self):
        read, write = await self._stack.enter_async_context(self._inner)
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self._stack.push_async_callback(receive.aclose)
        group = await self._stack.enter_async_context(anyio.create_task_group())
        group.start_soon(self._conn.pump, read, send)
        self._stack.callback(group.cancel_scope.cancel)
        return receive, _CountingWrite(write, self._conn)

    async def __aexit__(self, *exc_info) -> bool | None:
        return await self._stack.__aexit__(*exc_info)


@asynccontextmanager
async def _http_transport(spec: ServerSpec, limit: int, on_oversize, on_status):
    # Redirects are not followed (the SDK follows same-origin ones itself); the read
    # timeout is generous because the server may hold an event stream open, and every
    # call has its own timeout on top.
    timeout = httpx2.Timeout(spec.call_timeout, connect=spec.connect_timeout, read=300.0)
    async with httpx2.AsyncClient(
        headers=dict(spec.headers),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        transport=_CappedTransport(limit, on_oversize),
        event_hooks={"response": [on_status]},
    ) as http:
        async with streamable_http_client(
            spec.url, http_client=http, max_sse_event_size=limit
        ) as streams:
            yield streams


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class _Connection:
    """One started server (or HTTP session) and its client; lives on the loop."""

    def __init__(self, spec: ServerSpec, on_end) -> None:
        self.spec = spec
        self._on_end = on_end
        self.limit = setting("COUNTERSIGN_MCP_MAX_MESSAGE_BYTES", 4 * 1024 * 1024)
        self.client: Client | None = None
        self.stdio: BoundedStdio | None = None
        self.done = asyncio.Event()
        self.closing = False  # closed by us, not dropped
        self.ended = False
        self.problem = ""  # why the server was dropped for misbehaving
        self.invalid = self.unsolicited = 0
        self.requests_sent = self.answers = 0
        self.refused: set[str] = set()
        self.tools_changed_at = 0.0
        self.tools: list[dict] | None = None
        self.served = False  # answered at least one call
        self.lost = False  # ended under a call
        self.was_ready = False
        self.reported = False
        self.refused_count = 0
        self.http_status = 0  # of the last HTTP answer
        self.inflight = 0
        self.task: asyncio.Task | None = None

    def _drop(self, problem: str) -> None:
        if not self.problem:
            self.problem = problem
        self._ended()

    async def pump(self, read, send) -> None:
        """Pass the server's messages on to the SDK, within bounds."""
        try:
            async with send:
                async for item in read:
                    if isinstance(item, MessageTooLarge):
                        self._drop(f"the MCP server sent a message over {self.limit} bytes")
                        return
                    if isinstance(item, Exception):
                        self.invalid += 1
                        if self.invalid > MAX_INVALID_MESSAGES:
                            self._drop("the MCP server sent too many invalid messages")
                            return
                        continue
                    message = item.message
                    if isinstance(message, types.JSONRPCNotification | types.JSONRPCRequest):
                        self.unsolicited += 1
                        if self.unsolicited > MAX_UNSOLICITED_MESSAGES:
                            self._drop("the MCP server sent too many notifications")
                            return
                    if isinstance(message, types.JSONRPCNotification):
                        if message.method == "notifications/tools/list_changed":
                            self.tools_changed_at = time.monotonic()
                            self.tools = None
                        # Nothing here listens to notifications: not handed on.
                        continue
                    if isinstance(message, types.JSONRPCRequest):
                        self._note_request(message.method)
                    else:
                        self.answers += 1
                        if self.answers > self.requests_sent + MAX_UNSOLICITED_MESSAGES:
                            self._drop("the MCP server sent too many answers nobody asked for")
                            return
                    await send.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            self._ended()

    def _ended(self) -> None:
        """The session is over: said once, as soon as it is known (before the calls it
        ends are told, and before the server is stopped), so a restart waits its turn."""
        self.done.set()
        if self.was_ready and not self.closing and not self.reported:
            self.reported = True
            self._on_end(self)

    def _note_request(self, method: str) -> None:
        # The SDK's default handlers refuse these (and no capability advertises them);
        # each kind is logged once per session, without the upstream's words.
        kind = _REFUSED_REQUESTS.get(method)
        self.refused_count += 1 if kind else 0
        if kind and kind not in self.refused:
            self.refused.add(kind)
            logger.warning("An MCP server asked for %s; Countersign refused it", kind)

    async def _status(self, response: httpx2.Response) -> None:
        self.http_status = response.status_code

    def _oversize(self) -> None:
        self._drop(f"the MCP server sent a message over {self.limit} bytes")

    def _transport(self):
        spec = self.spec
        if spec.transport == "stdio":
            self.stdio = BoundedStdio(
                spec.command,
                spec.args,
                env=safe_environment(spec.env),
                cwd=spec.cwd or None,
                max_message_bytes=self.limit,
            )
            return self.stdio
        if spec.transport == "http":
            return _http_transport(spec, self.limit, self._oversize, self._status)
        raise McpUnavailable(f"unknown MCP transport {spec.transport!r}")

    async def start(self) -> None:
        global started
        ready = asyncio.get_running_loop().create_future()
        started += 1
        self.task = asyncio.ensure_future(self._run(ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.spec.connect_timeout)
        except TimeoutError:
            self.closing = True
            self.task.cancel()
            await asyncio.wait({self.task}, timeout=8.0)
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: the timeout is what the caller hears
            raise McpUnavailable(
                "the MCP server did not start: no answer to the handshake within "
                f"{self.spec.connect_timeout:g} s"
            ) from None

    async def _run(self, ready: asyncio.Future) -> None:
        try:
            transport = _Guarded(self._transport(), self)
            client = Client(transport, mode="auto", cache=None, client_info=CLIENT_INFO)
            async with client:
                self.client = client
                self.was_ready = True
                ready.set_result(None)
                await self.done.wait()
        except (Exception, asyncio.CancelledError) as exc:
            if not ready.done():
                ready.set_exception(self._start_error(exc))
        finally:
            self.ended = True
            self.client = None
            self._ended()

    def _start_error(self, exc: BaseException) -> McpUnavailable:
        exc = _leaf(exc)
        if isinstance(exc, McpUnavailable):
            return exc
        if self.problem:
            return McpUnavailable(f"the MCP server did not start: {self.problem}")
        if isinstance(exc, OSError):
            why = f"the command could not be run ({type(exc).__name__})"
        elif isinstance(exc, httpx2.HTTPError):
            why = f"the endpoint could not be reached ({type(exc).__name__})"
        elif self.http_status in (401, 403):
            why = f"it refused the credential (HTTP {self.http_status})"
        elif self.http_status >= 400:
            why = f"it answered HTTP {self.http_status}"
        elif isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
            why = "it closed the connection during the handshake"
        elif isinstance(exc, MCPError):
            why = f"it refused the handshake (JSON-RPC error {exc.code})"
        else:
            why = f"the handshake failed ({type(exc).__name__})"
        return McpUnavailable(f"the MCP server did not start: {why}")

    async def close(self) -> None:
        self.closing = True
        self.done.set()
        if self.task is not None and not self.task.done():
            await asyncio.wait({self.task}, timeout=6.0)
            if not self.task.done():
                self.task.cancel()
                await asyncio.wait({self.task}, timeout=4.0)

    def _classify(self, exc: MCPError, method: str) -> None:
        """Raise what an error means when it is not the server's own JSON-RPC answer: the
        session ended under the call, or the HTTP transport stood in for an answer that
        never came (the SDK writes those as JSON-RPC errors, texts below)."""
        if self.problem:
            self.lost = True
            raise McpProtocolError(self.problem, sent=True) from None
        if self.done.is_set():
            self.lost = True
            raise McpCallLost(
                f"the MCP server closed the connection before answering {method}"
            ) from None
        if self.spec.transport != "http":
            return
        message = str(exc.error.message)
        if message.startswith("SSE stream") or message == "Session terminated":
            self.lost = True
            self._drop("")
            raise McpCallLost(f"the MCP server's answer to {method} was lost") from None
        if message == "Server returned an error response":
            raise McpProtocolError(
                f"the MCP server answered {method} with HTTP {self.http_status}", sent=True
            ) from None
        if message.startswith(_SYNTHESIZED):
            raise McpProtocolError(
                f"the MCP server's answer to {method} was not a valid message", sent=True
            ) from None

    async def request(self, method: str, timeout: float, **kwargs: Any):
        """One request through the client, its failures as McpError."""
        client = self.client
        if client is None or self.done.is_set():
            raise McpUnavailable("the MCP server's session has ended")
        try:
            with anyio.fail_after(timeout):
                if method == "tools/call":
                    return await client.call_tool(kwargs["name"], kwargs["arguments"])
                return await client.list_tools(cursor=kwargs.get("cursor"))
        except TimeoutError:
            raise McpCallLost(
                f"the MCP server did not answer {method} within {timeout:g} s"
            ) from None
        except MCPError as exc:
            self._classify(exc, method)
            raise
        except (ValidationError, RuntimeError, ValueError):
            raise McpProtocolError(
                f"the MCP server's answer to {method} was not a valid result", sent=True
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            self.lost = True
            raise McpCallLost(f"the connection to the MCP server broke during {method}") from None
