"""config/asgi.py: one ASGI application for the pages, the JSON API and /mcp, with or
without lifespan events."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


@pytest.mark.django_db(transaction=True)
def test_the_same_application_serves_pages_api_and_mcp_with_lifespan(catalog, agent_token):
    """Under a server that sends lifespan events (uvicorn's default, as in ``make run``):
    startup completes, /mcp and Django both answer, shutdown stops the MCP session
    manager. The live server runs with lifespan off and starts it on first use."""
    from config.asgi import application

    async def main():
        received: list[dict] = [{"type": "lifespan.startup"}]
        sent: list[dict] = []
        shutdown = anyio.Event()

        async def receive():
            if received:
                return received.pop(0)
            await shutdown.wait()
            return {"type": "lifespan.shutdown"}

        async def send(message):
            sent.append(message)

        async with anyio.create_task_group() as tg:
            tg.start_soon(
                application, {"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send
            )
            transport = httpx2.ASGITransport(app=application)
            headers = {"Authorization": f"Bearer {agent_token}"}
            async with httpx2.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", headers=headers
            ) as http:
                login = await http.get("/accounts/login/")
                stream = streamable_http_client("http://127.0.0.1/mcp", http_client=http)
                async with Client(stream) as client:
                    tools = await client.list_tools()
            runner = application.mcp_app._runner
            shutdown.set()
        return sent, login, tools, runner

    sent, login, tools, runner = anyio.run(main)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert login.status_code == 200
    assert "update_contact_email" in [t.name for t in tools.tools]
    assert runner.done()
    # A later request would start a fresh session manager (they cannot be restarted).
    assert application.mcp_app._manager is None
