"""Fixtures for the MCP server: the official MCP client over streamable HTTP and stdio,
in-process servers, and the e2e actors (the agent's JSON API client, a reviewer)."""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from demo.processes import ROOT
from tests.e2e.conftest import agent_api, rita  # noqa: F401  (fixtures)


@asynccontextmanager
async def http_client(base_url: str, token: str | None, *, mode: str = "auto", **client_kw):
    """The official MCP client on ``/mcp``, with the token as a bearer header."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60)) as http:
        transport = streamable_http_client(base_url + "/mcp", http_client=http)
        async with Client(transport, mode=mode, read_timeout_seconds=60, **client_kw) as client:
            yield client


def stdio_params(env: dict[str, str], token: str, url: str) -> StdioServerParameters:
    """``python manage.py mcp`` with the agent token in the environment, as a desktop
    client would start it."""
    return StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp"],
        env={**env, "COUNTERSIGN_AGENT_TOKEN": token, "COUNTERSIGN_PUBLIC_URL": url},
        cwd=str(ROOT),
    )


def _connector():
    from approvals.mcp.protocol import build_server

    @asynccontextmanager
    async def connect(token: str, *, mode: str = "auto"):
        async with Client(build_server(lambda ctx: token), mode=mode) as client:
            yield client

    return connect


@pytest.fixture
def in_process(db, monkeypatch):
    """An in-process MCP client for a server answering as the holder of ``token``.

    The server's database calls run inline on the test's own connection, inside its
    transaction (fast, rolled back). In production they run in worker threads on
    connections of their own: ``in_process_threads`` and the live servers in
    test_http.py and test_stdio.py exercise that.
    """
    from django.db import connections

    # The event loop's context would otherwise get a fresh connection of its own, outside
    # the test's transaction; it is the same thread, so sharing this one is safe.
    test_connection = connections["default"]

    def inline(fn):
        async def call(*args, **kwargs):
            connections["default"] = test_connection
            return fn(*args, **kwargs)

        return call

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    monkeypatch.setattr("approvals.mcp.protocol._db", inline)
    # The check of the agents of open requests (approvals.wakeups.AgentWatcher) as well.
    monkeypatch.setattr("approvals.wakeups.db_call", inline)
    return _connector()


@pytest.fixture
def in_process_threads(transactional_db):
    """The in-process client with the server's real worker threads (committed data)."""
    return _connector()


def tool_input(tool) -> dict:
    """A tool's input schema without the reason and the idempotency key Countersign adds
    to every action."""
    schema = dict(tool.input_schema)
    added = ("reason", "idempotency_key")
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k not in added}
    return schema


def same_reasons(mcp_problem: dict, api_problem: dict) -> None:
    """The MCP refusal says what the API says; only the pointers' roots differ
    (``/arguments/…`` in the tools/call parameters, ``/input/…`` in the API body)."""
    for key in ("type", "title", "status", "detail"):
        assert mcp_problem[key] == api_problem[key], key
    api_errors = [
        (e["pointer"].replace("/input", "/arguments", 1), e["message"])
        for e in api_problem.get("errors", [])
    ]
    assert [(e["pointer"], e["message"]) for e in mcp_problem.get("errors", [])] == api_errors


def mcp_error(exc: BaseException) -> MCPError | None:
    """The MCPError inside what the client raised (it may arrive in exception groups)."""
    if isinstance(exc, MCPError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = mcp_error(inner)
        if found is not None:
            return found
    return None
