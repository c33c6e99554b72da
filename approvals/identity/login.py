"""Sign-in throttling for reviewers and admins.

At most COUNTERSIGN_LOGIN_FAILURES failed sign-ins per (username, client address) per
COUNTERSIGN_LOGIN_WINDOW_SECONDS, counted in the cache (Redis in production, so every
web process shares the count). Keyed on both so an attacker cannot lock a reviewer out
from elsewhere, and one address cannot try many passwords for one account. A success
clears the count.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import HttpResponseNotAllowed
from django.utils.translation import gettext_lazy as _


def _client_ip(request) -> str:
    # REMOTE_ADDR only: X-Forwarded-For is client-controlled unless a proxy rewrites it.
    return (request.META.get("REMOTE_ADDR") or "unknown") if request is not None else "unknown"


def _key(request, username: str) -> str:
    raw = f"{(username or '').strip().lower()}\0{_client_ip(request)}"
    return "login-failures:" + hashlib.sha256(raw.encode()).hexdigest()


class ThrottledLoginMixin:
    error_messages = {
        **AuthenticationForm.error_messages,
        "throttled": _(
            "Too many failed sign-in attempts for this account from your address. "
            "Try again in %(minutes)d minutes."
        ),
    }

    def clean(self):
        username = self.data.get("username", "")
        key = _key(self.request, username)
        window = settings.COUNTERSIGN_LOGIN_WINDOW_SECONDS
        if (cache.get(key) or 0) >= settings.COUNTERSIGN_LOGIN_FAILURES:
            raise ValidationError(
                self.error_messages["throttled"],
                code="throttled",
                params={"minutes": max(1, window // 60)},
            )
        try:
            cleaned = super().clean()
        except ValidationError:
            if not cache.add(key, 1, timeout=window):
                try:
                    cache.incr(key)
                except ValueError:  # expired meanwhile
                    cache.add(key, 1, timeout=window)
            raise
        cache.delete(key)
        return cleaned


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass


class LoginView(auth_views.LoginView):
    """The sign-in page: the identity provider's button when single sign-on is set up,
    the password form while local passwords are enabled (COUNTERSIGN_LOCAL_LOGIN)."""

    authentication_form = ThrottledAuthenticationForm

    def get_context_data(self, **kwargs):
        return {
            **super().get_context_data(**kwargs),
            "local_login": settings.COUNTERSIGN_LOCAL_LOGIN,
            "sso": settings.COUNTERSIGN_OIDC,
            "sso_name": settings.COUNTERSIGN_OIDC_NAME,
        }

    def post(self, request, *args, **kwargs):
        if not settings.COUNTERSIGN_LOCAL_LOGIN:
            # No password is checked at all (ModelBackend is not installed either).
            return HttpResponseNotAllowed(["GET"])
        return super().post(request, *args, **kwargs)
