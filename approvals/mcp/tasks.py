"""Tasks, so an action's tool call can return a task that completes when its plan
settles: the tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28), and the
2025-11-25 form the TypeScript SDK 1.x speaks in the handshake era (below).

The SDK carries the 2025-11-25 task types but dispatches no task method, and has no
2026-07-28 tasks support beyond its extension seams; this module implements the
extension's specification on those seams (``Server.extensions`` advertises it,
``add_request_handler`` serves ``tasks/get``, ``tasks/update`` and ``tasks/cancel``).

A task is the plan: its id is the plan's id (random, 122 bits), ``working`` while the
plan is in flight (awaiting a decision, approved, executing), ``completed`` once it is
settled — with the tool result ``get_plan`` would give, whatever the outcome (a denial
is a completed call, not a protocol failure) — and ``cancelled`` when it was withdrawn.
Only a client that declares the extension on the request gets one; every task request
is checked against the caller's token, and another agent's plan is no task at all.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import Field

from ..models import Plan, PlanStatus
from .consent import is_modern
from .rendering import status_meaning

TASKS = "io.modelcontextprotocol/tasks"
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
POLL_INTERVAL_MS = 5000


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Did this request's client declare the extension (2026-07-28 only)?"""
    caps = ctx.session.client_capabilities
    return is_modern(ctx) and caps is not None and TASKS in (caps.extensions or {})


def require(ctx: ServerRequestContext[Any, Any]) -> None:
    if not declared(ctx):
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="Missing required client capability",
            data={"requiredCapabilities": {"extensions": {TASKS: {}}}},
        )


class TaskParams(types.RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] | None = Field(default=None, alias="inputResponses")


def not_found() -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message="Failed to retrieve task: Task not found")


def _moment(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def task_status(plan: Plan) -> str:
    if plan.status == PlanStatus.CANCELLED:
        return "cancelled"
    return "completed" if plan.status in PlanStatus.settled() else "working"


def task(plan: Plan) -> dict[str, Any]:
    """The task's fields (camelCase, as on the wire)."""
    moments = [m for m in (plan.created_at, plan.decided_at, plan.finished_at) if m]
    return {
        "taskId": str(plan.id),
        "status": task_status(plan),
        "statusMessage": f"plan {plan.status}: {status_meaning(plan)}",
        "createdAt": _moment(plan.created_at),
        "lastUpdatedAt": _moment(max(moments)),
        # Plans are kept; the task stays readable as long as the plan is.
        "ttlMs": None,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }


def created(plan: Plan) -> dict[str, Any]:
    """``CreateTaskResult``: returned in place of the tool result (the plan is stored,
    so tasks/get resolves at once)."""
    return {"resultType": "task", **task(plan)}


def detailed(plan: Plan, result: types.CallToolResult | None) -> dict[str, Any]:
    """``GetTaskResult``: the task, with the final tool result once completed."""
    body = {"resultType": "complete", **task(plan)}
    if body["status"] == "completed" and result is not None:
        body["result"] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return body


# --- the 2025-11-25 form (the handshake era) ------------------------------------------------
#
# The server advertises ``tasks.requests.tools.call`` (and ``tasks.cancel``), each action's
# tool says ``execution.taskSupport: "optional"``, and a client that wants a task puts
# ``task`` in the ``tools/call`` parameters: the request itself says so, which is what a
# stateless server needs (it keeps no client capabilities between requests). The answer
# is ``{"task": …}``; ``tasks/get`` reads it, ``tasks/result`` gives the tool result once
# the plan settles, ``tasks/cancel`` withdraws the plan. The same plan-is-the-task rules
# as above; the field names are that revision's (``ttl``, ``pollInterval``).

RELATED_TASK = "io.modelcontextprotocol/related-task"
RESULT_WAIT_SECONDS = 30


def legacy_capability() -> types.ServerTasksCapability:
    return types.ServerTasksCapability(
        cancel=types.TasksCancelCapability(),
        requests=types.ServerTasksRequestsCapability(
            tools=types.TasksToolsCapability(call=types.TasksCallCapability())
        ),
    )


def legacy_task(plan: Plan) -> dict[str, Any]:
    """A 2025-11-25 ``Task`` (what ``tasks/get`` and ``tasks/cancel`` return)."""
    fields = task(plan)
    return {
        "taskId": fields["taskId"],
        "status": fields["status"],
        "statusMessage": fields["statusMessage"],
        "createdAt": fields["createdAt"],
        "lastUpdatedAt": fields["lastUpdatedAt"],
        "ttl": None,
        "pollInterval": POLL_INTERVAL_MS,
    }


def legacy_created(plan: Plan) -> dict[str, Any]:
    """``CreateTaskResult`` (2025-11-25), in place of the tool result."""
    return {"task": legacy_task(plan)}


def legacy_result(plan: Plan, result: types.CallToolResult) -> dict[str, Any]:
    """What ``tasks/result`` returns: the tool result, naming its task."""
    body = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    body.setdefault("_meta", {})[RELATED_TASK] = {"taskId": str(plan.id)}
    return body


def legacy_unfinished(plan: Plan) -> MCPError:
    return MCPError(
        code=types.INVALID_REQUEST,
        message=(
            f"Task not finished after {RESULT_WAIT_SECONDS} s: plan {plan.status}; "
            "poll tasks/get and ask for the result once it is completed"
        ),
    )


def legacy_terminal() -> MCPError:
    return MCPError(
        code=types.INVALID_PARAMS, message="Cannot cancel task: already in terminal status"
    )


def only_legacy(method: str) -> MCPError:
    return MCPError(
        code=types.METHOD_NOT_FOUND,
        message=f"{method} is the 2025-11-25 tasks form; the tasks extension has tasks/get",
    )
