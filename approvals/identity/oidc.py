"""Single sign-on with OpenID Connect: the authorization code flow with PKCE, on
mozilla-django-oidc (one backend and two views; it keeps state, nonce and the PKCE
verifier in the session and checks the ID token's signature against the provider's JWKS).

What this module adds, because a reviewer's identity decides who may approve:

* the ID token must name our issuer (``iss``), be meant for us (``aud`` contains our
  client id; with several audiences, ``azp`` is us), carry ``exp`` and ``iat`` and not
  be expired; the library checks only the signature, the nonce and (through PyJWT) an
  ``exp`` that is present;
* the person is the (issuer, subject) pair (``OidcIdentity``), never an e-mail address;
  the userinfo answer must be about the same subject;
* a user made at first sign-in has no permission; membership of the reviewers group
  follows the groups claim at every sign-in (so removing someone at the provider takes
  effect at their next sign-in, and their session ends within SESSION_COOKIE_AGE);
* the scopes asked for: ``groups`` only when the provider's discovery document lists it
  in ``scopes_supported`` (a provider that offers no such scope refuses the whole sign-in
  with ``invalid_scope``), unless COUNTERSIGN_OIDC_SCOPES says exactly what to ask for;
  the groups claim is read from the ID token or the userinfo answer either way;
* every refusal (a tampered ``state``, a wrong nonce, an expired or foreign token, an
  unreachable provider, an ``error`` from the provider) is a page saying so, never a 500,
  and is audited; a provider's ``error`` and ``error_description`` go into one log line
  and the audit event, and staff see the latest on the dashboard.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from dataclasses import dataclass
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import logout as auth_logout
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop
from django.views.decorators.http import require_POST
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from actions.lib.actors import SYSTEM
from actions.lib.audit import audit_record
from actions.lib.exceptions import CountersignError

from ..decisions.requirements import decision_groups_sync
from ..models import OidcIdentity
from ..services import reviewers_group_ensure
from .permissions import OneQueryPermissions
from .provider import provider_json

logger = logging.getLogger(__name__)

# Seconds of clock difference tolerated between us and the provider.
LEEWAY = 60


class SignInRefused(SuspiciousOperation):
    """An answer from the provider (or the browser) that must not sign anyone in."""


def _groups(claims: dict) -> set[str]:
    value = claims.get(settings.COUNTERSIGN_OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {v for v in value if isinstance(v, str)}
    return set()


# Every reason a refusal page may give, in the catalog (the page shows it translated).
REASONS = [
    gettext_noop("the ID token has expired"),
    gettext_noop("the ID token is not valid"),
    gettext_noop("the ID token was issued by another issuer"),
    gettext_noop("the ID token is meant for another client"),
    gettext_noop("the ID token has no expiry or issue time"),
    gettext_noop("the ID token was issued in the future"),
    gettext_noop("the ID token names nobody"),
    gettext_noop("the ID token's nonce does not match this sign-in"),
    gettext_noop("the ID token is signed with a key the identity provider does not publish"),
    gettext_noop("the ID token is signed with another algorithm"),
    gettext_noop("the ID token's signature is not valid"),
    gettext_noop("the identity provider did not issue a token"),
    gettext_noop("the identity provider's userinfo endpoint failed"),
    gettext_noop("the userinfo answer is about someone else"),
    gettext_noop("the sign-in did not complete"),
    gettext_noop("the identity provider refused the sign-in"),
    gettext_noop("this sign-in was not started here, or it was already used"),
    gettext_noop("the sign-in's state does not match the one this browser was given"),
    gettext_noop("the reviewers group cannot be used"),
]

# What the person signing in can do about an ``error`` from the provider (RFC 6749
# 4.1.2.1, OpenID Connect Core 3.1.2.6); any other error is a setting to fix.
PROVIDER_HINTS = {
    "access_denied": gettext_noop(
        "The identity provider did not let you in, or the sign-in was cancelled there. "
        "Try again; if it happens again, ask your administrator whether your account "
        "may use Countersign."
    ),
    "server_error": gettext_noop(
        "The identity provider is having trouble. Try again in a few minutes."
    ),
    "login_required": gettext_noop(
        "The identity provider needs you to sign in there first. Try again."
    ),
}
PROVIDER_HINTS["temporarily_unavailable"] = PROVIDER_HINTS["server_error"]
for _code in ("interaction_required", "consent_required", "account_selection_required"):
    PROVIDER_HINTS[_code] = PROVIDER_HINTS["login_required"]
SETTINGS_HINT = gettext_noop(
    "Countersign's single sign-on settings do not match what the identity provider "
    "accepts. Ask your administrator to fix them, telling them the error below; the "
    "provider's explanation is in Countersign's log and audit trail."
)
# What is kept of ``error`` (codes are words with underscores) and ``error_description``
# (the characters RFC 6749 allows in it: printable ASCII without " and \); anything else
# is dropped, so neither can break a log line or its quotes.
_NOT_ERROR_CODE = re.compile(r"[^A-Za-z0-9_.-]")
_NOT_ERROR_TEXT = re.compile(r"[^\x20-\x21\x23-\x5b\x5d-\x7e]")


def _provider_text(value: str | None, limit: int, *, code: bool = False) -> str:
    """An error field as the browser brought it (the provider's words, or anyone's who
    typed the URL), reduced to what it may hold, and at most ``limit`` characters."""
    pattern = _NOT_ERROR_CODE if code else _NOT_ERROR_TEXT
    return pattern.sub("", value or "")[:limit].strip()


# --- the scopes asked for ------------------------------------------------------------------

BASE_SCOPES = "openid email profile"
GROUPS_SCOPE = "groups"
DISCOVERY_PATH = "/.well-known/openid-configuration"
DISCOVERY_MAX_BYTES = 512 * 1024
# A document read is trusted this long; one that could not be read is tried again after
# DISCOVERY_RETRY_SECONDS (so a provider that is down does not hold up every sign-in for
# the whole timeout), and meanwhile the last one read, if any, still counts.
DISCOVERY_FRESH_SECONDS = 3600.0
DISCOVERY_RETRY_SECONDS = 60.0


@dataclass(frozen=True)
class _Listed:
    scopes: frozenset[str] | None  # None: not known (never read, or no scopes_supported)
    until: float  # time.monotonic() when it is read again


# Per process, by discovery URL: one small read an hour per web process needs no shared
# cache, and keeps a Redis outage out of the way of signing in.
_discovered: dict[str, _Listed] = {}


def discovery_url() -> str:
    return settings.COUNTERSIGN_OIDC_ISSUER.rstrip("/") + DISCOVERY_PATH


def supported_scopes() -> frozenset[str] | None:
    """The ``scopes_supported`` of the provider's discovery document; None when it is not
    known (the document cannot be read, or lists no scopes)."""
    url = discovery_url()
    listed = _discovered.get(url)
    now = time.monotonic()
    if listed is not None and now < listed.until:
        return listed.scopes
    read, scopes = _read_scopes(url)
    if read:
        listed = _Listed(scopes=scopes, until=now + DISCOVERY_FRESH_SECONDS)
    else:
        listed = _Listed(
            scopes=listed.scopes if listed else None, until=now + DISCOVERY_RETRY_SECONDS
        )
    _discovered[url] = listed
    return listed.scopes


def forget_supported_scopes() -> None:
    """Read the discovery document again at the next sign-in (the provider just refused
    a scope: its list may have changed)."""
    _discovered.pop(discovery_url(), None)


def _read_scopes(url: str) -> tuple[bool, frozenset[str] | None]:
    """(whether the document was read, its scopes_supported): one GET with the timeouts
    and TLS settings of every other call to the provider, no redirect, at most
    DISCOVERY_MAX_BYTES; a body still arriving after twice OIDC_TIMEOUT is given up (each
    read waits at most OIDC_TIMEOUT, so three times it at the very most)."""
    try:
        document = provider_json(url, max_bytes=DISCOVERY_MAX_BYTES)
    except (requests.RequestException, ValueError) as exc:
        # The error's text may quote the answer: its type or our own words only.
        why = str(exc) if type(exc) is ValueError else type(exc).__name__
        logger.warning("the identity provider's discovery document could not be read: %s", why)
        return False, None
    listed = document.get("scopes_supported") if isinstance(document, dict) else None
    if not isinstance(listed, list) or not all(isinstance(s, str) for s in listed):
        return True, None
    return True, frozenset(listed)


def requested_scopes() -> str:
    """COUNTERSIGN_OIDC_SCOPES exactly, when set. Otherwise openid, email and profile, and
    groups unless the provider's discovery document lists scopes without it.

    When the list is not known, groups is asked for: a provider that refuses it says so
    (invalid_scope, on the refusal page and in the log), whereas leaving it out where it
    is needed would sign reviewers in without their groups, and so without the review
    permission, silently."""
    if settings.COUNTERSIGN_OIDC_SCOPES:
        return settings.COUNTERSIGN_OIDC_SCOPES
    listed = supported_scopes()
    if listed is not None and GROUPS_SCOPE not in listed:
        return BASE_SCOPES
    return f"{BASE_SCOPES} {GROUPS_SCOPE}"


def _library_reason(message: str) -> str:
    """mozilla-django-oidc's refusals, in this module's words."""
    if "Nonce" in message:
        return "the ID token's nonce does not match this sign-in"
    if "JWKS" in message:
        return "the ID token is signed with a key the identity provider does not publish"
    if "algorithm" in message:
        return "the ID token is signed with another algorithm"
    if "state not found" in message:
        return "the sign-in's state does not match the one this browser was given"
    return "the ID token's signature is not valid"


def id_token_claims_check(payload: dict) -> dict:
    """The claim checks an ID token passes after its signature: our issuer, meant for
    our client, an expiry and issue time within LEEWAY, a subject. Raises SignInRefused
    with the reason; the sign-in and the on-behalf-of token (approvals/identity/requester.py)
    both use it."""
    now = time.time()
    client_id = settings.OIDC_RP_CLIENT_ID
    if payload.get("iss") != settings.COUNTERSIGN_OIDC_ISSUER:
        raise SignInRefused("the ID token was issued by another issuer")
    audience = payload.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience
    if not isinstance(audiences, list) or client_id not in audiences:
        raise SignInRefused("the ID token is meant for another client")
    if len(audiences) > 1 and payload.get("azp") != client_id:
        raise SignInRefused("the ID token is meant for another client")
    exp, iat = payload.get("exp"), payload.get("iat")
    if not isinstance(exp, int | float) or not isinstance(iat, int | float):
        raise SignInRefused("the ID token has no expiry or issue time")
    if exp < now - LEEWAY:
        raise SignInRefused("the ID token has expired")
    if iat > now + LEEWAY:
        raise SignInRefused("the ID token was issued in the future")
    # OpenID Connect Core: a subject is at most 255 ASCII characters (and the identity's
    # column holds no more); one cut short could name somebody else.
    subject = payload.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > 255:
        raise SignInRefused("the ID token names nobody")
    return payload


class ReviewerOIDCBackend(OneQueryPermissions, OIDCAuthenticationBackend):
    def verify_token(self, token, **kwargs):
        try:
            payload = super().verify_token(token, **kwargs)
        except jwt.ExpiredSignatureError:
            raise SignInRefused("the ID token has expired") from None
        except jwt.InvalidTokenError:
            raise SignInRefused("the ID token is not valid") from None
        except SuspiciousOperation as exc:
            raise SignInRefused(_library_reason(str(exc))) from None
        return id_token_claims_check(payload)

    def get_token(self, payload):
        try:
            return super().get_token(payload)
        except requests.RequestException as exc:
            # The error's text may quote the provider's answer; it stays in the log only.
            logger.warning("token request to the identity provider failed: %s", type(exc).__name__)
            raise SignInRefused("the identity provider did not issue a token") from None

    def get_userinfo(self, access_token, id_token, payload):
        try:
            claims = super().get_userinfo(access_token, id_token, payload)
        except requests.RequestException:
            raise SignInRefused("the identity provider's userinfo endpoint failed") from None
        if not isinstance(claims, dict) or claims.get("sub") != payload["sub"]:
            raise SignInRefused("the userinfo answer is about someone else")
        # The ID token's claims first, the userinfo answer's on top (the provider may
        # put the groups in either).
        return {**payload, **claims}

    def get_or_create_user(self, access_token, id_token, payload):
        # mozilla-django-oidc turns a refusal from here into "no user": the reason is
        # kept on the request for the page.
        try:
            return self._user_for(access_token, id_token, payload)
        except SignInRefused as exc:
            self.request.countersign_refusal = str(exc)
            raise

    def _user_for(self, access_token, id_token, payload):
        claims = self.get_userinfo(access_token, id_token, payload)
        issuer, subject = payload["iss"], payload["sub"]
        reviewer = bool(_groups(claims) & set(settings.COUNTERSIGN_OIDC_REVIEWER_GROUPS))
        with transaction.atomic():
            identity = (
                OidcIdentity.objects.select_for_update()
                .select_related("user")
                .filter(issuer=issuer, subject=subject)
                .first()
            )
            created = identity is None
            if created:
                user = _new_user(claims, issuer, subject)
                identity = OidcIdentity.objects.create(user=user, issuer=issuer, subject=subject)
            user = identity.user
            if not user.is_active:
                return None
            try:
                group, _made = reviewers_group_ensure()
            except CountersignError:
                raise SignInRefused("the reviewers group cannot be used") from None
            was = user.groups.filter(pk=group.pk).exists()
            if reviewer and not was:
                user.groups.add(group)
            elif was and not reviewer:
                user.groups.remove(group)
            # The decision rules' groups follow the claim too (approvals/decisions).
            decision_groups = decision_groups_sync(user, _groups(claims))
            OidcIdentity.objects.filter(pk=identity.pk).update(last_login_at=timezone.now())
            audit_record(
                kind="reviewer.signed_in_sso",
                actor=f"user:{user.get_username()}",
                data={
                    "issuer": issuer,
                    "created": created,
                    "reviewer": reviewer,
                    "reviewer_changed": reviewer != was,
                    "decision_groups": decision_groups,
                },
            )
        return user


def _new_user(claims: dict, issuer: str, subject: str):
    """A user with no permission: the groups claim, checked just after, decides."""
    users = get_user_model()._default_manager
    field = users.model.USERNAME_FIELD
    wanted = str(claims.get("preferred_username") or claims.get("email") or "")[:100]
    # A name a local account already has stays that account's: the provider's person
    # gets a name derived from who they are at the provider instead.
    suffix = hashlib.sha256(f"{issuer}\0{subject}".encode()).hexdigest()[:10]
    username = wanted if wanted and not users.filter(**{field: wanted}).exists() else ""
    if not username:
        username = f"{wanted or 'sso'}-{suffix}"
    user = users.model(**{field: username}, email=users.normalize_email(claims.get("email") or ""))
    user.first_name = str(claims.get("given_name") or "")[:150]
    user.last_name = str(claims.get("family_name") or "")[:150]
    user.set_unusable_password()
    user.save()
    return user


# --- the callback, and what a refusal looks like ------------------------------------------

REFUSED_TITLE = _("Sign-in refused")


class StartView(OIDCAuthenticationRequestView):
    """To the provider, with a fresh state, nonce and PKCE challenge, asking for the
    scopes it offers (``requested_scopes``)."""

    def get_extra_params(self, request):
        return {**super().get_extra_params(request), "scope": requested_scopes()}


class CallbackView(OIDCAuthenticationCallbackView):
    """The provider sends the browser back here with a code and the state (or an error
    and the state)."""

    def get(self, request):
        # Whether this browser started the sign-in the answer is about; the library
        # forgets the state before login_failure runs.
        request.countersign_state_known = request.GET.get("state", "") in request.session.get(
            "oidc_states", {}
        )
        try:
            return super().get(request)
        except SignInRefused as exc:
            return _refused(request, str(exc))
        except SuspiciousOperation as exc:
            return _refused(request, _library_reason(str(exc)))

    def login_failure(self):
        request = self.request
        reason = getattr(request, "countersign_refusal", "the sign-in did not complete")
        if "error" in request.GET:
            error = _provider_text(request.GET.get("error"), 64, code=True)
            described = _provider_text(request.GET.get("error_description"), 300)
            if request.countersign_state_known:
                if error == "invalid_scope":
                    forget_supported_scopes()
                return _refused(
                    request,
                    "the identity provider refused the sign-in",
                    error=error or "unknown",
                    description=described,
                )
            # An error about a sign-in this browser did not start (or already ended):
            # logged, but not shown as the provider's.
            return _refused(
                request,
                "this sign-in was not started here, or it was already used",
                error=error or "unknown",
                description=described,
                shown=False,
            )
        if "oidc_states" not in request.session:
            reason = "this sign-in was not started here, or it was already used"
        return _refused(request, reason)


def _refused(
    request: HttpRequest,
    reason: str,
    *,
    error: str = "",
    description: str = "",
    shown: bool = True,
) -> HttpResponse:
    """The refusal page (400), one log line and one audit event. ``error`` and
    ``description``: the provider's ``error`` and ``error_description``, already reduced
    to what RFC 6749 allows; ``shown``: whether the page presents them as the provider's."""
    data = {"reason": reason[:200], "address": request.META.get("REMOTE_ADDR", "")}
    if error:
        data |= {"provider_error": error, "provider_error_description": description}
        logger.warning(
            'single sign-on refused: %s (provider error=%s error_description="%s")',
            reason,
            error,
            description,
        )
    else:
        logger.warning("single sign-on refused: %s", reason)
    # Every sign-in this browser had under way ends here: a callback that failed once
    # (a state that was tampered with, say) cannot be replayed with the real state.
    request.session.pop("oidc_states", None)
    with transaction.atomic():
        audit_record(kind="reviewer.sign_in_refused", actor=SYSTEM, data=data)
    provider_error = error if shown else ""
    return render(
        request,
        "registration/sign_in_refused.html",
        {
            "reason": reason,
            "title": REFUSED_TITLE,
            "provider_error": provider_error,
            "hint": PROVIDER_HINTS.get(provider_error, SETTINGS_HINT) if provider_error else "",
        },
        status=400,
    )


def start(request: HttpRequest) -> HttpResponse:
    """To the provider, with a fresh state, nonce and PKCE challenge."""
    if not settings.COUNTERSIGN_OIDC:
        raise Http404("single sign-on is not configured")
    return StartView.as_view()(request)


def callback(request: HttpRequest) -> HttpResponse:
    if not settings.COUNTERSIGN_OIDC:
        raise Http404("single sign-on is not configured")
    return CallbackView.as_view()(request)


# --- signing out ---------------------------------------------------------------------------


def provider_logout_url(request: HttpRequest) -> str:
    """Where signing out sends the browser: the provider's end-session endpoint, when it
    has one and this session came from it, so the provider's session ends too."""
    back = request.build_absolute_uri(resolve_url(settings.LOGOUT_REDIRECT_URL))
    id_token = request.session.get("oidc_id_token")
    endpoint = settings.COUNTERSIGN_OIDC_END_SESSION_ENDPOINT
    if not (endpoint and id_token):
        return back
    query = urlencode(
        {
            "id_token_hint": id_token,
            "post_logout_redirect_uri": back,
            "client_id": settings.OIDC_RP_CLIENT_ID,
        }
    )
    return f"{endpoint}?{query}"


@require_POST
def logout(request: HttpRequest) -> HttpResponse:
    """Ends the local session, then the provider's when there is one to end."""
    url = provider_logout_url(request) if settings.COUNTERSIGN_OIDC else ""
    auth_logout(request)
    return HttpResponseRedirect(url or reverse(settings.LOGOUT_REDIRECT_URL))
