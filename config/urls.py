from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from approvals.api import api

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="approvals:queue", permanent=False)),
    path("plans/", include("approvals.urls")),
    path("api/v1/", api.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]
