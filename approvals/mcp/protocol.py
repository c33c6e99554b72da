"""The MCP protocol: the server and its handlers, over stdio (``manage.py mcp``) and, through
approvals/mcp/http.py, streamable HTTP; what every request passes (the agent's token, the
outage boundary, refusals as errors) is approvals/mcp/boundary.py. The tools (one per
action the agent may propose, plus get_plan and cancel_plan) are approvals/mcp/tools.py;
the resources (action cards, and the agent's plans with subscriptions) are
approvals/mcp/resource_calls.py and approvals/mcp/resources.py; consent in the client is
approvals/mcp/consent.py, the tasks extension approvals/mcp/tasks.py, and what results
look like approvals/mcp/rendering.py.

Every tool calls the services the JSON API calls (``plan_submit``, ``plan_cancel``, the
selectors), so an MCP client gets the same plans and the same refusals, worded the
same way: a refusal is the API's RFC 9457 problem document, with its pointers aimed at
the ``tools/call`` parameters (``/arguments/email`` where the API says ``/input/email``).

The tools that propose only *propose*: nothing is written upstream until a person
approves the exact plan. Their annotations describe what the call eventually does once
approved (``api.action_hints``: a delete, an external commitment or an irreversible change
is destructive, so clients that shield destructive tools ask their user first — a
barrier in front of the reviewer's, not instead of it), and the description says that
the call proposes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError as PydanticValidationError

from actions.lib.bearer import bearer_token
from actions.lib.exceptions import CountersignError
from actions.models import Agent

from ..api.endpoints import Unauthenticated
from ..identity.requester import HEADER as ON_BEHALF_OF_HEADER
from ..identity.requester import MCP_META_KEY as ON_BEHALF_OF_META
from ..models import Plan, PlanStatus
from ..selectors import plan_for_agent
from ..services import plan_cancel
from ..wakeups import agent_lease, db_call, wait_for_change
from . import consent, resources, tasks
from .boundary import (
    CUT_OFF,
    INVALID_PARAMS,
    UNAUTHENTICATED,
    UNAVAILABLE,
    authenticate,
    for_call,
    outage_boundary,
    protocol_error,
    refusal_error,
    unavailable_error,
    unexpected,
)
from .rendering import error_result, plan_result
from .resource_calls import list_resources, read_resource, subscribable_plan
from .tools import CANCEL_PLAN, GET_PLAN, RESERVED_NAMES, cancel, list_tools_for, propose, read_plan

log = logging.getLogger(__name__)

# What the HTTP app, the stdio command and clients' tests take from here: the server, and
# the error codes and the outage error it answers with (approvals/mcp/boundary.py).
__all__ = [
    "CUT_OFF",
    "INVALID_PARAMS",
    "UNAUTHENTICATED",
    "UNAVAILABLE",
    "agent_cutoff",
    "build_server",
    "serve_stdio",
    "unavailable_error",
]


# Requests answered whoever asks (the handshake itself, a liveness check).
UNGUARDED = frozenset({"initialize", "ping"})

INSTRUCTIONS = (
    "Countersign stands between you and the systems you change. Each action tool only "
    "proposes: Countersign previews the change read-only and a person approves that exact "
    "plan before a worker applies it once. Say why in `reason`; when you retry a call, "
    "send the same `idempotency_key` (the same proposal while it awaits a decision gives "
    "the same plan back anyway). Follow a plan with get_plan (it can wait up to 30 s for a "
    "change), or subscribe to its resource countersign://plans/{id}; withdraw it with "
    "cancel_plan. Each action's card is a resource."
)


# --- plumbing -----------------------------------------------------------------------


# Run a synchronous call in a pool thread, on a connection of its own that it closes:
# not thread-sensitive, so one slow preview does not queue every other MCP call behind
# it, and a pool thread's connection does not outlive the call (see wakeups.db_call).
_db = db_call
# --- the server -----------------------------------------------------------------------

# How a handler finds the caller's token: from the HTTP request, or fixed (stdio).
TokenSource = Callable[[ServerRequestContext[Any, Any]], str | None]


def _token_from_request(ctx: ServerRequestContext[Any, Any]) -> str | None:
    request = ctx.request
    return bearer_token(request.headers.get("authorization")) if request is not None else None


def _on_behalf_of(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> tuple[Any, ...]:
    """The person's ID token as the client sent it: in the call's ``_meta`` (which the
    client sets and the model neither sees nor writes, unlike the tool arguments), and on
    the HTTP endpoint also in the Countersign-On-Behalf-Of header."""
    meta = params.meta or {}
    request = ctx.request
    header = request.headers.get(ON_BEHALF_OF_HEADER) if request is not None else None
    return (meta.get(ON_BEHALF_OF_META), header)


def _plan_status(plan_id: uuid.UUID) -> str | None:
    return Plan.objects.filter(id=plan_id).values_list("status", flat=True).first()


def agent_cutoff(token_source: TokenSource):
    """Server middleware: every request runs holding a lease on its agent
    (approvals.wakeups.agent_lease), and is cut when the agent is revoked or deactivated,
    within ``COUNTERSIGN_AGENT_CHECK_SECONDS``: a ``get_plan`` wait, a consent round, a
    ``subscriptions/listen`` stream, and whatever waits in a handler yet to be written.
    The request is then answered with the unauthenticated error instead of its result
    (which also goes for a request that ended as the cut was seen)."""

    async def cut_off(ctx: ServerRequestContext[Any, Any], call_next):
        token = token_source(ctx)
        if not token or ctx.request_id is None or ctx.method in UNGUARDED:
            return await call_next(ctx)
        async with agent_lease(token) as lease:
            with anyio.CancelScope() as scope:
                stop = lease.on_cut(scope.cancel)
                held = resources.held_lease.set(lease)
                try:
                    result = await call_next(ctx)
                finally:
                    resources.held_lease.reset(held)
                    stop()
            if scope.cancelled_caught or lease.cut:
                raise protocol_error(Unauthenticated(CUT_OFF), code=UNAUTHENTICATED)
        return result

    return cut_off


async def _wait_for_decision(plan_id: uuid.UUID, seconds: float) -> None:
    """Until the plan leaves awaiting_approval, or ``seconds`` pass."""
    status = _db(_plan_status)
    loop_deadline = anyio.current_time() + seconds
    while (left := loop_deadline - anyio.current_time()) > 0:
        seen = await wait_for_change(plan_id, read=lambda: status(plan_id), timeout=left)
        if seen != PlanStatus.AWAITING_APPROVAL:
            return
        if await status(plan_id) != PlanStatus.AWAITING_APPROVAL:
            return


async def _wait_for_settled(plan_id: uuid.UUID, seconds: float) -> None:
    """Until the plan is settled (a task's end), or ``seconds`` pass."""
    status = _db(_plan_status)
    deadline = anyio.current_time() + seconds
    while (left := deadline - anyio.current_time()) > 0:
        seen = await wait_for_change(plan_id, read=lambda: status(plan_id), timeout=left)
        if seen in PlanStatus.settled() or await status(plan_id) in PlanStatus.settled():
            return


class _Handlers:
    """The handlers of one server, for the agent holding the token of each request (how
    build_server wires them): every handler finds the token through ``token_source`` and
    says ``how`` to send it when it is missing."""

    def __init__(
        self,
        token_source: TokenSource,
        how: str,
        connection_subscriptions: resources.ConnectionSubscriptions | None,
    ) -> None:
        self.token_source = token_source
        self.how = how
        self.connection_subscriptions = connection_subscriptions

    async def call(
        self, fn: Callable[..., Any], ctx: ServerRequestContext[Any, Any], *args: Any
    ) -> Any:
        try:
            return await _db(fn)(self.token_source(ctx), self.how, *args)
        except Unauthenticated as exc:
            raise protocol_error(exc, code=UNAUTHENTICATED) from None

    async def agent_of(self, ctx: ServerRequestContext[Any, Any]) -> Agent:
        return await self.call(lambda token, how: authenticate(token, how=how), ctx)

    async def rendered(self, plan: Plan, *, proposed: bool, note: str | None = None):
        return await _db(plan_result)(plan, proposed=proposed, note=note)

    async def fresh(self, agent: Agent, plan_id: Any) -> Plan:
        return await _db(plan_for_agent)(agent, plan_id)

    async def on_list_tools(self, ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await self.call(list_tools_for, ctx))

    async def on_call_tool(self, ctx, params: types.CallToolRequestParams):
        arguments = dict(params.arguments or {})
        try:
            if params.name == GET_PLAN:
                return await self._get_plan(ctx, arguments)
            if params.name == CANCEL_PLAN:
                return await self.call(cancel, ctx, arguments)
            if params.request_state is not None:
                return await self._resume(ctx, params)
            result, plan = await self.call(
                propose, ctx, params.name, arguments, _on_behalf_of(ctx, params)
            )
            if plan is None:
                return result
            return await self._after_proposal(ctx, plan, result)
        except MCPError:
            raise
        except Exception as exc:
            correlation_id = unexpected(exc, where="MCP tools/call")
            return error_result(
                _Internal("an unexpected error; nothing upstream was touched"),
                consequence="Quote the correlation id to an administrator.",
                correlation_id=correlation_id,
            )

    async def _after_proposal(self, ctx, plan: Plan, result: types.CallToolResult):
        """A stored plan: ask the user to open its review page where the client can show
        a URL; else a task where the client takes one; else the plan, at once."""
        if plan.status == PlanStatus.AWAITING_APPROVAL and consent.can_elicit(ctx):
            if consent.is_modern(ctx):
                return consent.ask(plan)
            return await self._elicit_over_back_channel(ctx, plan, result)
        return self._task_or(ctx, plan, result)

    def _task_or(self, ctx, plan: Plan, result: types.CallToolResult):
        if tasks.declared(ctx) and plan.status not in PlanStatus.settled():
            return tasks.created(plan)
        return result

    async def _elicit_over_back_channel(self, ctx, plan: Plan, result: types.CallToolResult):
        """The handshake era with a back channel (stdio): elicitation/create during the call."""
        try:
            answer = await ctx.session.elicit_url(
                message=consent.message(plan),
                url=plan.review_url,
                elicitation_id=str(plan.id),
                related_request_id=ctx.request_id,
            )
        except (NoBackChannelError, MCPError):
            return result
        if answer.action != "accept":
            note = consent.DECLINED if answer.action == "decline" else consent.DISMISSED
            return await self.rendered(plan, proposed=True, note=note)
        seconds = consent.ROUND_SECONDS * consent.MAX_ROUNDS
        await _wait_for_decision(plan.id, seconds)
        agent = await self.agent_of(ctx)
        plan = await self.fresh(agent, plan.id)
        if plan.status == PlanStatus.AWAITING_APPROVAL:
            return await self.rendered(plan, proposed=True, note=consent.waited(seconds))
        # The out-of-band part is over: the client may stop showing the request.
        await ctx.session.send_elicit_complete(str(plan.id), related_request_id=ctx.request_id)
        return await self.rendered(plan, proposed=False)

    async def _resume(self, ctx, params: types.CallToolRequestParams):
        """A 2026-07-28 call coming back with the user's answer (or to go on waiting):
        the state names the plan; nothing is proposed again."""
        state = await consent.state_spend(params.request_state)
        agent = await self.agent_of(ctx)
        try:
            plan = await self.fresh(agent, state["plan"])
        except CountersignError:
            raise consent.StateRefused() from None
        round_ = state["round"]
        answer = consent.answer(params) if round_ == 0 else "accept"
        if plan.status == PlanStatus.AWAITING_APPROVAL and answer in ("decline", "cancel", None):
            note = consent.DECLINED if answer == "decline" else consent.DISMISSED
            if tasks.declared(ctx):
                return tasks.created(plan)
            return await self.rendered(plan, proposed=True, note=note)
        if plan.status == PlanStatus.AWAITING_APPROVAL:
            await _wait_for_decision(plan.id, consent.ROUND_SECONDS)
            agent = await self.agent_of(ctx)  # after every wait, the agent again
            plan = await self.fresh(agent, plan.id)
        if plan.status == PlanStatus.AWAITING_APPROVAL:
            if round_ + 1 < consent.MAX_ROUNDS:
                return consent.keep_waiting(plan, round=round_ + 1)
            note = consent.waited(consent.ROUND_SECONDS * consent.MAX_ROUNDS)
            return self._task_or(ctx, plan, await self.rendered(plan, proposed=True, note=note))
        return self._task_or(ctx, plan, await self.rendered(plan, proposed=False))

    async def _get_plan(self, ctx, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            agent, plan, wait = await self.call(read_plan, ctx, arguments)
        except CountersignError as exc:
            return error_result(for_call(exc), consequence="Nothing changed.")
        if wait and plan.status not in PlanStatus.terminal():
            # The same long-poll as GET /plans/{id}?wait=N: woken by approvals.wakeups on
            # the first change, holding no thread or connection meanwhile. The status is
            # read again after registering, so a change since the read above counts.
            status_of = _db(_plan_status)
            await wait_for_change(plan.id, read=lambda: status_of(plan.id), timeout=wait)
            agent = await self.agent_of(ctx)  # after every wait, the agent again
            plan = await self.fresh(agent, plan.id)
        return await self.rendered(plan, proposed=False)

    async def on_list_resources(self, ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=await self.call(list_resources, ctx))

    async def on_list_resource_templates(self, ctx, params) -> types.ListResourceTemplatesResult:
        await self.agent_of(ctx)
        return types.ListResourceTemplatesResult(resource_templates=[resources.plan_template()])

    async def on_read_resource(
        self, ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await self.call(read_resource, ctx, params.uri)

    async def on_subscribe(self, ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        assert self.connection_subscriptions is not None
        plan_id = await self.call(subscribable_plan, ctx, params.uri)
        try:
            self.connection_subscriptions.subscribe(params.uri, plan_id, ctx.session)
        except ValueError as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
        return types.EmptyResult()

    async def on_unsubscribe(
        self, ctx, params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        assert self.connection_subscriptions is not None
        await self.agent_of(ctx)
        self.connection_subscriptions.unsubscribe(params.uri)
        return types.EmptyResult()

    # --- tasks: the extension (2026-07-28), and the 2025-11-25 form in the handshake era ---

    async def _task_plan(self, ctx, params: tasks.TaskParams) -> tuple[Agent, Plan]:
        if consent.is_modern(ctx):
            tasks.require(ctx)
        agent = await self.agent_of(ctx)
        try:
            return agent, await self.fresh(agent, uuid.UUID(params.task_id))
        except (ValueError, CountersignError):
            raise tasks.not_found() from None

    async def on_task_get(self, ctx, params: tasks.TaskParams) -> dict[str, Any]:
        _, plan = await self._task_plan(ctx, params)
        if not consent.is_modern(ctx):
            return tasks.legacy_task(plan)
        done = tasks.task_status(plan) == "completed"
        result = await self.rendered(plan, proposed=False) if done else None
        return tasks.detailed(plan, result)

    async def on_task_update(self, ctx, params: tasks.UpdateTaskParams) -> dict[str, Any]:
        # No task of ours asks for input: whatever responses come are ignored (the
        # extension's rule for keys that are not outstanding).
        await self._task_plan(ctx, params)
        return {}

    async def on_task_cancel(self, ctx, params: tasks.TaskParams) -> dict[str, Any]:
        agent, plan = await self._task_plan(ctx, params)
        legacy = not consent.is_modern(ctx)
        if legacy and tasks.task_status(plan) != "working":
            raise tasks.legacy_terminal()
        try:
            await _db(plan_cancel)(agent=agent, plan_id=plan.id)
        except CountersignError:
            # Cooperative: acknowledged; the task ends as the plan does (it was already
            # executing, or settled).
            pass
        return tasks.legacy_task(await self.fresh(agent, plan.id)) if legacy else {}

    async def on_task_result(self, ctx, params: tasks.TaskParams) -> dict[str, Any]:
        """2025-11-25: the tool result once the plan settles (waiting up to
        ``RESULT_WAIT_SECONDS`` for that; clients ask once tasks/get says completed)."""
        if consent.is_modern(ctx):
            raise tasks.only_legacy("tasks/result")
        agent, plan = await self._task_plan(ctx, params)
        if tasks.task_status(plan) == "working":
            await _wait_for_settled(plan.id, tasks.RESULT_WAIT_SECONDS)
            agent = await self.agent_of(ctx)  # after every wait, the agent again
            plan = await self.fresh(agent, plan.id)
        if tasks.task_status(plan) == "working":
            raise tasks.legacy_unfinished(plan)
        return tasks.legacy_result(plan, await self.rendered(plan, proposed=False))

    async def legacy_task_calls(self, ctx, call_next):
        """A 2025-11-25 task-augmented ``tools/call`` (``task`` in its parameters, in the
        handshake era) of an action's tool: the plan is proposed and its task returned.
        A middleware, because the SDK checks a handler's ``tools/call`` result against
        that revision's CallToolResult, which a CreateTaskResult is not (a middleware
        that answers owns its result)."""
        raw = ctx.params if isinstance(ctx.params, dict) else {}
        if ctx.method != "tools/call" or consent.is_modern(ctx) or raw.get("task") is None:
            return await call_next(ctx)
        try:
            params = types.CallToolRequestParams.model_validate(raw, by_name=False)
        except PydanticValidationError:
            return await call_next(ctx)  # the SDK's own error for malformed parameters
        if params.name in RESERVED_NAMES:
            return await call_next(ctx)  # not task tools (taskSupport forbidden)
        try:
            result, plan = await self.call(
                propose, ctx, params.name, dict(params.arguments or {}), _on_behalf_of(ctx, params)
            )
        except MCPError:
            raise
        except Exception as exc:
            correlation_id = unexpected(exc, where="MCP tools/call (task)")
            raise MCPError(
                code=types.INTERNAL_ERROR,
                message=f"Something went wrong on our side; correlation id {correlation_id}",
            ) from None
        if plan is None:
            # No plan, so no task: the refusal is the request's error.
            raise refusal_error(result)
        return tasks.legacy_created(plan)


def build_server(
    token_source: TokenSource = _token_from_request,
    *,
    how: str = "send Authorization: Bearer <agent token>",
    connection_subscriptions: resources.ConnectionSubscriptions | None = None,
) -> Server[Any]:
    """An MCP server whose every request is answered for the agent holding the token.

    The token is checked on every request, so a deactivated agent is refused at once,
    and a request still open when its agent is revoked or deactivated is cut off
    (:func:`agent_cutoff`). ``connection_subscriptions`` serves ``resources/subscribe``
    in the handshake era, on a connection that lasts (stdio); without it (stateless
    HTTP) that era has none, and ``subscriptions/listen`` (2026-07-28) is the way to
    follow a plan.
    """
    handlers = _Handlers(token_source, how, connection_subscriptions)
    subscribe_handlers = (
        {
            "on_subscribe_resource": handlers.on_subscribe,
            "on_unsubscribe_resource": handlers.on_unsubscribe,
        }
        if handlers.connection_subscriptions is not None
        else {}
    )
    server = _Server(
        "countersign",
        version="1",
        title="Countersign",
        instructions=INSTRUCTIONS,
        on_list_tools=handlers.on_list_tools,
        on_call_tool=handlers.on_call_tool,
        on_list_resources=handlers.on_list_resources,
        on_list_resource_templates=handlers.on_list_resource_templates,
        on_read_resource=handlers.on_read_resource,
        on_subscriptions_listen=resources.PlanListen(handlers.agent_of),
        **subscribe_handlers,
    )
    server.add_request_handler("tasks/get", tasks.TaskParams, handlers.on_task_get)
    server.add_request_handler("tasks/update", tasks.UpdateTaskParams, handlers.on_task_update)
    server.add_request_handler("tasks/cancel", tasks.TaskParams, handlers.on_task_cancel)
    server.add_request_handler("tasks/result", tasks.TaskParams, handlers.on_task_result)

    server.extensions[tasks.TASKS] = {}
    # Seals and verifies requestState (the 2026-07-28 multi-round-trip calls).
    server.middleware.append(consent.state_boundary(token_source))
    # Outside the agent's lease and the task calls (both look the database up): whatever
    # a request was doing when the database went away, the answer is UNAVAILABLE.
    server.middleware.append(outage_boundary)
    # Cuts off a request whose agent is revoked or deactivated while it is open (outside
    # whatever answers a request itself, so nothing escapes it).
    server.middleware.append(agent_cutoff(token_source))
    server.middleware.append(handlers.legacy_task_calls)
    return server


class _Server(Server[Any]):
    """The SDK's server, with ``listChanged`` false in both eras: the tool list and the
    resource list do change (an administrator gives an agent an action, a plan is
    proposed or settles), but Countersign sends no ``list_changed`` notification, so a
    client reads the lists again when it needs them. (The SDK derives the flags from
    ``subscriptions/listen`` being served in the 2026-07-28 era and from
    ``NotificationOptions`` in the handshake era, which made them true in one and false
    in the other.) ``resources.subscribe`` stays as derived: plans can be followed.
    """

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        if kwargs.get("protocol_version") not in MODERN_PROTOCOL_VERSIONS:
            # The 2025-11-25 tasks form (tasks.py): task-augmented tools/call.
            caps.tasks = tasks.legacy_capability()
        if caps.tools is not None:
            caps.tools.list_changed = False
        if caps.resources is not None:
            caps.resources.list_changed = False
        return caps


class _Internal(CountersignError):
    status = 500
    type = "internal-error"
    title = "Something went wrong on our side"


async def serve_stdio(token: str) -> None:
    """Serve one client on standard input and output with the agent ``token``."""
    async with anyio.create_task_group() as tg:
        server = build_server(
            lambda ctx: token,
            how="set the agent token in the server's environment",
            connection_subscriptions=resources.ConnectionSubscriptions(tg, token),
        )
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        tg.cancel_scope.cancel()
