from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from approvals.api.endpoints import api
from approvals.identity import oidc
from approvals.identity.login import LoginView, ThrottledAdminAuthenticationForm
from approvals.ops import views as ops

# The admin's sign-in is throttled like the reviewers' (approvals/identity/login.py).
admin.site.login_form = ThrottledAdminAuthenticationForm

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="approvals:queue", permanent=False)),
    # Browsers ask for /favicon.ico whatever the page's <link rel="icon"> says.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    # Probes and scrapers (docs/deployment.md): no sign-in.
    path("healthz", ops.healthz, name="healthz"),
    path("readyz", ops.readyz, name="readyz"),
    path("metrics", ops.metrics, name="metrics"),
    path("plans/", include("approvals.urls")),
    path("api/v1/", api.urls),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", oidc.logout, name="logout"),
    # Single sign-on (approvals/identity/oidc.py); 404 while it is not configured.
    path("accounts/oidc/start/", oidc.start, name="oidc-start"),
    path("accounts/oidc/callback/", oidc.callback, name="oidc-callback"),
    # set_language: the switcher in base.html posts here (a plain form, no JavaScript).
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
]

# Who is signed in and what they lack, with a way to sign out (approvals/views/errors.py);
# 404 is Django's own view with templates/404.html.
handler403 = "approvals.views.errors.permission_denied"
# A database outage is the 503 page (templates/503.html), anything else Django's own 500
# view with templates/500.html (approvals/views/unavailable.py).
handler500 = "approvals.views.unavailable.server_error"
