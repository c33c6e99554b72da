"""MCP as clients speak it now, with the official SDK's client (the one installed: mcp
2.3) against the live processes — uvicorn for HTTP, ``manage.py mcp`` for stdio, a
Celery worker, the demo upstream — and the decisions made in this test process, as a
reviewer in another process would: hints per class, a repeat proposal, a subscription
that hears the approval and the completion, a task, consent by URL elicitation
(accepted, declined, unsupported), the 2026-07-28 discovery and a multi-round-trip call
whose sealed state any process verifies once, and the protected resource metadata."""

from __future__ import annotations

import json
import warnings
from typing import Any, Literal

import anyio
import httpx
import httpx2
import mcp.types as types
import pytest
from django.db import connections
from mcp import Client
from mcp.client.auth.utils import (
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
)
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from pydantic import Field

from approvals.models import Plan, PlanStatus
from approvals.services import approval_record
from tests.e2e.support import NEW_EMAIL
from tests.mcp.conftest import http_client, stdio_params
from tests.mcp.test_server import HINTS, hint_tuple

pytestmark = pytest.mark.e2e

EMAIL = {"contact_id": "c-1001", "email": NEW_EMAIL}


def decide(reviewer, plan_id: str, decision: str = "approve") -> None:
    """A reviewer's decision, made in this process (not the one serving the client)."""
    plan = Plan.objects.get(id=plan_id)
    try:
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision=decision,
            fingerprint_seen=plan.fingerprint,
        )
    finally:
        connections.close_all()


def over_http(url: str, token: str, fn, **client_kw):
    async def main():
        async with http_client(url, token, **client_kw) as client:
            return await fn(client)

    return anyio.run(main)


def over_stdio(params, fn, *, mode: str = "auto", **client_kw):
    async def main():
        async with Client(params, mode=mode, read_timeout_seconds=60, **client_kw) as client:
            return await fn(client)

    return anyio.run(main)


async def tool_hints(client) -> dict[str, tuple]:
    return {t.name: hint_tuple(t.annotations) for t in (await client.list_tools()).tools}


async def plan_status(client, plan_id: str) -> str:
    read = await client.read_resource(f"countersign://plans/{plan_id}")
    documents = [c for c in read.contents if c.mime_type == "application/json"]
    return json.loads(documents[0].text)["status"]


# --- hints and repeats, over both transports ----------------------------------------------


def test_hints_per_class_and_a_repeat_proposal_over_http_and_stdio(
    live, live_env, agent_token, catalog, upstream
):
    """Each transport lists the hints by class, then proposes the same change three
    times: the same plan every time while it awaits a decision (stdio in the handshake
    era, HTTP in the 2026 one)."""
    expected = {name: HINTS[name] for name in catalog}

    async def session(client):
        hints = await tool_hints(client)
        first = await client.call_tool("update_contact_email", {**EMAIL, "reason": "asked"})
        again = await client.call_tool("update_contact_email", {**EMAIL, "reason": "retry"})
        keyed = await client.call_tool("update_contact_email", {**EMAIL, "idempotency_key": "k-1"})
        return hints, [r.structured_content for r in (first, again, keyed)]

    http_hints, http = over_http(live["url"], agent_token, session)
    stdio_params_ = stdio_params(live_env, agent_token, live["url"])
    stdio_hints, stdio = over_stdio(stdio_params_, session, mode="legacy")
    for hints in (http_hints, stdio_hints):
        assert {n: h for n, h in hints.items() if n in catalog} == expected
        assert hints["delete_contact"][1] is True  # destructive: clients confirm first
        assert hints["send_reminder"][1] is True  # external
        assert hints["get_contact"][0] is True  # a read
        assert hints["update_contact_email"][1] is False  # reversible
    assert {p["id"] for p in http + stdio} == {http[0]["id"]}
    assert http[1]["reason"] == "asked"  # the plan as first proposed
    assert Plan.objects.count() == 1
    kinds = Plan.objects.get().events.values_list("kind", flat=True)
    # Four repeats; the stdio keyed call replays the key the HTTP one left on the plan.
    assert list(kinds).count("plan.repeated") == 4
    assert upstream.writes() == []


# --- outcomes without polling ---------------------------------------------------------------


def test_a_subscription_hears_the_approval_and_the_completion_over_http(
    live, agent_token, reviewer, other_agent, upstream
):
    """subscriptions/listen (2026-07-28): the reviewer approves in this process and the
    worker completes in its own; the web process holding the stream hears both through
    the Redis wake-ups."""

    async def follow(client):
        assert client.protocol_version == "2026-07-28"
        plan = (await client.call_tool("update_contact_email", EMAIL)).structured_content
        uri = f"countersign://plans/{plan['id']}"
        foreign = "countersign://plans/00000000-0000-4000-8000-000000000000"
        statuses = []
        async with client.listen(resource_subscriptions=[uri, foreign]) as sub:
            # Only the agent's own plan is honoured.
            assert sub.honored.resource_subscriptions == [uri]
            await anyio.to_thread.run_sync(decide, reviewer, plan["id"])
            with anyio.fail_after(60):
                async for event in sub:
                    assert event.uri == uri
                    statuses.append(await plan_status(client, plan["id"]))
                    if statuses[-1] == PlanStatus.COMPLETED:
                        break
        return statuses

    statuses = over_http(live["url"], agent_token, follow)
    assert statuses[-1] == "completed"
    assert len(upstream.writes()) == 1


def test_a_subscription_over_stdio_in_the_handshake_era(
    live, live_env, agent_token, reviewer, upstream
):
    """resources/subscribe and notifications/resources/updated on the stdio connection."""
    updates: list[str] = []

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(message.params.uri)

    async def follow(client):
        assert client.server_capabilities.resources.subscribe is True
        plan = (await client.call_tool("update_contact_email", EMAIL)).structured_content
        uri = f"countersign://plans/{plan['id']}"
        await client.subscribe_resource(uri)
        await anyio.to_thread.run_sync(decide, reviewer, plan["id"])
        status, heard = None, 0
        with anyio.fail_after(60):
            while status != PlanStatus.COMPLETED:
                while len(updates) == heard:
                    await anyio.sleep(0.05)
                heard = len(updates)
                status = await plan_status(client, plan["id"])
        await client.unsubscribe_resource(uri)
        return uri, status

    params = stdio_params(live_env, agent_token, live["url"])
    with warnings.catch_warnings():
        # resources/subscribe is the handshake era's way, deprecated as of 2026-07-28.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        uri, status = over_stdio(params, follow, mode="legacy", message_handler=on_message)
    assert status == "completed"
    assert updates and set(updates) == {uri}


class _TaskParams(types.RequestParams):
    task_id: str = Field(alias="taskId")


class _GetTask(types.Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: _TaskParams


class _CreateTask(types.Result):
    result_type: Literal["task"] = "task"
    task_id: str = Field(alias="taskId")
    status: str
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class _TaskState(types.Result):
    task_id: str = Field(alias="taskId")
    status: str
    status_message: str | None = Field(default=None, alias="statusMessage")
    result: dict[str, Any] | None = None


async def _unresolved(result, ctx):  # pragma: no cover - the test drives the task itself
    raise AssertionError("resolved by the test")


class Tasks(ClientExtension):
    """The tasks extension on the SDK's client seam: the declaration, and the claim on
    the ``resultType: "task"`` shape (the SDK has no tasks support of its own)."""

    identifier = "io.modelcontextprotocol/tasks"

    def claims(self):
        return [ResultClaim(result_type="task", model=_CreateTask, resolve=_unresolved)]


def test_a_task_based_call_completes_when_the_plan_settles(live, agent_token, reviewer, upstream):
    async def run(client):
        caps = client.server_capabilities
        assert "io.modelcontextprotocol/tasks" in (caps.extensions or {})
        created = await client.session.call_tool("update_contact_email", EMAIL, allow_claimed=True)
        assert isinstance(created, _CreateTask) and created.status == "working"
        get = _GetTask(params=_TaskParams(taskId=created.task_id))
        first = await client.session.send_request(get, _TaskState)
        await anyio.to_thread.run_sync(decide, reviewer, created.task_id)
        with anyio.fail_after(60):
            while (state := await client.session.send_request(get, _TaskState)).status == (
                "working"
            ):
                await anyio.sleep(0.2)
        return created, first, state

    created, first, state = over_http(live["url"], agent_token, run, extensions=[Tasks()])
    assert Plan.objects.get(id=created.task_id).status == PlanStatus.COMPLETED
    assert first.status == "working" and "awaiting_approval" in first.status_message
    assert state.status == "completed"
    assert state.result["structuredContent"]["status"] == "completed"
    assert state.result["structuredContent"]["id"] == created.task_id
    # A client that did not declare the extension gets the tool result, and no task.
    plain = over_http(live["url"], agent_token, lambda c: c.call_tool("update_invoice_memo", MEMO))
    assert plain.structured_content["status"] == "awaiting_approval"

    async def undeclared(client):
        get = _GetTask(params=_TaskParams(taskId=created.task_id))
        with pytest.raises(MCPError) as refused:
            await client.session.send_request(get, _TaskState)
        return refused.value

    assert over_http(live["url"], agent_token, undeclared).code == -32021


MEMO = {"invoice_id": "inv-2001", "memo": "thanks"}


# --- consent in the client: URL elicitation ---------------------------------------------------


def consent_callback(answer: str, asked: list, *, then=None):
    async def elicit(context, params):
        asked.append(params)
        if then is not None:
            await anyio.to_thread.run_sync(then)
        return types.ElicitResult(action=answer)

    return elicit


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_consent_accepted_returns_once_decided(
    transport, live, live_env, agent_token, reviewer, upstream
):
    asked: list = []

    def approve_it():
        decide(reviewer, str(Plan.objects.get().id))

    callback = consent_callback("accept", asked, then=approve_it)
    call = lambda c: c.call_tool("update_contact_email", EMAIL)  # noqa: E731
    if transport == "http":
        result = over_http(live["url"], agent_token, call, elicitation_callback=callback)
    else:
        params = stdio_params(live_env, agent_token, live["url"])
        result = over_stdio(params, call, mode="legacy", elicitation_callback=callback)
    plan = Plan.objects.get()
    (request,) = asked
    assert request.mode == "url"  # never a form: approval is not typed into the client
    # The page on the site the product is configured with (the client shows its domain).
    assert request.url == result.structured_content["review_url"]
    assert request.url == f"{live['url']}/plans/{plan.id}/"
    assert plan.short_code in request.message
    assert result.structured_content["id"] == str(plan.id)
    assert result.structured_content["status"] != "awaiting_approval"
    assert result.structured_content["approved_by"] == "reviewers"


def test_consent_declined_or_dismissed_leaves_the_plan_awaiting(
    live, live_env, agent_token, upstream
):
    """Over HTTP (2026-07-28) the user declines; over stdio (the handshake era) the same
    proposal — the same plan, still awaiting — is asked about again and declined, then
    dismissed. None of it is a denial."""
    asked: list = []
    answers = iter(["decline", "decline", "cancel"])

    async def elicit(context, params):
        asked.append(params)
        return types.ElicitResult(action=next(answers))

    async def twice(client):
        return [await client.call_tool("update_contact_email", EMAIL) for _ in range(2)]

    results = [
        over_http(
            live["url"],
            agent_token,
            lambda c: c.call_tool("update_contact_email", EMAIL),
            elicitation_callback=elicit,
        )
    ]
    params = stdio_params(live_env, agent_token, live["url"])
    results += over_stdio(params, twice, mode="legacy", elicitation_callback=elicit)
    assert len(asked) == 3 and {r.mode for r in asked} == {"url"}
    for result in results:
        assert not result.is_error
        assert result.structured_content["status"] == "awaiting_approval"
        assert "That is not a denial" in result.content[0].text
    assert "chose not to open" in results[0].content[0].text
    assert "was not opened" in results[2].content[0].text
    plan = Plan.objects.get()
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert not plan.events.filter(kind="plan.denied").exists()


def test_consent_unsupported_returns_the_plan_at_once(live, live_env, agent_token, upstream):
    """No elicitation callback: the SDK declares no elicitation, and nothing is asked.
    Likewise in the handshake era over stateless HTTP, which has no back channel."""
    call = lambda c: c.call_tool("update_contact_email", EMAIL)  # noqa: E731
    modern = over_http(live["url"], agent_token, call)
    asked: list = []
    legacy_http = over_http(
        live["url"],
        agent_token,
        call,
        mode="legacy",
        elicitation_callback=consent_callback("accept", asked),
    )
    assert asked == []
    for result in (modern, legacy_http):
        assert result.structured_content["status"] == "awaiting_approval"
        assert "nothing has been written" in result.content[0].text


# --- the 2026-07-28 era -----------------------------------------------------------------------


def test_discovery_and_a_multi_round_trip_call_whose_state_any_process_verifies_once(
    live, agent_token, reviewer, upstream, transactional_db
):
    """server/discover negotiates 2026-07-28; the consent round's requestState is sealed
    by the live web process and verified by another one (an in-process server with the
    same settings), once: a second use, anywhere, is refused, as is a tampered one."""
    from approvals.mcp.protocol import build_server

    async def first_round(client):
        discovered = client.session.discover_result
        result = await client.session.call_tool(
            "update_contact_email", EMAIL, allow_input_required=True
        )
        return client.protocol_version, discovered, result

    async def accept(state: str):
        async with Client(build_server(lambda ctx: agent_token), mode="2026-07-28") as other:
            return await other.session.call_tool(
                "update_contact_email",
                EMAIL,
                input_responses={"review": types.ElicitResult(action="accept")},
                request_state=state,
                allow_input_required=True,
            )

    async def replay(client, state: str):
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool(
                "update_contact_email",
                EMAIL,
                input_responses={"review": types.ElicitResult(action="accept")},
                request_state=state,
                allow_input_required=True,
            )
        return refused.value

    callback = consent_callback("accept", [])
    version, discovered, first = over_http(
        live["url"], agent_token, first_round, elicitation_callback=callback
    )
    assert version == "2026-07-28"
    assert "2026-07-28" in discovered.supported_versions
    caps = discovered.capabilities
    assert caps.resources.subscribe is True and "io.modelcontextprotocol/tasks" in caps.extensions
    assert isinstance(first, types.InputRequiredResult)
    (request,) = first.input_requests.values()
    assert request.params.mode == "url"
    state = first.request_state
    plan = Plan.objects.get()
    assert str(plan.id) not in state  # sealed, not merely signed

    decide(reviewer, str(plan.id))
    resumed = anyio.run(accept, state)
    assert resumed.structured_content["id"] == str(plan.id)
    assert resumed.structured_content["approved_by"] == "reviewers"

    refused = over_http(live["url"], agent_token, lambda c: replay(c, state))
    assert refused.code == types.INVALID_PARAMS
    assert refused.message == "Invalid or expired requestState"
    tampered = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
    refused = over_http(live["url"], agent_token, lambda c: replay(c, tampered))
    assert refused.message == "Invalid or expired requestState"
    assert Plan.objects.count() == 1


# --- authorization: RFC 9728 --------------------------------------------------------------------


def test_the_protected_resource_metadata_is_discoverable_from_the_challenge(live, agent_token):
    url = live["url"]
    refused = httpx2.post(
        url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert refused.status_code == 401
    advertised = extract_resource_metadata_from_www_auth(refused)
    assert advertised == f"{url}/.well-known/oauth-protected-resource/mcp"
    # The SDK's discovery order: the advertised URL, then the path-inserted and root forms.
    for where in build_protected_resource_metadata_discovery_urls(advertised, url + "/mcp"):
        response = httpx.get(where)
        assert response.status_code == 200, where
        document = response.json()
        assert document["resource"] == f"{url}/mcp"
        assert document["bearer_methods_supported"] == ["header"]
        assert document["resource_documentation"] == f"{url}/api/v1/docs"
        assert "authorization_servers" not in document  # tokens come from an administrator
    assert httpx.post(advertised).status_code == 405
    # Agent bearer tokens keep working.
    tools = over_http(url, agent_token, lambda c: c.list_tools())
    assert "get_plan" in [t.name for t in tools.tools]
