"""On behalf of a person: the ID token an agent attaches to a proposal, verified.

An agent acting for someone sends that person's ID token from the identity provider
Countersign signs reviewers in with (``Countersign-On-Behalf-Of`` on the JSON API,
``_meta["countersign/on-behalf-of"]`` on an MCP tool call, or the same header on the
MCP HTTP endpoint). An ID token, not an access token: its audience is Countersign's own
client id, so it is the token that says "this person, for us"; an access token's
audience is whatever API the provider minted it for, and many providers make it opaque.

It passes the sign-in's checks exactly (approvals/identity/oidc.py, ``id_token_claims_check``):
a signature by a key the provider publishes at the sign-in's JWKS endpoint, under the
configured algorithm (mozilla-django-oidc's ``get_payload_data``, PyJWT underneath),
our issuer, our client id as audience (``azp`` us when there are several), an expiry
and issue time within the leeway, a subject. There is no nonce: the token was issued
to a sign-in at the agent's side, not ours. The keys are read with a bounded GET and
kept JWKS_FRESH_SECONDS; a ``kid`` not among them reads them again at once, at
most every JWKS_REFETCH_SECONDS, so a rotated key works without a restart and a flood
of made-up ``kid`` values cannot make us hammer the provider (nor a provider that is
down hold up every request: the keys read last count meanwhile).

What this module gives is a :class:`Requester`, for the surfaces that take a token (the
agent API and MCP) to hand to the core. What a requester then means for a plan (it is kept
on the plan and in its fingerprint, and that person never approves it) is a rule of who
decides, in approvals/decisions/requester.py: this module is sign-in's part, the token's
checks, and the core imports nothing of it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import jwt
import requests
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.utils.encoding import smart_str

from actions.lib.exceptions import CountersignError

from ..decisions.requester import Requester
from .oidc import (
    ReviewerOIDCBackend,
    SignInRefused,
    _groups,
    _library_reason,
    id_token_claims_check,
)
from .provider import provider_json

logger = logging.getLogger(__name__)

HEADER = "Countersign-On-Behalf-Of"
MCP_META_KEY = "countersign/on-behalf-of"
# Far above any real ID token (a few KiB with many groups), far below a memory problem.
MAX_TOKEN_CHARS = 16 * 1024
JWKS_MAX_BYTES = 512 * 1024
JWKS_FRESH_SECONDS = 3600.0
JWKS_REFETCH_SECONDS = 10.0
MAX_GROUPS = 200


class OnBehalfOfRefused(CountersignError):
    """The attached ID token does not name a person we can act for. 403: the agent's own
    credentials are fine (so not 401), the request is well formed, and no plan is made."""

    status = 403
    type = "on-behalf-of-refused"
    title = "The person's token was refused"


# --- the provider's keys ------------------------------------------------------------------


@dataclass
class _Keys:
    keys: list[dict]
    read_at: float = 0.0  # time.monotonic() of the last read that worked; 0: never
    tried_at: float = 0.0  # of the last attempt, whether it worked or not


_keys: dict[str, _Keys] = {}
_keys_lock = threading.Lock()


def _read_jwks(url: str) -> list[dict]:
    """The provider's JWKS: one GET, no redirect, the sign-in's timeout, TLS and proxy
    settings, at most JWKS_MAX_BYTES and twice OIDC_TIMEOUT for the body."""
    document = provider_json(url, max_bytes=JWKS_MAX_BYTES)
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise ValueError("no keys")
    return [k for k in keys if isinstance(k, dict)]


def _matching(keys: list[dict], header: dict) -> dict | None:
    """mozilla-django-oidc's rule (``retrieve_matching_jwk``): the key with the token's
    ``kid``, and its ``alg`` when the key names one."""
    found = None
    for jwk in keys:
        if getattr(settings, "OIDC_VERIFY_KID", True) and jwk.get("kid") != smart_str(
            header.get("kid")
        ):
            continue
        if "alg" in jwk and jwk["alg"] != smart_str(header.get("alg")):
            continue
        found = jwk
    return found


def _refused(reason: str) -> OnBehalfOfRefused:
    return OnBehalfOfRefused(f"{reason}; no plan was made")


def signing_key(token: str) -> jwt.PyJWK:
    """The published key the token says it is signed with, from the cache, or read
    again when it is stale or does not hold that key."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        raise _refused("the ID token is not valid") from None
    url = settings.OIDC_OP_JWKS_ENDPOINT
    with _keys_lock:
        cached = _keys.setdefault(url, _Keys(keys=[]))
        now = time.monotonic()
        found = _matching(cached.keys, header)
        stale = not cached.read_at or now - cached.read_at > JWKS_FRESH_SECONDS
        # At most one attempt every JWKS_REFETCH_SECONDS, whatever the tokens say (a
        # provider that is down is not waited for by every request either); meanwhile
        # the keys read last still count.
        may_try = not cached.tried_at or now - cached.tried_at > JWKS_REFETCH_SECONDS
        if (stale or found is None) and may_try:
            cached.tried_at = now
            try:
                cached.keys, cached.read_at = _read_jwks(url), now
            except (requests.RequestException, ValueError) as exc:
                why = str(exc) if type(exc) is ValueError else type(exc).__name__
                logger.warning("the identity provider's keys could not be read: %s", why)
            found = _matching(cached.keys, header)
        if not cached.read_at:
            raise OnBehalfOfRefused(
                "the identity provider's keys cannot be read now; no plan was made"
            )
    if found is None:
        raise _refused("the ID token is signed with a key the identity provider does not publish")
    try:
        return jwt.PyJWK(found)
    except jwt.PyJWKError:
        raise _refused("the ID token is signed with a key that cannot be used") from None


def forget_keys() -> None:
    with _keys_lock:
        _keys.clear()


# --- the token ----------------------------------------------------------------------------


def _text(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def requester_from_token(token: str) -> Requester:
    """The person an ID token names, once it passes the sign-in's checks; raises
    OnBehalfOfRefused with the reason otherwise."""
    if not settings.COUNTERSIGN_OIDC:
        raise OnBehalfOfRefused(
            f"{HEADER} needs single sign-on, which is not configured here; no plan was made"
        )
    token = token.strip()
    if not token or len(token) > MAX_TOKEN_CHARS or not token.isascii():
        raise _refused("the ID token is not valid")
    key = signing_key(token)
    try:
        payload = ReviewerOIDCBackend().get_payload_data(token, key)
        payload = id_token_claims_check(payload)
    except jwt.ExpiredSignatureError:
        raise _refused("the ID token has expired") from None
    except jwt.InvalidTokenError:
        raise _refused("the ID token is not valid") from None
    except SignInRefused as exc:
        raise _refused(str(exc)) from None
    except SuspiciousOperation as exc:
        raise _refused(_library_reason(str(exc))) from None
    # Every group as the claim names it, or a refusal: a group left out or cut short
    # could let a plan miss a decision rule or a policy that names it.
    groups = sorted(_groups(payload))
    if len(groups) > MAX_GROUPS:
        raise _refused(f"the ID token lists more than {MAX_GROUPS} groups")
    given, family = _text(payload.get("given_name"), 150), _text(payload.get("family_name"), 150)
    name = _text(payload.get("name"), 150) or " ".join(part for part in (given, family) if part)
    return Requester(
        issuer=payload["iss"],
        subject=payload["sub"],
        groups=tuple(groups),
        name=name or _text(payload.get("preferred_username"), 150),
        email=_text(payload.get("email"), 254),
    )


def requester_from_sources(*tokens: str | None) -> Requester | None:
    """The requester of a call that may carry the token in more than one place (the MCP
    ``_meta`` field and the HTTP header): None when none does; refused when two differ."""
    sent = {t.strip() for t in tokens if isinstance(t, str) and t.strip()}
    if not sent:
        if any(t is not None and not isinstance(t, str) for t in tokens):
            raise _refused("the ID token must be a string")
        return None
    if len(sent) > 1:
        raise _refused("two different ID tokens were sent")
    return requester_from_token(sent.pop())
