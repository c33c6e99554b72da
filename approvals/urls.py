from django.urls import path

from . import views, views_grants

app_name = "approvals"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("audit/", views.audit_log, name="audit"),
    path("dashboard/", views.dashboard, name="dashboard"),
    path("audit/export.<str:fmt>", views.audit_export, name="audit-export"),
    path("grants/", views_grants.grants, name="grants"),
    path("grants/new", views_grants.grant_create_view, name="grant-create"),
    path("grants/<uuid:grant_id>/revoke", views_grants.grant_revoke_view, name="grant-revoke"),
    path("<uuid:plan_id>/", views.plan_detail, name="plan-detail"),
    path("<uuid:plan_id>/decide", views.plan_decide, name="plan-decide"),
    path("<uuid:plan_id>/revoke", views.plan_revoke, name="plan-revoke"),
    path("<uuid:plan_id>/check", views.plan_check, name="plan-check"),
    path("<uuid:plan_id>/resolve", views.plan_resolve_view, name="plan-resolve"),
    path("<uuid:plan_id>/preview-again", views.plan_preview_again_view, name="plan-preview-again"),
    path("<uuid:plan_id>/edit", views.plan_edit_view, name="plan-edit"),
]
