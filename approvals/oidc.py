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
* every refusal (a tampered ``state``, a wrong nonce, an expired or foreign token, an
  unreachable provider) is a page saying so, never a 500, and is audited.
"""

from __future__ import annotations

import hashlib
import logging
import time
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

from .models import OidcIdentity
from .services import reviewers_group_ensure

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


class ReviewerOIDCBackend(OIDCAuthenticationBackend):
    def verify_token(self, token, **kwargs):
        try:
            payload = super().verify_token(token, **kwargs)
        except jwt.ExpiredSignatureError:
            raise SignInRefused("the ID token has expired") from None
        except jwt.InvalidTokenError:
            raise SignInRefused("the ID token is not valid") from None
        except SuspiciousOperation as exc:
            raise SignInRefused(_library_reason(str(exc))) from None
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
        if not isinstance(payload.get("sub"), str) or not payload["sub"]:
            raise SignInRefused("the ID token names nobody")
        return payload

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
            OidcIdentity.objects.filter(pk=identity.pk).update(last_login_at=timezone.now())
            audit_record(
                kind="reviewer.signed_in_sso",
                actor=f"user:{user.get_username()}",
                data={
                    "issuer": issuer,
                    "created": created,
                    "reviewer": reviewer,
                    "reviewer_changed": reviewer != was,
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


class CallbackView(OIDCAuthenticationCallbackView):
    """The provider sends the browser back here with a code and the state."""

    def get(self, request):
        try:
            return super().get(request)
        except SignInRefused as exc:
            return _refused(request, str(exc))
        except SuspiciousOperation as exc:
            return _refused(request, _library_reason(str(exc)))

    def login_failure(self):
        reason = getattr(self.request, "countersign_refusal", "the sign-in did not complete")
        if self.request.GET.get("error"):
            reason = "the identity provider refused the sign-in"
        elif "oidc_states" not in self.request.session:
            reason = "this sign-in was not started here, or it was already used"
        return _refused(self.request, reason)


def _refused(request: HttpRequest, reason: str) -> HttpResponse:
    logger.warning("single sign-on refused: %s", reason)
    # Every sign-in this browser had under way ends here: a callback that failed once
    # (a state that was tampered with, say) cannot be replayed with the real state.
    request.session.pop("oidc_states", None)
    with transaction.atomic():
        audit_record(
            kind="reviewer.sign_in_refused",
            actor=SYSTEM,
            data={"reason": reason[:200], "address": request.META.get("REMOTE_ADDR", "")},
        )
    return render(
        request,
        "registration/sign_in_refused.html",
        {"reason": reason, "title": REFUSED_TITLE},
        status=400,
    )


def start(request: HttpRequest) -> HttpResponse:
    """To the provider, with a fresh state, nonce and PKCE challenge."""
    if not settings.COUNTERSIGN_OIDC:
        raise Http404("single sign-on is not configured")
    return OIDCAuthenticationRequestView.as_view()(request)


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
