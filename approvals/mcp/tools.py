"""The tools: one per action the agent may propose (it only proposes), plus get_plan and
cancel_plan; their schemas and annotations, and the calls behind them, which are the JSON
API's services."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import mcp.types as types
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from actions.cache import snapshot as catalog_snapshot
from actions.lib.canonical import escape_pointer_token
from actions.lib.exceptions import CountersignError
from actions.models import Action, Agent

from ..api.endpoints import MAX_IDEMPOTENCY_KEY, idempotency_key_valid
from ..api.schemas import PlanCreate, PlanOut, Problem
from ..api.shapes import action_hints, action_out
from ..identity.requester import requester_from_sources
from ..models import Plan
from ..ratelimit import rate_limit_check
from ..selectors import actions_for_agent, plan_for_agent
from ..services import plan_cancel, plan_submit
from .boundary import (
    INVALID_PARAMS,
    InvalidRequest,
    authenticate,
    for_call,
    invalid_request,
    protocol_error,
)
from .rendering import CARD_URI, CLASS_MEANING, error_result, people_approve, plan_result

GET_PLAN = "get_plan"
CANCEL_PLAN = "cancel_plan"
# An action with one of these names is not offered over MCP: the name is taken.
RESERVED_NAMES = frozenset({GET_PLAN, CANCEL_PLAN})
MAX_WAIT_SECONDS = 30


def _own_field(input_schema: dict[str, Any], name: str) -> str:
    """``name``, unless the action's own input already has a field of that name."""
    properties = input_schema.get("properties") or {}
    return name if name not in properties else f"countersign_{name}"


def reason_field_of(input_schema: dict[str, Any]) -> str:
    return _own_field(input_schema, "reason")


def key_field_of(input_schema: dict[str, Any]) -> str:
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
    reason = reason_field_of(schema)
    schema.setdefault("properties", {})[reason] = {
        "type": "string",
        "maxLength": 2000,
        "description": (
            "Why you propose this. Shown to the reviewer as a quoted, unverified note; "
            "it never changes what is done."
        ),
    }
    schema["properties"][key_field_of(out["input_schema"])] = {
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


def offered(agent: Agent) -> list[Action]:
    return [
        a
        for a in actions_for_agent(agent).select_related("connector")
        if a.name not in RESERVED_NAMES
    ]


def list_tools_for(token: str | None, how: str) -> list[types.Tool]:
    agent = authenticate(token, how=how)
    return [action_tool(a) for a in offered(agent)] + fixed_tools()


@catalog_snapshot()
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
    Returns the result and the plan it shows (None for a refusal). The token's check
    and the submission see the catalog as of one read of its generation."""
    agent = authenticate(token, how=how)
    action = Action.objects.filter(name=name, enabled=True).first()
    schema = action.spec.input_schema if action is not None else {}
    reason_field, key_field = reason_field_of(schema), key_field_of(schema)
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
            raise invalid_request(
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
            raise protocol_error(for_call(exc, reason_field), code=INVALID_PARAMS) from None
        return error_result(for_call(exc, reason_field), consequence=nothing), None
    return plan_result(plan, proposed=True), plan


def plan_args(model: type[PlanArgs], arguments: dict[str, Any]) -> PlanArgs:
    try:
        return model.model_validate(arguments)
    except PydanticValidationError as exc:
        raise invalid_request(exc, at={}) from None


def read_plan(token: str | None, how: str, arguments: dict[str, Any]) -> tuple[Agent, Plan, float]:
    agent = authenticate(token, how=how)
    args = plan_args(GetPlanArgs, arguments)
    return agent, plan_for_agent(agent, args.plan_id), args.wait


def cancel(token: str | None, how: str, arguments: dict[str, Any]) -> types.CallToolResult:
    agent = authenticate(token, how=how)
    try:
        args = plan_args(PlanArgs, arguments)
        plan = plan_cancel(agent=agent, plan_id=args.plan_id)
    except CountersignError as exc:
        return error_result(for_call(exc), consequence="Nothing changed.")
    return plan_result(plan, proposed=False)
