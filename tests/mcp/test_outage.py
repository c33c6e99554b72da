"""A database outage met by an MCP request after its token was checked (over stdio, or
the database going away during the request): a JSON-RPC error ``UNAVAILABLE`` with the
API's 503 problem and when to try again, in both protocol eras, for every kind of
request; never an internal error. (Over HTTP the token check meets it first: the live
cluster test, tests/e2e/test_database_outage.py.)

The suite's database cannot be stopped under the test: the outage is the error psycopg
raises for a connection the server closed, raised by the agent look-up from the second
call of the session on."""

from __future__ import annotations

import anyio
import psycopg
import pytest
from django.db import OperationalError
from mcp.shared.exceptions import MCPError

from approvals.mcp import boundary
from approvals.mcp.protocol import UNAVAILABLE
from approvals.models import Plan

PLAN_ID = "6f9619ff-8b86-d011-b42d-00cf4fc964ff"
EMAIL_ARGS = {"contact_id": "c-1001", "email": "ada@new.example", "reason": "customer asked"}


@pytest.fixture(autouse=True)
def _own_outage_monitor(monkeypatch):
    """An outage this test logs is its own: the process's monitor is left alone."""
    from actions.lib import outage

    monkeypatch.setattr(outage, "monitor", outage.Monitor(probe=lambda: True))


@pytest.fixture
def database_goes_away(monkeypatch):
    real = boundary.agent_authenticate
    state = {"calls": 0}

    def agent_authenticate(token):
        state["calls"] += 1
        if state["calls"] > 1:
            error = OperationalError("server closed the connection unexpectedly")
            error.__cause__ = psycopg.OperationalError("server closed the connection")
            raise error
        return real(token)

    monkeypatch.setattr(boundary, "agent_authenticate", agent_authenticate)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("call", ["call_tool", "list_tools", "list_resources", "get_plan"])
def test_an_outage_is_unavailable_with_when_to_try_again(
    in_process, catalog, agent_token, database_goes_away, mode, call
):
    async def session(client):
        era["version"] = client.protocol_version
        await client.list_tools()  # the database is there
        with pytest.raises(MCPError) as refused:
            if call == "call_tool":
                await client.call_tool("update_contact_email", EMAIL_ARGS)
            elif call == "get_plan":
                await client.call_tool("get_plan", {"plan_id": PLAN_ID})
            else:
                await getattr(client, call)()
        return refused.value

    async def main():
        async with in_process(agent_token, mode=mode) as client:
            return await session(client)

    era: dict[str, str] = {}
    error = anyio.run(main)
    assert (era["version"] == "2026-07-28") == (mode == "auto")
    assert error.code == UNAVAILABLE
    assert error.data["type"] == "urn:countersign:problem:database-unavailable"
    assert error.data["status"] == 503
    assert error.data["retry_after"] == 2
    assert "[database-unavailable]" in error.message
    assert not Plan.objects.exists()
