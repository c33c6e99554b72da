"""``python manage.py mcp``: the MCP server over stdio, as a desktop client starts it, with
the agent token from the environment, against the live worker and the demo upstream."""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import pytest
from mcp import Client

from actions.models import Agent
from approvals.mcp.protocol import UNAUTHENTICATED
from approvals.models import Plan
from demo.processes import ROOT
from tests.e2e.support import NEW_EMAIL, SETTLED
from tests.mcp.conftest import mcp_error, stdio_params, tool_input

pytestmark = pytest.mark.e2e

EMAIL = {"contact_id": "c-1001", "email": NEW_EMAIL, "reason": "asked by phone"}


def stdio(params, fn, *, mode: str = "auto"):
    async def main():
        async with Client(params, mode=mode, read_timeout_seconds=45) as client:
            return await fn(client)

    return anyio.run(main)


def test_propose_review_approve_and_read_the_outcome_over_stdio(
    live, live_env, agent_token, agent_api, rita, upstream
):
    """In the initialize-handshake protocol desktop clients speak; the refusals below use
    the 2026 one (both are negotiated over HTTP in test_http.py)."""
    params = stdio_params(live_env, agent_token, live["url"])
    catalog = agent_api.http.get("/actions").json()
    state: dict = {}

    async def session(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        proposed = await client.call_tool("update_contact_email", EMAIL)
        plan = proposed.structured_content
        # While the agent waits, a person finds the plan in the queue and approves it.
        assert plan["short_code"] in rita.http.get("/plans/").text
        rita.decide(plan["id"], "approve")
        for _ in range(6):
            result = await client.call_tool("get_plan", {"plan_id": plan["id"], "wait": 10})
            if result.structured_content["status"] in SETTLED:
                break
        state.update(tools=tools, proposed=proposed, result=result)

    stdio(params, session, mode="legacy")

    tools = state["tools"]
    assert set(tools) == {a["name"] for a in catalog} | {"get_plan", "cancel_plan"}
    for action in catalog:
        assert tool_input(tools[action["name"]]) == action["input_schema"]
    assert "nothing has been written" in state["proposed"].content[0].text
    assert state["proposed"].structured_content["review_url"].startswith(live["url"] + "/plans/")
    assert state["result"].structured_content["status"] == "completed"
    assert len(upstream.writes()) == 1


def test_a_wrong_token_or_an_inactive_agent_is_refused_over_stdio(
    live, live_env, agent, agent_token
):
    async def attempt(client):
        errors = []
        for call in (client.list_tools(), client.call_tool("update_contact_email", EMAIL)):
            try:
                await call
            except Exception as exc:  # noqa: BLE001 - inspected below
                errors.append(mcp_error(exc))
        return errors

    errors = stdio(stdio_params(live_env, "cs_not_a_token", live["url"]), attempt)
    Agent.objects.filter(pk=agent.pk).update(is_active=False)
    errors += stdio(stdio_params(live_env, agent_token, live["url"]), attempt)

    assert len(errors) == 4
    for error in errors:
        assert error.code == UNAUTHENTICATED
        assert error.data["type"] == "urn:countersign:problem:unauthenticated"
        assert error.data["title"] == "A valid agent token is required"
    assert not Plan.objects.exists()


def test_the_token_comes_only_from_the_environment(live_env):
    env = {k: v for k, v in live_env.items() if k != "COUNTERSIGN_AGENT_TOKEN"}
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp", "--token-env", "MY_AGENT_TOKEN"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "set the agent token in the environment variable MY_AGENT_TOKEN" in done.stderr
    assert done.stdout == ""  # stdout belongs to the protocol


def test_review_links_use_the_address_make_run_serves(tmp_path):
    """``make run PORT=9000`` records its address in var/public_url; a process it did not
    start (the stdio server a desktop client launches) links there too, unless
    COUNTERSIGN_PUBLIC_URL says otherwise."""
    (tmp_path / "public_url").write_text("http://127.0.0.1:9000\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env.update(COUNTERSIGN_ENV="embedded", COUNTERSIGN_VAR_DIR=str(tmp_path))
    show = "from django.conf import settings; print(settings.PUBLIC_URL)"

    def public_url(**extra) -> str:
        done = subprocess.run(
            [sys.executable, "-c", f"import django; django.setup(); {show}"],
            cwd=ROOT,
            env={**env, "DJANGO_SETTINGS_MODULE": "config.settings", **extra},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert public_url() == "http://127.0.0.1:9000"
    assert public_url(COUNTERSIGN_PUBLIC_URL="https://cs.example") == "https://cs.example"
