"""Sessions with upstream MCP servers: a bounded pool per process, behind a sync facade.

Django views and Celery tasks are synchronous; the MCP SDK is async and its sessions are
long-lived. Starting a server (or an HTTP session) for every call would cost a process
and a handshake each time, so each process keeps a few initialized sessions per upstream
(``session_for``) and reuses them. The sessions run on one asyncio event loop in a daemon
thread of this process; a caller submits a coroutine to it and waits with a timeout.
Several threads may call at once: JSON-RPC carries concurrent requests on one session.

A ``Session`` here is a pooled slot: it starts a connection (``connection.py``: the
transport, the guard every server message passes, the client) on first use, keeps it,
and starts another after a failure, waiting longer after each (``_Backoff``).

Every upstream byte is hostile. What comes back is capped and scrubbed of every
credential this process holds (``actions.lib.redaction``); exceptions carry text
Countersign wrote, never the upstream's. Exceptions say whether the request may have
left (``sent``), which is what decides between "failed" and "unknown" for a write.

A forked child (a Celery prefork worker) gets a fresh loop and an empty pool; its
parent's sessions are forgotten without touching their pipes.

Use::

    spec = ServerSpec(transport="stdio", command="mcp-server-git", args=("--repository", path),
                      env=(("GIT_TOKEN", token),), secrets=(token,))
    session = session_for((connector.pk, "write"), spec)
    tools = session.list_tools()            # cached until the server says they changed
    result = session.call_tool("git_commit", {"message": "…"}, timeout=20)

``call_tool`` returns a ``ToolResult`` (a JSON-RPC error answer is one too, with
``error_code``) or raises ``McpUnavailable`` (nothing sent), ``McpCallLost`` (sent, no
answer) or ``McpProtocolError`` (``sent`` says which).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import copy
import json
import logging
import os
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from actions.lib.redaction import (
    filter_text,
    remember_secrets,
    scrub_bytes,
    scrub_text,
    scrub_value,
)

from . import connection
from .connection import (
    McpCallLost,
    McpError,
    McpProtocolError,
    McpUnavailable,
    ServerSpec,
    _Connection,
    setting,
)
from .stdio import STDERR_TAIL_BYTES, BoundedStdio

__all__ = [
    "McpCallLost",
    "McpError",
    "McpProtocolError",
    "McpUnavailable",
    "ServerSpec",
    "Session",
    "ToolResult",
    "pool_clear",
    "processes_started",
    "session_for",
]

logger = logging.getLogger(__name__)

MAX_TOOLS = 1000
MAX_TOOL_PAGES = 50
MAX_DESCRIPTION_CHARS = 2000
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
# The sync side waits this much longer than the loop side's own timeout, so the loop's
# answer (with its reason) normally arrives first.
_WAIT_MARGIN = 5.0


@dataclass
class ToolResult:
    """A tools/call answer as Countersign keeps it: the whole received result was at most
    COUNTERSIGN_MCP_MAX_RESULT_BYTES, and every part is scrubbed of the credentials this
    process holds."""

    is_error: bool
    structured: Any | None  # structuredContent, if any
    text: str  # the text content items joined with "\n"
    content: list[dict]  # non-text items summarised as {"type": ..., "omitted": True}
    raw: bytes  # canonical JSON of {"isError", "content", "structuredContent"} as received
    elapsed_ms: int
    secret_echoed: bool  # something read back repeated a credential
    # The JSON-RPC error code when the server answered tools/call with an error instead
    # of a result (then ``is_error`` is True and ``text`` is its scrubbed message).
    error_code: int | None = None


# --- the event loop thread ---------------------------------------------------------------

_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _event_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name="countersign-mcp-sessions", daemon=True
            ).start()
            _loop = loop
        return _loop


def _run(coro, timeout: float):
    """Run ``coro`` on the sessions' loop; wait at most ``timeout`` seconds."""
    future = asyncio.run_coroutine_threadsafe(coro, _event_loop())
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise


def processes_started() -> int:
    """How many server processes or HTTP sessions this process has started."""
    return connection.started


# --- a pooled session: one slot, restarted after a failure -----------------------------------


class _Backoff:
    """Shared by an upstream's slots: after a failure, the next start waits 0.5 s, 1 s,
    2 s… (at most BACKOFF_MAX), so a server that keeps dying is not restarted in a loop."""

    def __init__(self) -> None:
        self.failures = 0
        self.not_before = 0.0
        self._lock = threading.Lock()

    def failed(self) -> None:
        with self._lock:
            self.failures += 1
            delay = min(BACKOFF_FIRST * 2 ** (self.failures - 1), BACKOFF_MAX)
            self.not_before = time.monotonic() + delay

    def succeeded(self) -> None:
        with self._lock:
            self.failures, self.not_before = 0, 0.0

    def wait_left(self) -> float:
        return max(0.0, self.not_before - time.monotonic())


class Session:
    """A pooled session with one upstream; started on first use, restarted after a
    failure (with ``_Backoff``), kept between calls."""

    def __init__(self, spec: ServerSpec, backoff: _Backoff) -> None:
        self.spec = spec
        self._backoff = backoff
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._last_stdio: BoundedStdio | None = None
        self._pid = os.getpid()
        self._changed_at = 0.0
        self._starts = 0
        self._retired = False
        self._count_lock = threading.Lock()
        self.inflight = 0

    # -- state --
    def _live(self) -> _Connection | None:
        conn = self._conn
        if conn is None or self._pid != os.getpid():
            return None
        if conn.ended or conn.done.is_set():
            self._changed_at = max(self._changed_at, conn.tools_changed_at)
            self._conn = None
            return None
        return conn

    def _on_end(self, conn: _Connection) -> None:
        """A ready session ended without being closed (on the loop thread). One that had
        served and ended while idle (a server that exits when idle) is restarted at once;
        any other end counts as a failure."""
        if conn.problem or conn.lost or conn.inflight or not conn.served:
            self._backoff.failed()

    @property
    def alive(self) -> bool:
        return self._live() is not None

    @property
    def protocol_version(self) -> str:
        conn = self._live()
        client = conn.client if conn else None
        return (client.protocol_version or "") if client is not None else ""

    @property
    def tools_changed_at(self) -> float:
        conn = self._conn
        return max(self._changed_at, conn.tools_changed_at if conn else 0.0)

    def stderr_tail(self) -> str:
        """The last bytes the server wrote to stderr (stdio only), scrubbed."""
        stdio = self._last_stdio
        if stdio is None:
            return ""
        remember_secrets(self.spec.secrets)
        text, _ = scrub_text(stdio.stderr_tail().decode("utf-8", "replace"))
        return filter_text(text, secrets=list(self.spec.secrets), limit=STDERR_TAIL_BYTES)

    def _ensure(self) -> _Connection:
        with self._lock:
            if self._retired:
                raise McpUnavailable(
                    "this MCP session was closed (its settings changed, or the pool was "
                    "cleared); ask session_for for a new one"
                )
            conn = self._live()
            if conn is not None:
                return conn
            wait = self._backoff.wait_left()
            if wait > 0:
                raise McpUnavailable(
                    f"the MCP server failed {self._backoff.failures} time(s) in a row; "
                    f"it is started again in {wait:.1f} s"
                )
            conn = _Connection(self.spec, self._on_end)
            self._starts += 1
            try:
                _run(conn.start(), self.spec.connect_timeout + _WAIT_MARGIN + 8.0)
            except McpUnavailable:
                self._last_stdio = conn.stdio
                self._backoff.failed()
                raise
            except concurrent.futures.TimeoutError:
                self._backoff.failed()
                raise McpUnavailable("the MCP server did not start in time") from None
            self._last_stdio = conn.stdio
            if self._starts > 1:
                # A restarted server may list other tools: whoever pinned them re-checks.
                self._changed_at = time.monotonic()
            self._conn = conn
            return conn

    def _count(self, conn: _Connection, step: int) -> None:
        with self._count_lock:
            self.inflight += step
            conn.inflight += step

    def _request(self, conn: _Connection, method: str, timeout: float, **kwargs: Any):
        self._count(conn, 1)
        try:
            return _run(conn.request(method, timeout, **kwargs), timeout + _WAIT_MARGIN)
        except concurrent.futures.TimeoutError:
            raise McpCallLost(f"the MCP server did not answer {method} in time") from None
        finally:
            self._count(conn, -1)
            if self._retired and self.inflight == 0:
                self.close()

    def _succeeded(self, conn: _Connection) -> None:
        conn.served = True
        self._backoff.succeeded()

    # -- calls --
    def call_tool(self, name: str, arguments: dict, *, timeout: float | None = None) -> ToolResult:
        """Call one tool; raises McpUnavailable, McpCallLost or McpProtocolError."""
        timeout = timeout if timeout is not None else self.spec.call_timeout
        started = time.monotonic()
        conn = self._ensure()
        try:
            result = self._request(conn, "tools/call", timeout, name=name, arguments=arguments)
        except MCPError as exc:
            self._succeeded(conn)
            return self._refusal(exc, started)
        self._succeeded(conn)
        return _tool_result(result, int((time.monotonic() - started) * 1000), self.spec)

    def _refusal(self, exc: MCPError, started: float) -> ToolResult:
        remember_secrets(self.spec.secrets)
        text, echoed = scrub_text(filter_text(str(exc.error.message)[:MAX_DESCRIPTION_CHARS]))
        raw = json.dumps({"error": {"code": exc.code, "message": text}}).encode()
        return ToolResult(
            is_error=True,
            structured=None,
            text=text,
            content=[],
            raw=raw,
            elapsed_ms=int((time.monotonic() - started) * 1000),
            secret_echoed=echoed,
            error_code=exc.code,
        )

    def list_tools(self) -> list[dict]:
        """Every tool the server lists (bounded), cached until it says the list changed."""
        conn = self._ensure()
        if conn.tools is not None:
            return copy.deepcopy(conn.tools)
        seen_change = conn.tools_changed_at
        tools: list[dict] = []
        cursor = None
        for _ in range(MAX_TOOL_PAGES):
            try:
                page = self._request(conn, "tools/list", self.spec.call_timeout, cursor=cursor)
            except MCPError as exc:
                raise McpProtocolError(
                    f"the MCP server refused tools/list (JSON-RPC error {exc.code})", sent=True
                ) from None
            tools.extend(_tool_dict(tool, self.spec) for tool in page.tools)
            cursor = page.next_cursor
            if not cursor or len(tools) >= MAX_TOOLS:
                break
        self._succeeded(conn)
        tools = tools[:MAX_TOOLS]
        if conn.tools_changed_at == seen_change:
            conn.tools = tools
        return copy.deepcopy(tools)

    def _detach(self) -> _Connection | None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is None or self._pid != os.getpid() or conn.ended:
            return None
        return conn

    def close(self) -> None:
        """Close the session and stop its server (it starts again on the next call)."""
        _close_all([self._detach()])

    def _retire(self) -> None:
        self._retired = True
        if self.inflight == 0:
            self.close()


def _capped(value: Any, key: str = "") -> Any:
    """``value`` with every description and title (the tool's own, and those inside its
    schemas) cut to MAX_DESCRIPTION_CHARS: they are read by people and models alike."""
    if isinstance(value, str):
        if key in ("description", "title") and len(value) > MAX_DESCRIPTION_CHARS:
            return value[:MAX_DESCRIPTION_CHARS] + "…"
        return value
    if isinstance(value, dict):
        return {name: _capped(item, name) for name, item in value.items()}
    if isinstance(value, list):
        return [_capped(item) for item in value]
    return value


def _tool_dict(tool: types.Tool, spec: ServerSpec) -> dict:
    data = tool.model_dump(by_alias=True, mode="json", exclude_none=True)
    keep = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
    remember_secrets(spec.secrets)
    scrubbed, _ = scrub_value(_capped({key: data[key] for key in keep if key in data}))
    return scrubbed


def _tool_result(result: types.CallToolResult, elapsed_ms: int, spec: ServerSpec) -> ToolResult:
    """The result as Countersign keeps it: capped, scrubbed, non-text content summarised."""
    data = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    received = {
        "isError": bool(data.get("isError", False)),
        "content": data.get("content", []),
        "structuredContent": data.get("structuredContent"),
    }
    raw = json.dumps(received, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    limit = setting("COUNTERSIGN_MCP_MAX_RESULT_BYTES", 1024 * 1024)
    if len(raw) > limit:
        raise McpProtocolError(f"the MCP server's result was over {limit} bytes", sent=True)
    remember_secrets(spec.secrets)
    raw, echoed = scrub_bytes(raw)
    content: list[dict] = []
    texts: list[str] = []
    for item in received["content"]:
        if item.get("type") == "text" and isinstance(item.get("text"), str):
            text, hit = scrub_text(item["text"])
            echoed = echoed or hit
            texts.append(text)
            content.append({"type": "text", "text": text})
        else:
            kind, _ = scrub_text(str(item.get("type"))[:64])
            content.append({"type": kind, "omitted": True})
    structured, hit = scrub_value(received["structuredContent"])
    return ToolResult(
        is_error=received["isError"],
        structured=structured,
        text="\n".join(texts),
        content=content,
        raw=raw,
        elapsed_ms=elapsed_ms,
        secret_echoed=echoed or hit,
    )


# --- the pool ----------------------------------------------------------------------------


@dataclass
class _Entry:
    spec: ServerSpec
    slots: list[Session] = field(default_factory=list)

    def pick(self) -> Session:
        live = [slot for slot in self.slots if slot.alive]
        idle = [slot for slot in live if slot.inflight == 0]
        if idle:
            return idle[0]
        resting = [slot for slot in self.slots if slot not in live]
        if resting and (not live or resting[0]._backoff.wait_left() == 0):
            return resting[0]
        return min(live or self.slots, key=lambda slot: slot.inflight)


_pool: dict[Hashable, _Entry] = {}
_pool_lock = threading.Lock()


def session_for(key: Hashable, spec: ServerSpec) -> Session:
    """A session with the upstream ``spec`` describes, from this process's pool: up to
    COUNTERSIGN_MCP_SESSIONS_PER_SERVER per ``key``. A spec different from the pooled
    one replaces the entry (its sessions are closed once their calls end)."""
    retired: _Entry | None = None
    with _pool_lock:
        entry = _pool.get(key)
        if entry is None or entry.spec != spec:
            retired = entry
            backoff = _Backoff()
            count = max(1, setting("COUNTERSIGN_MCP_SESSIONS_PER_SERVER", 2))
            entry = _Entry(spec, [Session(spec, backoff) for _ in range(count)])
            _pool[key] = entry
        slot = entry.pick()
    if retired is not None:
        for old in retired.slots:
            old._retire()
    return slot


def _close_all(conns: list[_Connection | None]) -> None:
    """Close connections at once (each stop is bounded; they run side by side)."""
    live = [conn for conn in conns if conn is not None]
    if not live:
        return

    async def close() -> None:
        await asyncio.gather(*(conn.close() for conn in live))

    try:
        _run(close(), 15.0)
    except concurrent.futures.TimeoutError:
        logger.warning("MCP server sessions did not close in time")


def pool_clear() -> None:
    """Close every pooled session and stop its server (the tests, between upstreams).
    A session handed out before is closed for good: using it raises McpUnavailable."""
    with _pool_lock:
        entries = list(_pool.values())
        _pool.clear()
    slots = [slot for entry in entries for slot in entry.slots]
    for slot in slots:
        slot._retired = True
    _close_all([slot._detach() for slot in slots])


def _forget_after_fork() -> None:
    # A forked child must not share its parent's pipes or loop: forget them, untouched.
    global _loop, _loop_lock, _pool_lock
    _loop_lock = threading.Lock()
    _pool_lock = threading.Lock()
    _loop = None
    connection.started = 0
    _pool.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def _close_at_exit() -> None:
    if _loop is not None:
        pool_clear()


atexit.register(_close_at_exit)
