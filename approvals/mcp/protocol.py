"""The MCP protocol: the tools (one per action the agent may propose, plus get_plan and
cancel_plan), the card resources, and the server over streamable HTTP (``/mcp``, see
config/asgi.py) and stdio (``manage.py mcp``). What the results look like is in
approvals/mcp/rendering.py.

Every tool calls the services the JSON API calls (``plan_submit``, ``plan_cancel``, the
selectors), so an MCP client gets the same plans and the same refusals, worded the
same way: a refusal is the API's RFC 9457 problem document, with its pointers aimed at
the ``tools/call`` parameters (``/arguments/email`` where the API says ``/input/email``).

The tools that propose only *propose*: nothing is written upstream until a person
approves the exact plan. Their annotations describe what calling the tool does (it
stores a plan in Countersign), not what the approved action will later do upstream;
that is in the description and the card.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import mcp.types as types
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from actions.lib.bearer import bearer_token
from actions.lib.canonical import escape_pointer_token
from actions.lib.exceptions import CountersignError
from actions.lib.problems import problem_body, problem_body_from, problem_line
from actions.models import Action, Agent
from actions.services import agent_authenticate

from ..api import Unauthenticated, action_out, validation_message
from ..models import Plan, PlanStatus
from ..ratelimit import rate_limit_check
from ..schemas import PlanCreate, PlanOut
from ..selectors import actions_for_agent, plan_for_agent
from ..services import plan_cancel, plan_submit
from ..wakeups import db_call, wait_for_change
from .rendering import (
    CARD_URI,
    CLASS_MEANING,
    card_markdown,
    error_result,
    people,
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
INVALID_PARAMS = types.INVALID_PARAMS

INSTRUCTIONS = (
    "Countersign stands between you and the systems you change. Each action tool only "
    "proposes: Countersign previews the change read-only and a person approves that exact "
    "plan before a worker applies it once. Say why in `reason`; follow the plan with "
    "get_plan (it can wait up to 30 s for a change) and withdraw it with cancel_plan. "
    "Each action's card is a resource."
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


def _reason_field(input_schema: dict[str, Any]) -> str:
    """``reason``, unless the action's own input already has a field of that name."""
    properties = input_schema.get("properties") or {}
    return "reason" if "reason" not in properties else "countersign_reason"


def _plan_output_schema() -> dict[str, Any]:
    return PlanOut.model_json_schema()


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
    card = out["card"]
    approvals = out["approval"]["approvers_required"]
    klass = out["consequence_class"]
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
        annotations=types.ToolAnnotations(
            title=out["title"],
            # Calling the tool stores a plan in Countersign (so it is not read-only),
            # adds a record and changes none (not destructive), adds another plan each
            # time (not idempotent) and reaches only the configured connector, read-only
            # (a closed world). What the approved action does upstream is in the card.
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
        meta={
            "countersign/action": {
                "consequence_class": klass,
                "kind": out["kind"],
                "approvals_required": approvals,
                "card": CARD_URI.format(name=action.name),
                # The hints for the upstream effect once approved, as GET /actions gives them.
                "approved_effect": out["annotations"],
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
        f"Nothing is written upstream until {people(approvals)} approve this exact "
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
    token: str | None, how: str, name: str, arguments: dict[str, Any]
) -> types.CallToolResult:
    """Call the JSON API's ``plan_submit`` with the tool arguments split into input and
    reason; refusals come back as the API's problem documents."""
    agent = _authenticate(token, how=how)
    action = Action.objects.filter(name=name, enabled=True).first()
    reason_field = _reason_field(action.spec.input_schema) if action is not None else "reason"
    values = {k: v for k, v in arguments.items() if k != reason_field}
    reason = arguments.get(reason_field)
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
        plan, _ = plan_submit(agent=agent, action_name=name, input=values, reason=reason or "")
    except CountersignError as exc:
        if exc.type in ("unknown-action", "not-allowed"):
            # The agent has no such tool: an MCP error, as for any unknown tool.
            raise _protocol_error(_for_call(exc, reason_field), code=INVALID_PARAMS) from None
        return error_result(_for_call(exc, reason_field), consequence=nothing)
    return plan_result(plan, proposed=True)


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


def list_cards(token: str | None, how: str) -> list[types.Resource]:
    agent = _authenticate(token, how=how)
    return [
        types.Resource(
            uri=CARD_URI.format(name=a.name),
            name=f"{a.name} card",
            title=f"Card: {a.title}",
            description=f"What {a.name} does once approved, its scope, and who must consent.",
            mime_type="text/markdown",
        )
        for a in _offered(agent)
    ]


def read_card(token: str | None, how: str, uri: str) -> types.ReadResourceResult:
    agent = _authenticate(token, how=how)
    for action in _offered(agent):
        if CARD_URI.format(name=action.name) == uri:
            return types.ReadResourceResult(
                contents=[
                    types.TextResourceContents(
                        uri=uri, mime_type="text/markdown", text=card_markdown(action)
                    )
                ]
            )
    problem = problem_body(
        status=404, type="not-found", title="Not found", detail="no such card for this agent"
    )
    raise MCPError(code=INVALID_PARAMS, message=problem_line(problem), data=problem)


# --- the server -----------------------------------------------------------------------

# How a handler finds the caller's token: from the HTTP request, or fixed (stdio).
TokenSource = Callable[[ServerRequestContext[Any, Any]], str | None]


def _token_from_request(ctx: ServerRequestContext[Any, Any]) -> str | None:
    request = ctx.request
    return bearer_token(request.headers.get("authorization")) if request is not None else None


def build_server(
    token_source: TokenSource = _token_from_request,
    *,
    how: str = "send Authorization: Bearer <agent token>",
) -> Server[Any]:
    """An MCP server whose every request is answered for the agent holding the token.

    The token is checked on every request, so a deactivated agent is refused at once.
    """

    async def call(fn: Callable[..., Any], ctx: ServerRequestContext[Any, Any], *args: Any) -> Any:
        try:
            return await _db(fn)(token_source(ctx), how, *args)
        except Unauthenticated as exc:
            raise _protocol_error(exc, code=UNAUTHENTICATED) from None

    async def on_list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await call(list_tools_for, ctx))

    async def on_call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        try:
            if params.name == GET_PLAN:
                return await _get_plan(ctx, arguments)
            if params.name == CANCEL_PLAN:
                return await call(cancel, ctx, arguments)
            return await call(propose, ctx, params.name, arguments)
        except MCPError:
            raise
        except Exception:
            correlation_id = str(uuid.uuid4())
            log.exception("MCP tool error, correlation id %s", correlation_id)
            return error_result(
                _Internal("an unexpected error; nothing upstream was touched"),
                consequence="Quote the correlation id to an administrator.",
                correlation_id=correlation_id,
            )

    async def _get_plan(ctx, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            agent, plan, wait = await call(read_plan, ctx, arguments)
        except CountersignError as exc:
            return error_result(_for_call(exc), consequence="Nothing changed.")
        if wait and plan.status not in PlanStatus.terminal():
            # The same long-poll as GET /plans/{id}?wait=N: woken by approvals.wakeups on
            # the first change, holding no thread or connection meanwhile. The status is
            # read again after registering, so a change since the read above counts.
            status_of = _db(
                lambda: Plan.objects.filter(id=plan.id).values_list("status", flat=True).first()
            )
            await wait_for_change(plan.id, read=status_of, timeout=wait)
            plan = await _db(plan_for_agent)(agent, plan.id)
        return await _db(plan_result)(plan, proposed=False)

    async def on_list_resources(ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=await call(list_cards, ctx))

    async def on_read_resource(
        ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await call(read_card, ctx, params.uri)

    return Server(
        "countersign",
        version="1",
        title="Countersign",
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=on_list_resources,
        on_read_resource=on_read_resource,
    )


class _Internal(CountersignError):
    status = 500
    type = "internal-error"
    title = "Something went wrong on our side"


async def serve_stdio(token: str) -> None:
    """Serve one client on standard input and output with the agent ``token``."""
    server = build_server(lambda ctx: token, how="set the agent token in the server's environment")
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


# --- streamable HTTP ------------------------------------------------------------------


class McpHttpApp:
    """The ASGI app behind ``/mcp``: checks the host and the bearer token, then hands the
    request to the SDK's session manager.

    Stateless: every POST stands alone (no session kept in this process), so any number
    of web processes can serve one client and a long ``get_plan`` wait holds nothing but
    its own request. The session manager needs a running task group; it is started on
    the first request rather than in a lifespan handler, so the app works whether or not
    the server sends lifespan events (uvicorn ``--lifespan off``); ``aclose`` stops it.
    """

    def __init__(self) -> None:
        self.server = build_server()
        self._manager: StreamableHTTPSessionManager | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not _host_allowed(headers.get("host", "")):
            await _send_json(send, 400, _rpc_error(INVALID_PARAMS, "Invalid Host header"))
            return
        token = bearer_token(headers.get("authorization"))
        if token is None or await _db(agent_authenticate)(token) is None:
            # 401 with the API's problem inside a JSON-RPC error: MCP clients surface it as
            # the request's error; plain HTTP clients see a normal bearer challenge.
            problem = problem_body_from(Unauthenticated("send Authorization: Bearer <agent token>"))
            body = _rpc_error(UNAUTHENTICATED, problem_line(problem), problem)
            await _send_json(send, 401, body, {"www-authenticate": "Bearer"})
            return
        manager = await self._started()
        await manager.handle_request(scope, receive, send)

    async def _started(self) -> StreamableHTTPSessionManager:
        if self._manager is not None:
            return self._manager
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._manager is None:
                manager = StreamableHTTPSessionManager(
                    app=self.server,
                    stateless=True,
                    json_response=True,
                    # Tool arguments are small JSON documents, like the API's bodies.
                    max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
                )
                ready = asyncio.Event()
                self._stop = asyncio.Event()

                async def run() -> None:
                    async with manager.run():
                        ready.set()
                        await self._stop.wait()

                self._runner = asyncio.create_task(run(), name="countersign-mcp")
                waiter = asyncio.create_task(ready.wait())
                await asyncio.wait({self._runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if not ready.is_set():
                    waiter.cancel()
                    self._runner.result()  # raises what stopped it
                self._manager = manager
        return self._manager

    async def aclose(self) -> None:
        """Stop the session manager; a later request starts a new one."""
        runner, stop = self._runner, self._stop
        self._manager = self._runner = self._stop = None
        if runner is not None and stop is not None:
            stop.set()
            await runner


def _host_allowed(host: str) -> bool:
    domain, _port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return bool(domain) and validate_host(domain, allowed)


def _rpc_error(code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": None, "error": error}


async def _send_json(send, status: int, body: dict[str, Any], headers=None) -> None:
    payload = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})
