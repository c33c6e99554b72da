"""The MCP protocol: the tools (one per action the agent may propose, plus get_plan and
cancel_plan), the resources (action cards, and the agent's plans with subscriptions, in
approvals/mcp/resources.py), consent in the client (approvals/mcp/consent.py), the tasks
extension (approvals/mcp/tasks.py), and the server over stdio (``manage.py mcp``); over
streamable HTTP it is served by approvals/mcp/http.py. What results look like is in
approvals/mcp/rendering.py.

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

import copy
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
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from actions.lib.bearer import bearer_token
from actions.lib.canonical import escape_pointer_token
from actions.lib.exceptions import CountersignError
from actions.lib.outage import DatabaseUnavailable, database_unavailable, noted
from actions.lib.problems import (
    current_correlation_id,
    problem_body,
    problem_body_from,
    problem_line,
)
from actions.models import Action, Agent
from actions.services import agent_authenticate

from ..api.endpoints import (
    MAX_IDEMPOTENCY_KEY,
    Unauthenticated,
    action_hints,
    action_out,
    idempotency_key_valid,
    validation_message,
)
from ..api.schemas import PlanCreate, PlanOut, Problem
from ..identity.requester import HEADER as ON_BEHALF_OF_HEADER
from ..identity.requester import MCP_META_KEY as ON_BEHALF_OF_META
from ..identity.requester import requester_from_sources
from ..models import Plan, PlanStatus
from ..ratelimit import rate_limit_check
from ..selectors import actions_for_agent, plan_for_agent
from ..services import plan_cancel, plan_submit
from ..wakeups import agent_lease, db_call, wait_for_change
from . import consent, resources, tasks
from .rendering import (
    CARD_URI,
    CLASS_MEANING,
    card_markdown,
    error_result,
    people_approve,
    plan_result,
)

log = logging.getLogger(__name__)

GET_PLAN = "get_plan"
CANCEL_PLAN = "cancel_plan"
# An action with one of these names is not offered over MCP: the name is taken.
RESERVED_NAMES = frozenset({GET_PLAN, CANCEL_PLAN})
MAX_WAIT_SECONDS = 30

# JSON-RPC codes. -32000..-32019 are the implementation's own; the SDK keeps -32000 and
# -32001 for itself (never sent on the wire), so ours start further in.
UNAUTHENTICATED = -32010
# The database cannot be reached: try the same request again after ``retry_after`` s.
UNAVAILABLE = -32011
INVALID_PARAMS = types.INVALID_PARAMS

# What a request that was open when its agent was cut off is answered.
CUT_OFF = (
    "the agent was revoked or deactivated, or its token expired, while this request was "
    "open; ask an administrator"
)
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


class InvalidRequest(CountersignError):
    """The tool arguments do not match the request schema (the API's ``invalid-request``)."""

    status = 422
    type = "invalid-request"
    title = "The request does not match the API schema"


# --- plumbing -----------------------------------------------------------------------


# Run a synchronous call in a pool thread, on a connection of its own that it closes:
# not thread-sensitive, so one slow preview does not queue every other MCP call behind
# it, and a pool thread's connection does not outlive the call (see wakeups.db_call).
_db = db_call


def _authenticate(token: str | None, *, how: str) -> Agent:
    agent = agent_authenticate(token or "")
    if agent is None:
        raise Unauthenticated(how)
    return agent


def _protocol_error(exc: CountersignError, *, code: int) -> MCPError:
    problem = problem_body_from(exc)
    return MCPError(code=code, message=problem_line(problem), data=problem)


def unavailable_error(exc: BaseException, *, where: str) -> MCPError:
    """A database outage as the client sees it, in both protocol eras: a JSON-RPC error
    (``UNAVAILABLE``) carrying the API's 503 problem with ``retry_after`` seconds, never an
    internal error. Logged once per outage, counted after that (actions.lib.outage)."""
    noted(exc, where)
    problem = problem_body_from(DatabaseUnavailable())
    problem["retry_after"] = DatabaseUnavailable.retry_after
    return MCPError(code=UNAVAILABLE, message=problem_line(problem), data=problem)


async def _outage_boundary(ctx: ServerRequestContext[Any, Any], call_next):
    """Server middleware: whatever a request was doing when the database went away, the
    answer is UNAVAILABLE."""
    try:
        return await call_next(ctx)
    except Exception as exc:
        if database_unavailable(exc):
            raise unavailable_error(exc, where=f"MCP {ctx.method}") from None
        raise


def _pointer_for_call(pointer: str, reason_field: str) -> str:
    """A pointer into POST /plans's body, re-aimed at the tools/call parameters."""
    if pointer == "/action":
        return "/name"
    if pointer == "/reason":
        return f"/arguments/{escape_pointer_token(reason_field)}"
    if pointer == "/input" or pointer.startswith("/input/"):
        return "/arguments" + pointer[len("/input") :]
    return pointer


def _for_call(exc: CountersignError, reason_field: str = "reason") -> CountersignError:
    exc.errors = [
        {**e, "pointer": _pointer_for_call(e.get("pointer", ""), reason_field)} for e in exc.errors
    ]
    return exc


def _invalid_request(error: PydanticValidationError, *, at: dict[str, str]) -> InvalidRequest:
    """The arguments broke the request schema; ``at`` maps a field to its pointer."""
    errors = []
    for e in error.errors():
        loc = [str(p) for p in e.get("loc", ())]
        head = at.get(loc[0], f"/arguments/{escape_pointer_token(loc[0])}") if loc else "/arguments"
        rest = "".join(f"/{escape_pointer_token(p)}" for p in loc[1:])
        errors.append({"pointer": head + rest, "message": validation_message(e)})
    return InvalidRequest("see errors", errors=errors)


# --- tools ----------------------------------------------------------------------------


def _own_field(input_schema: dict[str, Any], name: str) -> str:
    """``name``, unless the action's own input already has a field of that name."""
    properties = input_schema.get("properties") or {}
    return name if name not in properties else f"countersign_{name}"


def _reason_field(input_schema: dict[str, Any]) -> str:
    return _own_field(input_schema, "reason")


def _key_field(input_schema: dict[str, Any]) -> str:
    return _own_field(input_schema, "idempotency_key")


def _plan_output_schema() -> dict[str, Any]:
    """The plan, or for a refusal (``isError: true``) the API's problem document: the
    2025-11-25 specification wants every structured result to match the declared schema,
    and clients on the TypeScript SDK 1.x check error results too."""
    schema = TypeAdapter(PlanOut | Problem).json_schema()
    defs = schema["$defs"]
    defs["PlanOut"]["description"] = "The plan, as GET /api/v1/plans/{id} returns it."
    defs["Problem"]["description"] = (
        "A refusal (isError: true): the API's RFC 9457 problem document, its pointers "
        "aimed at the tools/call parameters."
    )
    return {"type": "object", **schema}


def action_tool(action: Action) -> types.Tool:
    """The tool for one action: the catalog's input schema plus the agent's reason."""
    out = action_out(action)
    schema = copy.deepcopy(out["input_schema"])
    reason = _reason_field(schema)
    schema.setdefault("properties", {})[reason] = {
        "type": "string",
        "maxLength": 2000,
        "description": (
            "Why you propose this. Shown to the reviewer as a quoted, unverified note; "
            "it never changes what is done."
        ),
    }
    schema["properties"][_key_field(out["input_schema"])] = {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_IDEMPOTENCY_KEY,
        "description": (
            "Optional. A key of your choosing (printable characters): a retry of this "
            "call with the same key and the same arguments returns the same plan, like "
            "the JSON API's Idempotency-Key. Scoped to you; kept at least 24 hours."
        ),
    }
    card = out["card"]
    approvals = out["approval"]["approvers_required"]
    klass = out["consequence_class"]
    hints = action_hints(action)
    description = "\n\n".join(
        part
        for part in (
            f"{out['title']}. {out['description']}".strip(),
            f"Consequence class: {klass} ({CLASS_MEANING.get(klass, klass)}). "
            f"Once approved: {card['effect']} Scope: {card['scope']}",
            _read_sentence(out) if out["kind"] == "read" else _write_sentence(out, approvals),
            _result_sentence(out),
        )
        if part
    )
    return types.Tool(
        name=action.name,
        title=out["title"],
        description=description,
        input_schema=schema,
        output_schema=_plan_output_schema(),
        # A 2025-11-25 client may ask for a task (tasks.py); the 2026-07-28 wire has no
        # such field (its tasks are an extension) and leaves it out.
        execution=types.ToolExecution(task_support="optional"),
        annotations=types.ToolAnnotations(
            title=out["title"],
            # By what the call eventually does once approved (api.action_hints), the
            # hints GET /api/v1/actions gives: the call itself only stores a plan.
            read_only_hint=hints["readOnlyHint"],
            destructive_hint=hints["destructiveHint"],
            idempotent_hint=hints["idempotentHint"],
            open_world_hint=hints["openWorldHint"],
        ),
        meta={
            "countersign/action": {
                "consequence_class": klass,
                "kind": out["kind"],
                "approvals_required": approvals,
                "card": CARD_URI.format(name=action.name),
            }
        },
    )


def _read_sentence(out: dict[str, Any]) -> str:
    if out["approval"]["mode"] == "none":
        how = "It runs as soon as you propose it"
    elif out["sensitive"]:
        how = "The data is private: a person approves every call"
    else:
        how = (
            "A person approves it, or a session grant a reviewer made for you covers it"
            if out["approval"].get("session_grant_eligible")
            else "A person approves it"
        )
    return (
        "This call proposes a READ: nothing changes upstream. "
        f"{how}; then a worker reads the target once, with Countersign's read credential, "
        "and you receive only the declared fields in outcome.result. Follow it with get_plan."
    )


def _result_sentence(out: dict[str, Any]) -> str:
    fields = ", ".join(f"{f['name']} ({f['type']})" for f in out.get("result") or ())
    return f"Result fields: {fields}." if fields else ""


def _write_sentence(out: dict[str, Any], approvals: int) -> str:
    return (
        "This call only PROPOSES the change. Countersign reads the target without "
        "changing it and returns a preview, a plan id, a short code and a review URL. "
        f"Nothing is written upstream until {people_approve(approvals)} this exact "
        "plan"
        + (
            ", or a session grant a reviewer made for you covers it"
            if out["approval"].get("session_grant_eligible")
            else ""
        )
        + "; then a worker applies it once. Follow it with get_plan."
    )


class PlanArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plan_id: uuid.UUID = Field(description="The plan's id, as a proposing tool returned it.")


class GetPlanArgs(PlanArgs):
    wait: float = Field(
        default=0,
        ge=0,
        le=MAX_WAIT_SECONDS,
        description="Seconds to wait for a status change (0 to 30); returns as soon as it changes.",
    )


def _args_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def fixed_tools() -> list[types.Tool]:
    return [
        types.Tool(
            name=GET_PLAN,
            title="Read a plan",
            description=(
                "Read one of your plans: its status, preview and outcome. With `wait` (up to "
                "30 s) the call returns as soon as the status changes. Reads only."
            ),
            input_schema=_args_schema(GetPlanArgs),
            output_schema=_plan_output_schema(),
            annotations=types.ToolAnnotations(
                title="Read a plan",
                read_only_hint=True,
                destructive_hint=False,
                idempotent_hint=True,
                open_world_hint=False,
            ),
        ),
        types.Tool(
            name=CANCEL_PLAN,
            title="Withdraw a plan",
            description=(
                "Withdraw one of your plans before the worker sends it (while it awaits "
                "approval or is approved). Nothing is sent upstream; the plan stays on record "
                "as cancelled."
            ),
            input_schema=_args_schema(PlanArgs),
            output_schema=_plan_output_schema(),
            annotations=types.ToolAnnotations(
                title="Withdraw a plan",
                # It changes a plan's status in Countersign, can only prevent an upstream
                # effect, and a second call leaves the plan as the first did.
                read_only_hint=False,
                destructive_hint=False,
                idempotent_hint=True,
                open_world_hint=False,
            ),
        ),
    ]


def _offered(agent: Agent) -> list[Action]:
    return [
        a
        for a in actions_for_agent(agent).select_related("connector")
        if a.name not in RESERVED_NAMES
    ]


def list_tools_for(token: str | None, how: str) -> list[types.Tool]:
    agent = _authenticate(token, how=how)
    return [action_tool(a) for a in _offered(agent)] + fixed_tools()


def propose(
    token: str | None,
    how: str,
    name: str,
    arguments: dict[str, Any],
    on_behalf_of: tuple[Any, ...] = (),
) -> tuple[types.CallToolResult, Plan | None]:
    """Call the JSON API's ``plan_submit`` with the tool arguments split into input,
    reason and idempotency key; refusals come back as the API's problem documents.
    ``on_behalf_of``: the person's ID token wherever the client put it (``_on_behalf_of``).
    Returns the result and the plan it shows (None for a refusal)."""
    agent = _authenticate(token, how=how)
    action = Action.objects.filter(name=name, enabled=True).first()
    schema = action.spec.input_schema if action is not None else {}
    reason_field, key_field = _reason_field(schema), _key_field(schema)
    values = {k: v for k, v in arguments.items() if k not in (reason_field, key_field)}
    reason = arguments.get(reason_field)
    key = arguments.get(key_field)
    nothing = "No plan was created."
    try:
        # The same per-agent budget as POST /plans: MCP is no way around it.
        rate_limit_check(scope="plans", subject=str(agent.pk))
        try:
            PlanCreate.model_validate({"action": name, "input": values, "reason": reason})
        except PydanticValidationError as exc:
            raise _invalid_request(
                exc,
                at={
                    "action": "/name",
                    "input": "/arguments",
                    "reason": f"/arguments/{reason_field}",
                },
            ) from None
        if key is not None and not (isinstance(key, str) and idempotency_key_valid(key)):
            raise InvalidRequest(
                "see errors",
                errors=[
                    {
                        "pointer": f"/arguments/{escape_pointer_token(key_field)}",
                        "message": f"1 to {MAX_IDEMPOTENCY_KEY} printable characters",
                    }
                ],
            )
        requester = requester_from_sources(*on_behalf_of)
        plan, _ = plan_submit(
            agent=agent,
            action_name=name,
            input=values,
            reason=reason or "",
            idempotency_key=key,
            requester=requester,
        )
    except CountersignError as exc:
        if exc.type in ("unknown-action", "not-allowed"):
            # The agent has no such tool: an MCP error, as for any unknown tool.
            raise _protocol_error(_for_call(exc, reason_field), code=INVALID_PARAMS) from None
        return error_result(_for_call(exc, reason_field), consequence=nothing), None
    return plan_result(plan, proposed=True), plan


def _plan_args(model: type[PlanArgs], arguments: dict[str, Any]) -> PlanArgs:
    try:
        return model.model_validate(arguments)
    except PydanticValidationError as exc:
        raise _invalid_request(exc, at={}) from None


def read_plan(token: str | None, how: str, arguments: dict[str, Any]) -> tuple[Agent, Plan, float]:
    agent = _authenticate(token, how=how)
    args = _plan_args(GetPlanArgs, arguments)
    return agent, plan_for_agent(agent, args.plan_id), args.wait


def cancel(token: str | None, how: str, arguments: dict[str, Any]) -> types.CallToolResult:
    agent = _authenticate(token, how=how)
    try:
        args = _plan_args(PlanArgs, arguments)
        plan = plan_cancel(agent=agent, plan_id=args.plan_id)
    except CountersignError as exc:
        return error_result(_for_call(exc), consequence="Nothing changed.")
    return plan_result(plan, proposed=False)


# --- resources -----------------------------------------------------------------------


def list_resources(token: str | None, how: str) -> list[types.Resource]:
    agent = _authenticate(token, how=how)
    cards = [
        types.Resource(
            uri=CARD_URI.format(name=a.name),
            name=f"{a.name} card",
            title=f"Card: {a.title}",
            description=f"What {a.name} does once approved, its scope, and who must consent.",
            mime_type="text/markdown",
        )
        for a in _offered(agent)
    ]
    return cards + resources.plan_resources(agent)


def _not_found(detail: str) -> MCPError:
    problem = problem_body(status=404, type="not-found", title="Not found", detail=detail)
    return MCPError(code=INVALID_PARAMS, message=problem_line(problem), data=problem)


def read_resource(token: str | None, how: str, uri: str) -> types.ReadResourceResult:
    agent = _authenticate(token, how=how)
    plan_id = resources.plan_id_from_uri(uri)
    if plan_id is not None:
        try:
            return resources.plan_contents(plan_for_agent(agent, plan_id))
        except CountersignError:
            raise _not_found("no such plan for this agent") from None
    for action in _offered(agent):
        if CARD_URI.format(name=action.name) == uri:
            return types.ReadResourceResult(
                contents=[
                    types.TextResourceContents(
                        uri=uri, mime_type="text/markdown", text=card_markdown(action)
                    )
                ]
            )
    raise _not_found("no such card for this agent")


def subscribable_plan(token: str | None, how: str, uri: str) -> uuid.UUID:
    agent = _authenticate(token, how=how)
    plan_id = resources.plan_id_from_uri(uri)
    if plan_id is None or not resources.owned_plan_ids(agent, [uri]):
        raise _not_found("only your own plans (countersign://plans/{id}) can be subscribed to")
    return plan_id


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


def _unexpected(exc: Exception, *, where: str) -> str:
    """Inside an ``except``: a database outage becomes the UNAVAILABLE error (raised);
    anything else is logged with its traceback and a correlation id, which is returned
    for the caller's answer."""
    if database_unavailable(exc):
        raise unavailable_error(exc, where=where) from None
    correlation_id = current_correlation_id()
    log.exception("%s: an unexpected error, correlation id %s", where, correlation_id)
    return correlation_id


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
                raise _protocol_error(Unauthenticated(CUT_OFF), code=UNAUTHENTICATED)
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


def _refusal_error(result: types.CallToolResult) -> MCPError:
    """A refused task-augmented call as a JSON-RPC error: the problem line and each
    pointer in the message, the problem document as its data."""
    problem = result.structured_content or {}
    errors = problem.get("errors") or ()
    pointers = "; ".join(f"{e['pointer'] or '/'}: {e['message']}" for e in errors)
    message = problem_line(problem) + (f" ({pointers})" if pointers else "")
    return MCPError(code=INVALID_PARAMS, message=message, data=problem)


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

    async def call(fn: Callable[..., Any], ctx: ServerRequestContext[Any, Any], *args: Any) -> Any:
        try:
            return await _db(fn)(token_source(ctx), how, *args)
        except Unauthenticated as exc:
            raise _protocol_error(exc, code=UNAUTHENTICATED) from None

    async def agent_of(ctx: ServerRequestContext[Any, Any]) -> Agent:
        return await call(lambda token, how: _authenticate(token, how=how), ctx)

    async def rendered(plan: Plan, *, proposed: bool, note: str | None = None):
        return await _db(plan_result)(plan, proposed=proposed, note=note)

    async def fresh(agent: Agent, plan_id: Any) -> Plan:
        return await _db(plan_for_agent)(agent, plan_id)

    async def on_list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await call(list_tools_for, ctx))

    async def on_call_tool(ctx, params: types.CallToolRequestParams):
        arguments = dict(params.arguments or {})
        try:
            if params.name == GET_PLAN:
                return await _get_plan(ctx, arguments)
            if params.name == CANCEL_PLAN:
                return await call(cancel, ctx, arguments)
            if params.request_state is not None:
                return await _resume(ctx, params)
            result, plan = await call(
                propose, ctx, params.name, arguments, _on_behalf_of(ctx, params)
            )
            if plan is None:
                return result
            return await _after_proposal(ctx, plan, result)
        except MCPError:
            raise
        except Exception as exc:
            correlation_id = _unexpected(exc, where="MCP tools/call")
            return error_result(
                _Internal("an unexpected error; nothing upstream was touched"),
                consequence="Quote the correlation id to an administrator.",
                correlation_id=correlation_id,
            )

    async def _after_proposal(ctx, plan: Plan, result: types.CallToolResult):
        """A stored plan: ask the user to open its review page where the client can show
        a URL; else a task where the client takes one; else the plan, at once."""
        if plan.status == PlanStatus.AWAITING_APPROVAL and consent.can_elicit(ctx):
            if consent.is_modern(ctx):
                return consent.ask(plan)
            return await _elicit_over_back_channel(ctx, plan, result)
        return _task_or(ctx, plan, result)

    def _task_or(ctx, plan: Plan, result: types.CallToolResult):
        if tasks.declared(ctx) and plan.status not in PlanStatus.settled():
            return tasks.created(plan)
        return result

    async def _elicit_over_back_channel(ctx, plan: Plan, result: types.CallToolResult):
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
            return await rendered(plan, proposed=True, note=note)
        seconds = consent.ROUND_SECONDS * consent.MAX_ROUNDS
        await _wait_for_decision(plan.id, seconds)
        agent = await agent_of(ctx)
        plan = await fresh(agent, plan.id)
        if plan.status == PlanStatus.AWAITING_APPROVAL:
            return await rendered(plan, proposed=True, note=consent.waited(seconds))
        # The out-of-band part is over: the client may stop showing the request.
        await ctx.session.send_elicit_complete(str(plan.id), related_request_id=ctx.request_id)
        return await rendered(plan, proposed=False)

    async def _resume(ctx, params: types.CallToolRequestParams):
        """A 2026-07-28 call coming back with the user's answer (or to go on waiting):
        the state names the plan; nothing is proposed again."""
        state = await consent.state_spend(params.request_state)
        agent = await agent_of(ctx)
        try:
            plan = await fresh(agent, state["plan"])
        except CountersignError:
            raise consent.StateRefused() from None
        round_ = state["round"]
        answer = consent.answer(params) if round_ == 0 else "accept"
        if plan.status == PlanStatus.AWAITING_APPROVAL and answer in ("decline", "cancel", None):
            note = consent.DECLINED if answer == "decline" else consent.DISMISSED
            if tasks.declared(ctx):
                return tasks.created(plan)
            return await rendered(plan, proposed=True, note=note)
        if plan.status == PlanStatus.AWAITING_APPROVAL:
            await _wait_for_decision(plan.id, consent.ROUND_SECONDS)
            agent = await agent_of(ctx)  # after every wait, the agent again
            plan = await fresh(agent, plan.id)
        if plan.status == PlanStatus.AWAITING_APPROVAL:
            if round_ + 1 < consent.MAX_ROUNDS:
                return consent.keep_waiting(plan, round=round_ + 1)
            note = consent.waited(consent.ROUND_SECONDS * consent.MAX_ROUNDS)
            return _task_or(ctx, plan, await rendered(plan, proposed=True, note=note))
        return _task_or(ctx, plan, await rendered(plan, proposed=False))

    async def _get_plan(ctx, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            agent, plan, wait = await call(read_plan, ctx, arguments)
        except CountersignError as exc:
            return error_result(_for_call(exc), consequence="Nothing changed.")
        if wait and plan.status not in PlanStatus.terminal():
            # The same long-poll as GET /plans/{id}?wait=N: woken by approvals.wakeups on
            # the first change, holding no thread or connection meanwhile. The status is
            # read again after registering, so a change since the read above counts.
            status_of = _db(_plan_status)
            await wait_for_change(plan.id, read=lambda: status_of(plan.id), timeout=wait)
            agent = await agent_of(ctx)  # after every wait, the agent again
            plan = await fresh(agent, plan.id)
        return await rendered(plan, proposed=False)

    async def on_list_resources(ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=await call(list_resources, ctx))

    async def on_list_resource_templates(ctx, params) -> types.ListResourceTemplatesResult:
        await agent_of(ctx)
        return types.ListResourceTemplatesResult(resource_templates=[resources.plan_template()])

    async def on_read_resource(
        ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await call(read_resource, ctx, params.uri)

    async def on_subscribe(ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        assert connection_subscriptions is not None
        plan_id = await call(subscribable_plan, ctx, params.uri)
        try:
            connection_subscriptions.subscribe(params.uri, plan_id, ctx.session)
        except ValueError as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
        return types.EmptyResult()

    async def on_unsubscribe(ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        assert connection_subscriptions is not None
        await agent_of(ctx)
        connection_subscriptions.unsubscribe(params.uri)
        return types.EmptyResult()

    # --- tasks: the extension (2026-07-28), and the 2025-11-25 form in the handshake era ---

    async def _task_plan(ctx, params: tasks.TaskParams) -> tuple[Agent, Plan]:
        if consent.is_modern(ctx):
            tasks.require(ctx)
        agent = await agent_of(ctx)
        try:
            return agent, await fresh(agent, uuid.UUID(params.task_id))
        except (ValueError, CountersignError):
            raise tasks.not_found() from None

    async def on_task_get(ctx, params: tasks.TaskParams) -> dict[str, Any]:
        _, plan = await _task_plan(ctx, params)
        if not consent.is_modern(ctx):
            return tasks.legacy_task(plan)
        done = tasks.task_status(plan) == "completed"
        result = await rendered(plan, proposed=False) if done else None
        return tasks.detailed(plan, result)

    async def on_task_update(ctx, params: tasks.UpdateTaskParams) -> dict[str, Any]:
        # No task of ours asks for input: whatever responses come are ignored (the
        # extension's rule for keys that are not outstanding).
        await _task_plan(ctx, params)
        return {}

    async def on_task_cancel(ctx, params: tasks.TaskParams) -> dict[str, Any]:
        agent, plan = await _task_plan(ctx, params)
        legacy = not consent.is_modern(ctx)
        if legacy and tasks.task_status(plan) != "working":
            raise tasks.legacy_terminal()
        try:
            await _db(plan_cancel)(agent=agent, plan_id=plan.id)
        except CountersignError:
            # Cooperative: acknowledged; the task ends as the plan does (it was already
            # executing, or settled).
            pass
        return tasks.legacy_task(await fresh(agent, plan.id)) if legacy else {}

    async def on_task_result(ctx, params: tasks.TaskParams) -> dict[str, Any]:
        """2025-11-25: the tool result once the plan settles (waiting up to
        ``RESULT_WAIT_SECONDS`` for that; clients ask once tasks/get says completed)."""
        if consent.is_modern(ctx):
            raise tasks.only_legacy("tasks/result")
        agent, plan = await _task_plan(ctx, params)
        if tasks.task_status(plan) == "working":
            await _wait_for_settled(plan.id, tasks.RESULT_WAIT_SECONDS)
            agent = await agent_of(ctx)  # after every wait, the agent again
            plan = await fresh(agent, plan.id)
        if tasks.task_status(plan) == "working":
            raise tasks.legacy_unfinished(plan)
        return tasks.legacy_result(plan, await rendered(plan, proposed=False))

    subscribe_handlers = (
        {"on_subscribe_resource": on_subscribe, "on_unsubscribe_resource": on_unsubscribe}
        if connection_subscriptions is not None
        else {}
    )
    server = _Server(
        "countersign",
        version="1",
        title="Countersign",
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=on_list_resources,
        on_list_resource_templates=on_list_resource_templates,
        on_read_resource=on_read_resource,
        on_subscriptions_listen=resources.PlanListen(agent_of),
        **subscribe_handlers,
    )
    server.add_request_handler("tasks/get", tasks.TaskParams, on_task_get)
    server.add_request_handler("tasks/update", tasks.UpdateTaskParams, on_task_update)
    server.add_request_handler("tasks/cancel", tasks.TaskParams, on_task_cancel)
    server.add_request_handler("tasks/result", tasks.TaskParams, on_task_result)

    async def legacy_task_calls(ctx, call_next):
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
            result, plan = await call(
                propose, ctx, params.name, dict(params.arguments or {}), _on_behalf_of(ctx, params)
            )
        except MCPError:
            raise
        except Exception as exc:
            correlation_id = _unexpected(exc, where="MCP tools/call (task)")
            raise MCPError(
                code=types.INTERNAL_ERROR,
                message=f"Something went wrong on our side; correlation id {correlation_id}",
            ) from None
        if plan is None:
            # No plan, so no task: the refusal is the request's error.
            raise _refusal_error(result)
        return tasks.legacy_created(plan)

    server.extensions[tasks.TASKS] = {}
    # Seals and verifies requestState (the 2026-07-28 multi-round-trip calls).
    server.middleware.append(consent.state_boundary(token_source))
    # Outside the agent's lease and the task calls (both look the database up): whatever
    # a request was doing when the database went away, the answer is UNAVAILABLE.
    server.middleware.append(_outage_boundary)
    # Cuts off a request whose agent is revoked or deactivated while it is open (outside
    # whatever answers a request itself, so nothing escapes it).
    server.middleware.append(agent_cutoff(token_source))
    server.middleware.append(legacy_task_calls)
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
