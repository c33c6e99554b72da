"""The MCP server over streamable HTTP at /mcp, in the same ASGI application as the pages
and the JSON API: the official MCP client against a live uvicorn, a live worker and the
demo upstream."""

from __future__ import annotations

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from actions.models import Agent, AgentScope
from approvals.mcp.protocol import UNAUTHENTICATED
from approvals.models import Plan
from tests.e2e.support import NEW_EMAIL, SETTLED
from tests.mcp.conftest import http_client, mcp_error, same_reasons, tool_input

pytestmark = pytest.mark.e2e

EMAIL = {"contact_id": "c-1001", "email": NEW_EMAIL}


def mcp(url: str, token: str | None, fn, *, mode: str = "auto"):
    """Connect to the live server as ``token`` and run ``fn(client)``."""

    async def main():
        async with http_client(url, token, mode=mode) as client:
            return await fn(client)

    return anyio.run(main)


def refused_at_connect(url: str, token: str | None) -> MCPError:
    with pytest.raises(BaseException) as raised:  # noqa: B017 - unwrapped below
        mcp(url, token, lambda client: client.list_tools())
    error = mcp_error(raised.value)
    assert error is not None, raised.value
    return error


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_propose_review_approve_and_read_the_outcome_over_http(
    live, agent_token, agent_api, rita, upstream, mode
):
    """``auto`` negotiates the 2026 per-request protocol, ``legacy`` the initialize
    handshake: the server speaks both."""
    url = live["url"]
    catalog = agent_api.http.get("/actions").json()

    async def propose(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("update_contact_email", {**EMAIL, "reason": "asked"})
        return tools, result

    tools, proposed = mcp(url, agent_token, propose, mode=mode)

    assert set(tools) == {a["name"] for a in catalog} | {"get_plan", "cancel_plan"}
    for action in catalog:
        assert tool_input(tools[action["name"]]) == action["input_schema"]
    assert not proposed.is_error
    plan = proposed.structured_content
    assert plan["status"] == "awaiting_approval"
    assert plan["review_url"] == f"{url}/plans/{plan['id']}/"
    assert plan["review_url"] in proposed.content[0].text
    assert upstream.writes() == [], "proposing wrote upstream"

    # It is in the review queue; a person approves it there.
    assert plan["short_code"] in rita.http.get("/plans/").text
    rita.decide(plan["id"], "approve")

    async def follow(client):
        for _ in range(6):
            result = await client.call_tool("get_plan", {"plan_id": plan["id"], "wait": 10})
            if result.structured_content["status"] in SETTLED:
                break
        return result

    result = mcp(url, agent_token, follow, mode=mode)
    assert result.structured_content["status"] == "completed"
    assert result.structured_content["outcome"]["state"] == "completed"
    assert result.content[0].text.startswith("**Plan `completed`** — applied upstream")
    assert len(upstream.writes()) == 1
    assert upstream.state()["contacts"]["c-1001"]["email"] == NEW_EMAIL


def test_bad_calls_get_the_apis_reasons_and_create_nothing(
    live, catalog, agent, agent_token, agent_api
):
    url = live["url"]

    # An unknown field.
    bad = {"contact_id": "c-1001", "emial": NEW_EMAIL}
    result = mcp(url, agent_token, lambda c: c.call_tool("update_contact_email", bad))
    api = agent_api.http.post("/plans", json={"action": "update_contact_email", "input": bad})
    assert result.is_error and api.status_code == 422
    same_reasons(result.structured_content, api.json())
    assert "`/arguments/emial`: unknown field" in result.content[0].text

    # A target outside the agent's allow-list.
    AgentScope.objects.create(
        agent=agent, action=catalog["update_contact_email"], field="contact_id", values=["c-2"]
    )
    result = mcp(url, agent_token, lambda c: c.call_tool("update_contact_email", EMAIL))
    api = agent_api.http.post("/plans", json={"action": "update_contact_email", "input": EMAIL})
    assert result.is_error and api.status_code == 403
    same_reasons(result.structured_content, api.json())
    assert result.structured_content["type"] == "urn:countersign:problem:out-of-scope"

    # A wrong token, then an inactive agent: refused before anything is listed.
    for token in ("cs_not_a_token", None):
        error = refused_at_connect(url, token)
        assert error.code == UNAUTHENTICATED
        assert error.data["type"] == "urn:countersign:problem:unauthenticated"
    Agent.objects.filter(pk=agent.pk).update(is_active=False)
    error = refused_at_connect(url, agent_token)
    api = agent_api.http.get("/actions")
    assert api.status_code == 401
    same_reasons(error.data, api.json())
    assert error.message == (
        "A valid agent token is required: send Authorization: Bearer <agent token> "
        "[unauthenticated]"
    )

    assert not Plan.objects.exists()


def test_an_agent_without_the_action_neither_sees_nor_calls_its_tool(live, other_agent):
    _, token = other_agent

    async def session(client):
        names = [t.name for t in (await client.list_tools()).tools]
        with pytest.raises(MCPError) as refused:
            await client.call_tool("update_contact_email", EMAIL)
        return names, refused.value

    names, refused = mcp(live["url"], token, session)
    assert names == ["update_invoice_memo", "get_plan", "cancel_plan"]
    api = httpx.post(
        live["url"] + "/api/v1/plans",
        json={"action": "update_contact_email", "input": EMAIL},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert api.status_code == 403
    same_reasons(refused.data, api.json())
    assert not Plan.objects.exists()


def test_a_refused_token_is_a_bearer_challenge_with_the_reason(live):
    """The header names the metadata document and, for a token that was sent, why it was
    refused (what an SDK 1.x client, which raises on the status, carries in its
    exception); the body answers the request's id with the API's problem (what SDK 2.x
    shows)."""
    for token, request_id in ((None, 1), ("cs_not_a_token", "req-7")):
        headers = {"Accept": "application/json, text/event-stream"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        response = httpx.post(
            live["url"] + "/mcp",
            json={"jsonrpc": "2.0", "id": request_id, "method": "tools/list"},
            headers=headers,
        )
        assert response.status_code == 401
        challenge = response.headers["WWW-Authenticate"]
        metadata = f'resource_metadata="{live["url"]}/.well-known/oauth-protected-resource/mcp"'
        assert challenge.startswith("Bearer ") and metadata in challenge
        if token:
            assert 'error="invalid_token"' in challenge
            assert "error_description=\"the token is not an active agent's" in challenge
        else:
            assert "error=" not in challenge  # RFC 6750: no error without credentials
        body = response.json()
        assert body["id"] == request_id
        assert body["error"]["code"] == UNAUTHENTICATED
        assert body["error"]["data"]["title"] == "A valid agent token is required"


def test_there_is_no_standing_event_stream(live, agent_token):
    """GET /mcp would open a stream that never ends: it is 405, as the docs say."""
    for method in ("GET", "DELETE"):
        response = httpx.request(
            method,
            live["url"] + "/mcp",
            headers={"Authorization": f"Bearer {agent_token}", "Accept": "text/event-stream"},
            timeout=5,
        )
        assert response.status_code == 405
        assert response.headers["Allow"] == "POST"


def test_a_foreign_host_is_refused(live, agent_token):
    response = httpx.post(
        live["url"] + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Host": "evil.example", "Authorization": f"Bearer {agent_token}"},
    )
    assert response.status_code == 400


def test_where_oauth_clients_look_for_an_authorization_server_json_says_there_is_none(live):
    """Every path an OAuth client tries after the protected resource metadata (RFC 8414
    and OpenID discovery, with the /mcp path inserted or appended; registration, token,
    authorization) answers 404 with an OAuth error body saying how to authenticate:
    never Django's HTML 404, which the SDKs failed to parse ("Unexpected token '<'")."""
    from approvals.mcp.http import NO_AUTHORIZATION_SERVER_PATHS

    paths = {
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-authorization-server/mcp",
        "/.well-known/openid-configuration",
        "/.well-known/openid-configuration/mcp",
        "/mcp/.well-known/openid-configuration",
        "/register",
        "/authorize",
        "/token",
    }
    assert paths == NO_AUTHORIZATION_SERVER_PATHS
    for path in sorted(paths):
        for method in ("GET", "POST"):
            body = {} if method == "POST" else None
            response = httpx.request(method, live["url"] + path, json=body)
            assert response.status_code == 404, (method, path)
            assert response.headers["Content-Type"] == "application/json", (method, path)
            body = response.json()
            assert body["error"] == "access_denied"
            assert body["error_description"].startswith(
                "Countersign has no OAuth authorization server and no client registration."
            )
            assert "Authorization: Bearer <token>" in body["error_description"]
            assert body["resource_metadata"] == (
                live["url"] + "/.well-known/oauth-protected-resource/mcp"
            )
    # The pages around them are still Django's.
    assert httpx.get(live["url"] + "/registered").headers["Content-Type"].startswith("text/html")
