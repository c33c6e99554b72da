"""The agent API, v1: list actions, propose plans, read them (long-poll), cancel.

Agents have no endpoint that approves anything. Every error is an RFC 9457 problem
with a correlation id; nothing upstream-raw, secret or internal reaches an agent.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI, Query, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.responses import Status
from ninja.security import HttpBearer
from psycopg_pool import PoolTimeout
from pydantic import Field

from actions.cache import pinned as catalog_pinned
from actions.cache import snapshot as catalog_snapshot
from actions.lib.bearer import bearer_token
from actions.lib.canonical import CanonicalJSONError, escape_pointer_token, loads_strict
from actions.lib.exceptions import CountersignError
from actions.lib.outage import DatabaseUnavailable, database_unavailable, known_away, noted
from actions.lib.problems import PROBLEM_CONTENT_TYPE, current_correlation_id, problem_body
from actions.models import Agent
from actions.services import agent_authenticate

from ..identity.requester import HEADER as ON_BEHALF_OF
from ..identity.requester import requester_from_sources
from ..models import Plan, PlanStatus
from ..ratelimit import RateLimited, rate_limit_check
from ..selectors import actions_for_agent, plan_for_agent
from ..services import Replay, plan_cancel, plan_submit
from ..wakeups import AgentGone, AgentWatcher, wait_for_change
from .schemas import ActionOut, PlanCreate, PlanOut, Problem
from .shapes import action_out, plan_out

log = logging.getLogger(__name__)


class MalformedBody(CountersignError):
    status = 400
    type = "malformed-json"
    title = "The body is not acceptable JSON"


class BodyTooLarge(CountersignError):
    status = 413
    type = "body-too-large"
    title = "The body is too large"


class Unauthenticated(CountersignError):
    status = 401
    type = "unauthenticated"
    title = "A valid agent token is required"


def problem(
    *,
    status: int,
    type: str,
    title: str,
    detail: str,
    errors: list[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
    correlation_id: str | None = None,
) -> JsonResponse:
    body = problem_body(
        status=status,
        type=type,
        title=title,
        detail=detail,
        errors=errors,
        correlation_id=correlation_id,
    )
    response = JsonResponse(body, status=status, content_type=PROBLEM_CONTENT_TYPE)
    for key, value in (headers or {}).items():
        response[key] = value
    return response


def problem_from(exc: CountersignError) -> JsonResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    if isinstance(exc, RateLimited | DatabaseUnavailable):
        headers = {"Retry-After": str(exc.retry_after)}
    return problem(
        status=exc.status,
        type=exc.type,
        title=exc.title,
        detail=exc.detail,
        errors=exc.errors or None,
        headers=headers,
    )


class StrictJSONParser(Parser):
    """JSON bodies with duplicate keys, NaN or oversized payloads are refused."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = request.body  # Django refuses a declared length over the limit itself
        if len(raw) > limit:
            raise BodyTooLarge(f"at most {limit} bytes")
        if not raw:
            raise MalformedBody("the body is empty")
        try:
            # Strings as sent: an input's formats are checked on them before they are put
            # in normal form (approvals/services/validation.py: plan_validate_input).
            return loads_strict(raw, nfc=False)
        except CanonicalJSONError as exc:
            errors = [{"pointer": exc.pointer, "message": exc.message}] if exc.pointer else None
            raise MalformedBody(exc.message, errors=errors) from None


class AgentBearer(HttpBearer):
    def __call__(self, request: HttpRequest) -> Agent | None:
        # Parse the header ourselves: the stock implementation logs unexpected values,
        # which could put a token in the logs.
        token = bearer_token(request.headers.get("Authorization"))
        return None if token is None else self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str) -> Agent | None:
        # The catalog generation the token was checked under, kept on the request: a
        # submission then looks up the rest of the catalog under it (create_plan), one
        # read of the generation for the whole request.
        with catalog_snapshot() as generation:
            agent = agent_authenticate(token)
        request.catalog_generation = generation
        if agent is not None:
            request.agent = agent
        return agent


class AgentAPI(NinjaAPI):
    """The agent API; its OpenAPI document says what it really sends: every error is an
    ``application/problem+json`` body (ninja would document ``application/json``)."""

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                for status, answer in (operation.get("responses") or {}).items():
                    content = answer.get("content") or {}
                    if str(status)[:1] in "45" and "application/json" in content:
                        content[PROBLEM_CONTENT_TYPE] = content.pop("application/json")
        return schema


api = AgentAPI(
    title="Countersign agent API",
    version="1",
    description=(
        "Agents propose typed plans; people approve the exact plan; an isolated worker "
        "executes it once. Agents cannot approve anything."
    ),
    urls_namespace="api-v1",
    auth=AgentBearer(),
    parser=StrictJSONParser(),
    openapi_url="/openapi.json",
    docs_url="/docs",
)


@api.exception_handler(CountersignError)
def _domain_error(request: HttpRequest, exc: CountersignError) -> HttpResponse:
    return problem_from(exc)


@api.exception_handler(AuthenticationError)
def _auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return problem_from(Unauthenticated("send Authorization: Bearer <agent token>"))


def _pointer(loc: tuple | list) -> str:
    parts = list(loc)
    # ninja prefixes locations with the source ("body", "query", "path") and, for a
    # body, the parameter name; pointers are into the submitted document itself.
    if parts and parts[0] in ("body", "query", "path", "header"):
        source = parts.pop(0)
        if source == "body" and parts and parts[0] == "payload":
            parts.pop(0)
    return "".join(f"/{escape_pointer_token(p)}" for p in parts)


def validation_message(error: dict[str, Any]) -> str:
    """The message for one pydantic error, worded like the action schema's errors."""
    if error.get("type") == "extra_forbidden":
        return "unknown field"
    if error.get("type") == "missing":
        return "this field is required"
    return error.get("msg", "invalid")


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [
        {"pointer": _pointer(error.get("loc", ())), "message": validation_message(error)}
        for error in exc.errors
    ]
    return problem(
        status=422,
        type="invalid-request",
        title="The request does not match the API schema",
        detail="see errors",
        errors=errors,
    )


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # ninja wraps parser failures in a generic 400; ours carry the precise reason.
    if isinstance(exc.__cause__, CountersignError):
        return problem_from(exc.__cause__)
    if isinstance(exc.__cause__, RequestDataTooBig):
        return problem_from(BodyTooLarge(f"at most {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"))
    return problem(status=exc.status_code, type="http-error", title=str(exc), detail=str(exc))


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return problem_from(BodyTooLarge(f"at most {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"))


def unavailable(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """The database cannot be reached (actions.lib.outage): 503 with Retry-After, logged
    once per outage and counted after that, never a traceback per request."""
    noted(exc, f"agent API, {request.method} {request.path}")
    response = problem_from(DatabaseUnavailable())
    # Django would log every 503 again as an error line of its own.
    response._has_been_logged = True
    return response


@api.exception_handler(DatabaseError)
def _database_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    if isinstance(exc.__cause__, PoolTimeout):
        if known_away():
            # The pool waited for a connection it cannot make: the database is away.
            return unavailable(request, exc)
        # Every pooled connection stayed busy for COUNTERSIGN_DB_POOL_TIMEOUT seconds (the
        # web process is overloaded): ask the agent to come back rather than report a fault.
        log.warning("agent API: no database connection free in the pool; answered 503")
        return problem(
            status=503,
            type="busy",
            title="The service is busy",
            detail="try again shortly",
            headers={"Retry-After": "1"},
        )
    return _unexpected(request, exc)


@api.exception_handler(Exception)
def _unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    if database_unavailable(exc):
        return unavailable(request, exc)
    # The id this request's lines already carry, if any: one grep finds them all.
    correlation_id = current_correlation_id()
    log.exception("agent API error, correlation id %s", correlation_id)
    return problem(
        status=500,
        type="internal-error",
        title="Something went wrong on our side",
        detail="quote the correlation id to an administrator",
        correlation_id=correlation_id,
    )


# --- actions (what the API says of one: shapes.py) -----------------------------------


@api.get(
    "/actions",
    response={200: list[ActionOut], 401: Problem, 503: Problem},
    tags=["actions"],
    summary="Actions this agent may propose",
)
def list_actions(request: HttpRequest):
    agent: Agent = request.auth
    return [action_out(a) for a in actions_for_agent(agent)]


# --- plans (what the API says of one: shapes.py) -------------------------------------


def idempotency_key_valid(key: str) -> bool:
    """An Idempotency-Key (the header, or the MCP tools' argument): 1 to 255 printable
    characters."""
    return 1 <= len(key) <= MAX_IDEMPOTENCY_KEY and key.isprintable()


MAX_IDEMPOTENCY_KEY = 255

_PLAN_ERRORS = {
    400: Problem,
    401: Problem,
    403: Problem,
    404: Problem,
    409: Problem,
    413: Problem,
    422: Problem,
    429: Problem,
    502: Problem,
    503: Problem,
    504: Problem,
}


@api.post(
    "/plans",
    response={201: PlanOut, 200: PlanOut, **_PLAN_ERRORS},
    tags=["plans"],
    summary="Propose a plan (read-only preview; nothing is written)",
    openapi_extra={
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "maxLength": 255},
                "description": (
                    "Resubmitting with the same key returns the same plan (kept 24 h). "
                    "Without a key, proposing the same plan again while it awaits a "
                    "decision also returns it (200, header Countersign-Repeat: true)."
                ),
            },
            {
                "name": ON_BEHALF_OF,
                "in": "header",
                "required": False,
                "schema": {"type": "string", "maxLength": 16384},
                "description": (
                    "The ID token (from the identity provider Countersign signs reviewers "
                    "in with, audience its client id) of the person the agent acts for. "
                    "Verified like a sign-in; the plan records that person, who cannot "
                    "approve it. Refused with 403 on-behalf-of-refused, no plan made."
                ),
            },
        ]
    },
)
def create_plan(request: HttpRequest, response: HttpResponse, payload: PlanCreate):
    agent: Agent = request.auth
    rate_limit_check(scope="plans", subject=str(agent.pk))
    key = request.headers.get("Idempotency-Key")
    if key is not None and not idempotency_key_valid(key):
        return problem(
            status=422,
            type="invalid-request",
            title="The request does not match the API schema",
            detail="Idempotency-Key must be 1 to 255 printable characters",
            errors=[{"pointer": "", "message": "invalid Idempotency-Key header"}],
        )
    requester = requester_from_sources(request.headers.get(ON_BEHALF_OF))
    # The catalog as the token was checked: read once at the start of the request, as
    # fresh as a second read would be (a change applies from the next request on).
    with catalog_pinned(request.catalog_generation):
        plan, replayed = plan_submit(
            agent=agent,
            action_name=payload.action,
            input=payload.input,
            reason=payload.reason or "",
            idempotency_key=key,
            requester=requester,
        )
    # Rendered by ninja like GET /plans/{id}, so both endpoints show a plan identically.
    response["Location"] = f"/api/v1/plans/{plan.id}"
    if replayed == Replay.IDEMPOTENCY_KEY:
        response["Idempotent-Replayed"] = "true"
    elif replayed == Replay.REPEAT:
        # Nothing was created: the same plan still awaits a decision.
        response["Countersign-Repeat"] = "true"
        return Status(200, plan_out(plan))
    return Status(201, plan_out(plan))


class WaitQuery(Schema):
    wait: float = Field(default=0, ge=0, le=30, description="Seconds to wait for a status change.")


@api.get(
    "/plans/{plan_id}",
    response={200: PlanOut, 401: Problem, 404: Problem, 422: Problem, 503: Problem},
    tags=["plans"],
    summary="Read a plan; ?wait=N long-polls for a change",
)
def get_plan(request: HttpRequest, plan_id: uuid.UUID, query: Query[WaitQuery]):
    agent: Agent = request.auth
    if not query.wait:
        return Status(200, plan_out(plan_for_agent(agent, plan_id)))
    # Long-poll: woken by approvals.wakeups (a Redis message, or one batched read per
    # process), never by reading the database per waiter. The first read happens after
    # registering, so a change committed in between is not missed; the request's
    # connection is given back before waiting. Under the ASGI server, approvals.api.longpoll
    # does this wait before Django, holding no thread; this path serves the rest (a
    # request the gate could not check, Django's test client, a plain WSGI server). An
    # agent revoked or deactivated meanwhile is answered 401 as soon as that is seen.
    token = bearer_token(request.headers.get("Authorization")) or ""
    try:
        plan = async_to_sync(_wait_for_plan)(agent, token, plan_id, query.wait)
    except AgentGone:
        raise Unauthenticated("send Authorization: Bearer <agent token>") from None
    return Status(200, plan_out(plan))


async def _wait_for_plan(agent: Agent, token: str, plan_id: uuid.UUID, seconds: float) -> Plan:
    read: dict[str, Plan] = {}

    async def read_status() -> str:
        read["plan"] = await sync_to_async(_read_releasing)(agent, plan_id)
        return read["plan"].status

    # This request's own watcher, reading on the request's thread and connection (the
    # loop is this call's alone).
    agents = AgentWatcher(run=_releasing)
    try:
        async with agents.lease(token) as lease:
            first = await wait_for_change(plan_id, read=read_status, timeout=seconds, lease=lease)
            await lease.confirm()  # after the wait, the agent is checked again
    finally:
        await agents.aclose()
    if first in PlanStatus.terminal():
        return read["plan"]
    return await sync_to_async(plan_for_agent)(agent, plan_id)


def _read_releasing(agent: Agent, plan_id: uuid.UUID) -> Plan:
    """plan_for_agent, then close this thread's connection (a long wait follows)."""
    return _released(plan_for_agent)(agent, plan_id)


def _released(fn):
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            if not connection.in_atomic_block:  # tests run inside a transaction
                connection.close()

    return run


def _releasing(fn):
    """``fn`` on the request's thread, its connection closed afterwards (while waiting)."""
    return sync_to_async(_released(fn))


@api.post(
    "/plans/{plan_id}/cancel",
    response={
        200: PlanOut,
        401: Problem,
        404: Problem,
        409: Problem,
        422: Problem,
        503: Problem,
    },
    tags=["plans"],
    summary="Withdraw a plan before the worker sends it (awaiting approval or approved)",
)
def cancel_plan(request: HttpRequest, plan_id: uuid.UUID):
    plan = plan_cancel(agent=request.auth, plan_id=plan_id)
    return Status(200, plan_out(plan))
