"""What every MCP request passes on its way in and out: the agent's token, the database
outage boundary, and refusals as JSON-RPC errors or as the API's problem documents with
their pointers aimed at the tools/call parameters."""

from __future__ import annotations

import logging
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError as PydanticValidationError

from actions.lib.canonical import escape_pointer_token
from actions.lib.exceptions import CountersignError
from actions.lib.outage import DatabaseUnavailable, database_unavailable, noted
from actions.lib.problems import current_correlation_id, problem_body_from, problem_line
from actions.models import Agent
from actions.services import agent_authenticate

from ..api.endpoints import Unauthenticated, validation_message

log = logging.getLogger(__name__)

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


class InvalidRequest(CountersignError):
    """The tool arguments do not match the request schema (the API's ``invalid-request``)."""

    status = 422
    type = "invalid-request"
    title = "The request does not match the API schema"


def authenticate(token: str | None, *, how: str) -> Agent:
    agent = agent_authenticate(token or "")
    if agent is None:
        raise Unauthenticated(how)
    return agent


def protocol_error(exc: CountersignError, *, code: int) -> MCPError:
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


async def outage_boundary(ctx: ServerRequestContext[Any, Any], call_next):
    """Server middleware: whatever a request was doing when the database went away, the
    answer is UNAVAILABLE."""
    try:
        return await call_next(ctx)
    except Exception as exc:
        if database_unavailable(exc):
            raise unavailable_error(exc, where=f"MCP {ctx.method}") from None
        raise


def pointer_for_call(pointer: str, reason_field: str) -> str:
    """A pointer into POST /plans's body, re-aimed at the tools/call parameters."""
    if pointer == "/action":
        return "/name"
    if pointer == "/reason":
        return f"/arguments/{escape_pointer_token(reason_field)}"
    if pointer == "/input" or pointer.startswith("/input/"):
        return "/arguments" + pointer[len("/input") :]
    return pointer


def for_call(exc: CountersignError, reason_field: str = "reason") -> CountersignError:
    exc.errors = [
        {**e, "pointer": pointer_for_call(e.get("pointer", ""), reason_field)} for e in exc.errors
    ]
    return exc


def invalid_request(error: PydanticValidationError, *, at: dict[str, str]) -> InvalidRequest:
    """The arguments broke the request schema; ``at`` maps a field to its pointer."""
    errors = []
    for e in error.errors():
        loc = [str(p) for p in e.get("loc", ())]
        head = at.get(loc[0], f"/arguments/{escape_pointer_token(loc[0])}") if loc else "/arguments"
        rest = "".join(f"/{escape_pointer_token(p)}" for p in loc[1:])
        errors.append({"pointer": head + rest, "message": validation_message(e)})
    return InvalidRequest("see errors", errors=errors)


def unexpected(exc: Exception, *, where: str) -> str:
    """Inside an ``except``: a database outage becomes the UNAVAILABLE error (raised);
    anything else is logged with its traceback and a correlation id, which is returned
    for the caller's answer."""
    if database_unavailable(exc):
        raise unavailable_error(exc, where=where) from None
    correlation_id = current_correlation_id()
    log.exception("%s: an unexpected error, correlation id %s", where, correlation_id)
    return correlation_id


def refusal_error(result: types.CallToolResult) -> MCPError:
    """A refused task-augmented call as a JSON-RPC error: the problem line and each
    pointer in the message, the problem document as its data."""
    problem = result.structured_content or {}
    errors = problem.get("errors") or ()
    pointers = "; ".join(f"{e['pointer'] or '/'}: {e['message']}" for e in errors)
    message = problem_line(problem) + (f" ({pointers})" if pointers else "")
    return MCPError(code=INVALID_PARAMS, message=message, data=problem)
