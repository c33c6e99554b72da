from django.urls import path

from .views import audit, dashboard, grants, passkeys, plan, queue

app_name = "approvals"

urlpatterns = [
    path("", queue.queue, name="queue"),
    path("audit/", audit.audit_log, name="audit"),
    path("dashboard/", dashboard.dashboard, name="dashboard"),
    path("audit/export.<str:fmt>", audit.audit_export, name="audit-export"),
    path("grants/", grants.grants, name="grants"),
    path("grants/new", grants.grant_create_view, name="grant-create"),
    path("grants/<uuid:grant_id>/revoke", grants.grant_revoke_view, name="grant-revoke"),
    path("passkeys/", passkeys.passkeys, name="passkeys"),
    path("passkeys/options", passkeys.passkey_options, name="passkey-options"),
    path("passkeys/register", passkeys.passkey_register_view, name="passkey-register"),
    path("passkeys/<uuid:passkey_id>/revoke", passkeys.passkey_revoke_view, name="passkey-revoke"),
    path("<uuid:plan_id>/", plan.plan_detail, name="plan-detail"),
    path("<uuid:plan_id>/sign", passkeys.plan_sign_options, name="plan-sign"),
    path("<uuid:plan_id>/decide", plan.plan_decide, name="plan-decide"),
    path("<uuid:plan_id>/revoke", plan.plan_revoke, name="plan-revoke"),
    path("<uuid:plan_id>/check", plan.plan_check, name="plan-check"),
    path("<uuid:plan_id>/resolve", plan.plan_resolve_view, name="plan-resolve"),
    path("<uuid:plan_id>/preview-again", plan.plan_preview_again_view, name="plan-preview-again"),
    path("<uuid:plan_id>/edit", plan.plan_edit_view, name="plan-edit"),
]
