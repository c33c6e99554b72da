"""Consent without leaving the client: URL-mode elicitation of the plan's review page.

When the client can show a URL to its user (``capabilities.elicitation.url``), a tool
call that stored a plan awaiting a decision asks the user to open the plan's review page
in Countersign — the client shows the address, so the user sees the domain — and returns
once a reviewer has decided, or after a bounded wait. The decision itself stays a
signed-in reviewer's act on the page, bound to the fingerprint: form-mode elicitation is
never used (an answer typed into the client is not an approval), and a decline or a
dismissal leaves the plan awaiting a decision (it is never a denial nobody made).

Two ways to ask, by protocol era:

* **2026-07-28**: the call's result is ``input_required`` with the elicitation and a
  ``requestState``; the client asks its user and calls again with the answer. The state
  is sealed by the SDK's :class:`~mcp.server.request_state.RequestStateBoundary`
  (AES-256-GCM, expiry, bound to the tool call and the token) under keys derived from the
  product's ``SECRET_KEY`` (and its fallbacks), so any web process verifies what another
  sealed; each state is single use, enforced in Redis (``SET NX``, shared by every process).
* **The initialize handshake** with a back channel (stdio): an ``elicitation/create``
  request during the call, then ``notifications/elicitation/complete`` once decided.
  Stateless HTTP in that era has no back channel, so the plan comes back at once.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Callable
from typing import Any

import anyio
import mcp.types as types
import redis
from django.conf import settings
from django.core.cache import cache
from mcp.server.context import ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from ..models import Plan

log = logging.getLogger(__name__)

# The key of the one input request: the user's answer to "open the review page".
REVIEW = "review"
# How long one round waits for a decision after the user accepted, and how many rounds
# (2026-07-28: each one a fresh call from the client) before the plan is returned as it
# is, still awaiting.
ROUND_SECONDS = 25.0
MAX_ROUNDS = 5
STATE_TTL_SECONDS = 600
_STATE_VERSION = 1
_KEY_LABEL = b"countersign/mcp/request-state/v1"
AUDIENCE = "countersign"


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Can the client show the review page's URL to its user, in this era?"""
    caps = ctx.session.client_capabilities
    if caps is None or caps.elicitation is None or caps.elicitation.url is None:
        return False
    return is_modern(ctx) or ctx.session.can_send_request


def message(plan: Plan) -> str:
    return (
        f"Countersign: review plan {plan.short_code} ({plan.action.title}) and approve or "
        "deny it on its page, signed in as a reviewer. Nothing is written until a reviewer "
        "approves this exact plan there; if you do not open it, the plan keeps waiting."
    )


def elicitation(plan: Plan, *, legacy_id: bool) -> types.ElicitRequestURLParams:
    """The URL-mode request (never form mode). ``elicitationId`` exists only in the
    handshake era; 2026-07-28 removed it."""
    return types.ElicitRequestURLParams(
        message=message(plan),
        url=plan.review_url,
        elicitation_id=str(plan.id) if legacy_id else None,
    )


# --- 2026-07-28: input_required and requestState --------------------------------------------


def ask(plan: Plan) -> types.InputRequiredResult:
    """The first round: ask the user to open the review page."""
    return types.InputRequiredResult(
        input_requests={REVIEW: types.ElicitRequest(params=elicitation(plan, legacy_id=False))},
        request_state=_state(plan, round=0),
    )


def keep_waiting(plan: Plan, *, round: int) -> types.InputRequiredResult:
    """A later round: nothing to ask, only the state to send back (the client calls
    again at once and the wait goes on)."""
    return types.InputRequiredResult(request_state=_state(plan, round=round))


def _state(plan: Plan, *, round: int) -> str:
    # Plaintext here: the boundary seals it on the way out.
    return json.dumps(
        {"v": _STATE_VERSION, "plan": str(plan.id), "round": round, "nonce": secrets.token_hex(16)}
    )


class StateRefused(MCPError):
    def __init__(self) -> None:
        # The SDK's frozen wording for a state it refuses; the reason stays in our code.
        super().__init__(
            code=types.INVALID_PARAMS,
            message="Invalid or expired requestState",
            data={"reason": "invalid_request_state"},
        )


async def state_spend(plaintext: str) -> dict[str, Any]:
    """The state the boundary verified, spent: a second use of it is refused."""
    try:
        state = json.loads(plaintext)
        if state.get("v") != _STATE_VERSION:
            raise ValueError("version")
        str(state["plan"]), int(state["round"]), str(state["nonce"])
    except (ValueError, KeyError, TypeError, AttributeError):
        raise StateRefused() from None
    try:
        first = await anyio.to_thread.run_sync(_spend_once, state["nonce"])
    except Exception:  # noqa: BLE001 - Redis unreachable: refuse rather than allow a replay
        log.warning("could not record a spent requestState; refusing it")
        raise StateRefused() from None
    if not first:
        raise StateRefused()
    return state


def _spend_once(nonce: str) -> bool:
    """Record the nonce as spent; False if it already was. In Redis (SET NX), shared by
    every process; without Redis (embedded mode: one web process) in the process's
    cache."""
    key = f"countersign:mcp:state:{nonce}"
    ttl = STATE_TTL_SECONDS + 60
    if settings.REDIS_URL:
        return bool(_redis(settings.REDIS_URL).set(key, b"1", nx=True, ex=ttl))
    return cache.add(key, 1, timeout=ttl)


@functools.lru_cache(maxsize=4)
def _redis(url: str):
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def answer(params: types.CallToolRequestParams) -> str | None:
    """The user's answer to the review request: accept, decline, cancel, or None."""
    response = (params.input_responses or {}).get(REVIEW)
    action = getattr(response, "action", None)
    return action if action in ("accept", "decline", "cancel") else None


def _keys() -> list[bytes]:
    secrets_ = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())]
    keys = [hmac.new(str(s).encode(), _KEY_LABEL, hashlib.sha256).digest() for s in secrets_]
    return list(dict.fromkeys(keys))


def state_boundary(
    token_of: Callable[[ServerRequestContext[Any, Any]], str | None],
) -> RequestStateBoundary:
    """The SDK's sealing middleware, keyed for every process that shares the settings,
    each state bound to the token that called (a state minted for one agent is refused
    for another)."""

    def principal(ctx: ServerRequestContext[Any, Any]) -> str | None:
        token = token_of(ctx)
        return hashlib.sha256(token.encode()).hexdigest() if token else None

    security = RequestStateSecurity(
        keys=_keys(), ttl=STATE_TTL_SECONDS, bind_principal=principal, audience=AUDIENCE
    )
    return RequestStateBoundary(security, default_audience=AUDIENCE)


# --- notes for the result --------------------------------------------------------------------

DECLINED = (
    "You chose not to open the review page. That is not a denial: the plan still awaits a "
    "reviewer's decision; follow it with get_plan or its resource."
)
DISMISSED = (
    "The review page was not opened. That is not a denial: the plan still awaits a "
    "reviewer's decision; follow it with get_plan or its resource."
)


def waited(seconds: float) -> str:
    return (
        f"No reviewer has decided yet (waited {seconds:.0f} s). The plan still awaits a "
        "decision: follow it with get_plan or its resource."
    )
