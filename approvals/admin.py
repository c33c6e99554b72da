from __future__ import annotations

from django import forms
from django.contrib import admin

from actions.lib.models import AuditEvent

from .models import NotificationTarget, Plan, SessionGrant


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    """Read-only: plans change state only through services."""

    list_display = ["id", "action", "agent", "status", "consequence_class", "created_at"]
    list_filter = ["status", "consequence_class"]
    list_select_related = ["action", "agent"]
    search_fields = ["action__name", "agent__name", "fingerprint"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["id", "at", "kind", "actor", "plan"]
    list_filter = ["kind"]
    list_select_related = ["plan__action"]
    search_fields = ["kind", "actor", "fingerprint"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(SessionGrant)
class SessionGrantAdmin(admin.ModelAdmin):
    """Read-only: grants are made and revoked on the reviewers' grants page, where the
    eligibility, duration and audit rules live (approvals.grants)."""

    list_display = ["id", "agent", "created_by", "created_at", "expires_at", "revoked_at"]
    list_filter = ["revoked_at"]
    list_select_related = ["agent", "created_by"]
    search_fields = ["agent__name", "created_by__username", "reason"]
    readonly_fields = [
        "id",
        "agent",
        "actions",
        "fixed_values",
        "max_executions",
        "reason",
        "created_by",
        "created_at",
        "expires_at",
        "revoked_at",
        "revoked_by",
    ]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class NotificationTargetForm(forms.ModelForm):
    """The webhook secret is write-only: never shown again, kept when left empty."""

    secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Webhook signing key (HMAC-SHA256). Leave empty to keep the current one.",
    )

    class Meta:
        model = NotificationTarget
        fields = ["group", "kind", "address", "secret", "enabled"]

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if kind == NotificationTarget.Kind.WEBHOOK:
            if not data.get("address"):
                self.add_error("address", "A webhook needs an http(s) URL.")
            if not data.get("secret") and not (self.instance.pk and self.instance.secret):
                self.add_error("secret", "A webhook needs a signing secret.")
        return data

    def save(self, commit=True):
        if not self.cleaned_data.get("secret") and self.instance.pk:
            self.instance.secret = NotificationTarget.objects.get(pk=self.instance.pk).secret
        return super().save(commit=commit)


@admin.register(NotificationTarget)
class NotificationTargetAdmin(admin.ModelAdmin):
    form = NotificationTargetForm
    list_display = ["group", "kind", "address", "enabled", "created_at"]
    list_filter = ["kind", "enabled"]
    list_select_related = ["group"]
