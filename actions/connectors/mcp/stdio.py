"""A bounded stdio transport for an upstream MCP server run as a child process.

The SDK's own stdio client reads the server's stdout a line at a time with no limit on
the line, and hands the server's stderr to a file of ours. Every byte an upstream writes
is hostile here: a server that prints one endless line, or writes to stderr forever,
must cost a bounded amount of memory and never block the session. So this transport:

- reads stdout in chunks and splits lines itself, refusing a line longer than
  ``max_message_bytes`` (it yields a ``MessageTooLarge`` item and stops reading; the
  session above drops the server);
- drains stderr continuously into a ring of the last ``STDERR_TAIL_BYTES`` (a full
  stderr pipe would otherwise stall a server mid-answer);
- starts the server in a session (process group) of its own with a minimal environment
  (never this process's: the web and worker environments hold the vault's keys), and
  stops it the way the spec says (close stdin, wait, then signal the whole group), every
  wait bounded, so closing never leaves a zombie or an orphan behind.

It yields the SDK's pair of memory streams, so ``mcp.Client`` runs over it unchanged
(``mcp.client._transport.Transport``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.message import SessionMessage

STDERR_TAIL_BYTES = 8 * 1024
READ_CHUNK = 64 * 1024
# The environment variables a server inherits from this process; everything else it
# needs (its credential included) comes from the connector's own ``env``.
SAFE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME")
# Stopping: how long the server has to exit once its stdin closes, then after SIGTERM,
# then after SIGKILL (only an unkillable process runs the last one out).
EXIT_GRACE = 0.5
TERM_GRACE = 1.0
KILL_GRACE = 2.0
_POLL = 0.01


class MessageTooLarge(Exception):
    """A line on the server's stdout was longer than the transport's limit."""


def safe_environment(extra: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """The few variables a server needs to run, from this process, with ``extra`` over
    them. Values that look like shell functions are not passed on."""
    env = {
        key: value
        for key in SAFE_ENV
        if (value := os.environ.get(key)) is not None and not value.startswith("()")
    }
    env.update(dict(extra))
    return env


class BoundedStdio:
    """One server process; enter it (as ``mcp.Client``'s transport) to start it.

    ``pid`` is set once started; ``stderr_tail()`` is the last bytes of its stderr.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        max_message_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.command = command
        self.args = list(args)
        self.env = env if env is not None else safe_environment()
        self.cwd = cwd or None
        self.max_message_bytes = max_message_bytes
        self.pid: int | None = None
        self.invalid_lines = 0
        self._stderr = bytearray()
        self._cm: Any = None

    def stderr_tail(self) -> bytes:
        return bytes(self._stderr)

    async def __aenter__(self):
        self._cm = self._run()
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc_info) -> bool | None:
        return await self._cm.__aexit__(*exc_info)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[tuple[Any, Any]]:
        process = await anyio.open_process(
            [self.command, *self.args],
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        self.pid = process.pid
        # No awaits until the task group is entered: a cancellation in the gap would
        # leave the process running with nobody to stop it.
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

        async def stdout_reader() -> None:
            async with read_writer:
                with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    await self._read_lines(process, read_writer)

        async def stdin_writer() -> None:
            try:
                async with write_reader:
                    async for message in write_reader:
                        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await process.stdin.send(data.encode() + b"\n")
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                # The server stopped reading: the session sees the end of the stream.
                await read_writer.aclose()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stdout_reader)
            tg.start_soon(stdin_writer)
            tg.start_soon(self._drain_stderr, process)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    read_stream.close()
                    write_stream.close()
                    await stop_process(process)
                tg.cancel_scope.cancel()

    async def _read_lines(self, process: anyio.abc.Process, out) -> None:
        """Split stdout into lines, each at most ``max_message_bytes``; parse each."""
        buffer = bytearray()
        limit = self.max_message_bytes
        while True:
            try:
                chunk = await process.stdout.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n", start)) != -1:
                line = bytes(buffer[start:end])
                start = end + 1
                if len(line) > limit:
                    await out.send(MessageTooLarge())
                    return
                if line.strip():
                    await out.send(_parse(line))
            del buffer[:start]
            if len(buffer) > limit:
                buffer.clear()
                await out.send(MessageTooLarge())
                return

    async def _drain_stderr(self, process: anyio.abc.Process) -> None:
        """Keep the last STDERR_TAIL_BYTES of stderr; never let the pipe fill."""
        if process.stderr is None:
            return
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            while True:
                self._stderr += await process.stderr.receive(READ_CHUNK)
                if len(self._stderr) > STDERR_TAIL_BYTES:
                    del self._stderr[:-STDERR_TAIL_BYTES]


def _parse(line: bytes) -> SessionMessage | Exception:
    """One JSON-RPC message, or the error as an item the session counts (no log of the
    line itself: it is the upstream's)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return ValueError(f"not a JSON-RPC message ({type(exc).__name__})")


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    # Polled, not process.wait(): that also waits for the pipes, which a grandchild may
    # hold open after the server itself is gone.
    deadline = anyio.current_time() + timeout
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(_POLL)
    return True


def _signal_group(pid: int, signum: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


async def stop_process(process: anyio.abc.Process) -> None:
    """Close stdin, give the server EXIT_GRACE to leave, then SIGTERM and SIGKILL its
    whole process group (it was started as a session of its own, so anything it started
    goes with it). Every wait is bounded."""
    with suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
        await process.stdin.aclose()
    if not await _exited(process, EXIT_GRACE):
        _signal_group(process.pid, signal.SIGTERM)
        if not await _exited(process, TERM_GRACE):
            _signal_group(process.pid, signal.SIGKILL)
            await _exited(process, KILL_GRACE)
    # What the server started and left behind goes too.
    _signal_group(process.pid, signal.SIGKILL)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                await stream.aclose()
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with suppress(PermissionError):
            close()
