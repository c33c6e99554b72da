"""An agent revoked (``revoke_agent``) or deactivated (in the admin) is cut off on every
MCP surface that was open when it happened, not only at its next request: a ``get_plan``
wait ends with the unauthenticated error instead of the plan, in both protocol eras, over
HTTP (the live uvicorn) and stdio (``manage.py mcp``); a 2026-07-28 ``subscriptions/listen``
stream is closed with that error, and so is a 2025-11-25 ``tasks/result`` wait; a stdio
``resources/subscribe`` stops delivering, and the session's requests are refused.

Each wait asks for 30 s; it must end within a few seconds of the cut (the server checks
every COUNTERSIGN_AGENT_CHECK_SECONDS, 0.5 s), which only a wait woken by the cut does."""

from __future__ import annotations

import json
import tempfile
import time
import warnings
from typing import Literal

import anyio
import mcp.types as types
import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client as DjangoClient
from django.urls import reverse
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import Field

from actions.models import Agent
from actions.services import agent_revoke
from approvals.mcp.protocol import CUT_OFF, UNAUTHENTICATED
from approvals.models import Plan, PlanStatus
from tests.e2e.support import eventually
from tests.mcp.conftest import http_client, mcp_error, stdio_params

pytestmark = pytest.mark.e2e

CUTS = ["revoke", "deactivate"]
WAIT = 30  # what each wait asks for
CUT_WITHIN = 10  # seconds after the cut by which it must have ended (well before WAIT)
SETTLE = 1.0  # seconds a call is given to reach its wait before the cut


def deactivate_in_admin(agent: Agent) -> None:
    """What an administrator does: untick "active" on the agent's change page."""
    admin, _ = get_user_model().objects.get_or_create(
        username="ada-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = DjangoClient()
    client.force_login(admin)
    response = client.post(
        reverse("admin:actions_agent_change", args=[agent.pk]),
        {
            "actions": [str(a.pk) for a in agent.actions.all()],
            "attributes": json.dumps(agent.attributes),
            "scopes-TOTAL_FORMS": "0",
            "scopes-INITIAL_FORMS": "0",
            "scopes-MIN_NUM_FORMS": "0",
            "scopes-MAX_NUM_FORMS": "1000",
        },
    )
    assert response.status_code == 302, response.content[:500]


def cut_off(agent: Agent, how: str) -> float:
    """Revoke or deactivate the agent (committed); returns when that was done."""
    try:
        if how == "revoke":
            agent_revoke(name=agent.name, actor="cli")  # what manage.py revoke_agent does
        else:
            deactivate_in_admin(agent)
        assert not Agent.objects.get(pk=agent.pk).is_active
        return time.monotonic()
    finally:
        connections.close_all()


async def cut_later(agent: Agent, how: str, when: dict) -> None:
    await anyio.sleep(SETTLE)
    when["cut"] = await anyio.to_thread.run_sync(cut_off, agent, how)


def assert_cut_off(error, when: dict) -> None:
    """Refused mid-request (not at its start), soon after the cut."""
    assert error is not None
    assert error.code == UNAUTHENTICATED
    assert error.data["type"] == "urn:countersign:problem:unauthenticated"
    assert error.data["detail"] == CUT_OFF
    assert "cut" in when, "refused before the cut"
    assert when["ended"] - when["cut"] < CUT_WITHIN, when


async def get_plan_cut_off(client, agent, how: str, plan_id: str) -> dict:
    """An open get_plan wait, and the cut while it waits; returns what the call raised."""
    when: dict = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(cut_later, agent, how, when)
        try:
            result = await client.call_tool("get_plan", {"plan_id": plan_id, "wait": WAIT})
        except Exception as exc:  # noqa: BLE001 - inspected by the caller
            when["error"] = mcp_error(exc)
        else:
            when["result"] = result
        when["ended"] = time.monotonic()
    return when


def plans(make_plan, n: int) -> list[Plan]:
    """``n`` distinct plans awaiting a decision (one per demo contact)."""
    return [
        make_plan(input={"contact_id": f"c-100{i + 1}", "email": f"new{i}@new.example"})
        for i in range(n)
    ]


def listen_error(exc: BaseException):
    """The server's error that ended a listen stream: the client raises SubscriptionLost
    (not the graceful close) from it."""
    lost = exc
    while isinstance(lost, BaseExceptionGroup) and len(lost.exceptions) == 1:
        lost = lost.exceptions[0]
    assert isinstance(lost, SubscriptionLost), repr(exc)
    return mcp_error(lost.__cause__)


def followed(plan: Plan) -> str:
    return f"countersign://plans/{plan.id}"


# --- HTTP ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", CUTS)
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_an_open_get_plan_wait_is_cut_off_over_http(live, agent, agent_token, make_plan, mode, how):
    """``auto`` negotiates 2026-07-28, ``legacy`` the initialize handshake."""
    plan = make_plan()

    async def main():
        async with http_client(live["url"], agent_token, mode=mode) as client:
            return await get_plan_cut_off(client, agent, how, str(plan.id))

    when = anyio.run(main)
    assert "result" not in when, "the plan was returned to a cut-off agent"
    assert_cut_off(when["error"], when)
    assert Plan.objects.get(pk=plan.pk).status == PlanStatus.AWAITING_APPROVAL


class _TaskParams(types.RequestParams):
    task_id: str = Field(alias="taskId")


class _TaskResult(types.Request[_TaskParams, Literal["tasks/result"]]):
    method: Literal["tasks/result"] = "tasks/result"
    params: _TaskParams


@pytest.mark.parametrize("how", CUTS)
def test_an_open_task_result_wait_is_cut_off_over_http(live, agent, agent_token, make_plan, how):
    """The 2025-11-25 tasks form (the handshake era): ``tasks/result`` on a plan still
    awaiting a decision waits for it to settle, and is cut off like get_plan."""
    plan = make_plan()

    async def main():
        when: dict = {}
        async with http_client(live["url"], agent_token, mode="legacy") as client:
            request = _TaskResult(params=_TaskParams(taskId=str(plan.id)))
            async with anyio.create_task_group() as tg:
                tg.start_soon(cut_later, agent, how, when)
                try:
                    when["result"] = await client.session.send_request(request, types.Result)
                except Exception as exc:  # noqa: BLE001 - inspected below
                    when["error"] = mcp_error(exc)
                when["ended"] = time.monotonic()
        return when

    when = anyio.run(main)
    assert "result" not in when, "the plan's result was returned to a cut-off agent"
    assert_cut_off(when["error"], when)


@pytest.mark.parametrize("how", CUTS)
def test_an_open_listen_stream_is_closed_over_http(live, agent, agent_token, make_plan, how):
    """A subscriptions/listen stream (2026-07-28) opened before the cut ends with the
    unauthenticated error; a change to the plan after it is not delivered."""
    plan = make_plan()
    events: list[str] = []

    async def main():
        when: dict = {}
        async with http_client(live["url"], agent_token) as client:
            assert client.protocol_version == "2026-07-28"
            try:
                async with client.listen(resource_subscriptions=[followed(plan)]) as sub:
                    assert sub.honored.resource_subscriptions == [followed(plan)]
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(cut_later, agent, how, when)
                        with anyio.fail_after(WAIT):
                            async for event in sub:
                                events.append(event.uri)
            except Exception as exc:  # noqa: BLE001 - inspected below
                when["error"] = listen_error(exc)
            when["ended"] = time.monotonic()
        return when

    when = anyio.run(main)
    assert events == []
    assert_cut_off(when["error"], when)


# --- stdio ---------------------------------------------------------------------------------


def over_stdio(params, fn, *, mode: str, errlog, **client_kw):
    async def main():
        transport = stdio_client(params, errlog=errlog)
        async with Client(transport, mode=mode, read_timeout_seconds=60, **client_kw) as client:
            return await fn(client)

    return anyio.run(main)


def decide_now(reviewer, plan: Plan, decision: str) -> None:
    from approvals.services import approval_record

    try:
        plan = Plan.objects.get(pk=plan.pk)
        approval_record(
            plan_id=plan.id, reviewer=reviewer, decision=decision, fingerprint_seen=plan.fingerprint
        )
    finally:
        connections.close_all()


DROPPED = "subscription(s) dropped"


@pytest.mark.parametrize("how", CUTS)
def test_a_stdio_subscription_and_wait_are_cut_off_in_the_handshake_era(
    live, live_env, agent, agent_token, reviewer, make_plan, how
):
    """``resources/subscribe`` delivers until the cut and not after it; the get_plan wait
    open at the cut ends with the error; the session's next request is refused."""
    control, watched, waited = plans(make_plan, 3)
    updates: list[str] = []

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(message.params.uri)

    with tempfile.TemporaryFile("w+") as errlog:

        def dropped() -> bool:
            errlog.seek(0)
            return DROPPED in errlog.read()

        async def session(client):
            assert client.server_capabilities.resources.subscribe is True
            for plan in (control, watched):
                await client.subscribe_resource(followed(plan))
            # Delivering before the cut: a reviewer denies the control plan.
            await anyio.to_thread.run_sync(decide_now, reviewer, control, "deny")
            decided = time.monotonic()
            with anyio.fail_after(30):
                while followed(control) not in updates:
                    await anyio.sleep(0.05)
            heard_in = time.monotonic() - decided
            when = await get_plan_cut_off(client, agent, how, str(waited.id))
            # The server says it dropped the subscriptions; a change after that is not
            # announced, in five times as long as the pre-cut one took to be heard (and
            # at least a second: two of the fallback poll's periods, were Redis silent).
            await anyio.to_thread.run_sync(
                lambda: eventually(dropped, timeout=CUT_WITHIN, what="the subscriptions dropped")
            )
            await anyio.to_thread.run_sync(decide_now, reviewer, watched, "deny")
            await anyio.sleep(max(1.0, 5 * heard_in))
            try:
                await client.read_resource(followed(watched))
            except Exception as exc:  # noqa: BLE001 - inspected below
                when["next"] = mcp_error(exc)
            return when

        params = stdio_params(live_env, agent_token, live["url"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            when = over_stdio(
                params, session, mode="legacy", errlog=errlog, message_handler=on_message
            )

    assert updates == [followed(control)], "a change after the cut was announced"
    assert "result" not in when, "the plan was returned to a cut-off agent"
    assert_cut_off(when["error"], when)
    assert when["next"].code == UNAUTHENTICATED


@pytest.mark.parametrize("how", CUTS)
def test_a_stdio_listen_stream_and_wait_are_cut_off_in_the_2026_era(
    live, live_env, agent, agent_token, make_plan, how
):
    """Over stdio in 2026-07-28: the listen stream and the get_plan wait open at the cut
    both end with the error."""
    watched, waited = plans(make_plan, 2)

    async def session(client):
        assert client.protocol_version == "2026-07-28"
        listened: dict = {}

        async def listen():
            try:
                async with client.listen(resource_subscriptions=[followed(watched)]) as sub:
                    with anyio.fail_after(WAIT):
                        async for _ in sub:
                            listened.setdefault("events", 0)
                            listened["events"] += 1
            except Exception as exc:  # noqa: BLE001 - inspected below
                listened["error"] = listen_error(exc)
            listened["ended"] = time.monotonic()

        async with anyio.create_task_group() as tg:
            tg.start_soon(listen)
            when = await get_plan_cut_off(client, agent, how, str(waited.id))
        listened["cut"] = when.get("cut")
        return when, listened

    with tempfile.TemporaryFile("w+") as errlog:
        params = stdio_params(live_env, agent_token, live["url"])
        when, listened = over_stdio(params, session, mode="auto", errlog=errlog)

    assert "result" not in when, "the plan was returned to a cut-off agent"
    assert_cut_off(when["error"], when)
    assert "events" not in listened
    assert_cut_off(listened["error"], listened)
