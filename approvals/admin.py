from __future__ import annotations

from django import forms
from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from actions.admin import ReadOnlyAdmin
from actions.lib.models import AuditEvent

from .identity.passkeys import passkey_revoke
from .models import NotificationTarget, OidcIdentity, Passkey, Plan, SessionGrant


@admin.register(Plan)
class PlanAdmin(ReadOnlyAdmin):
    """Read-only: plans change state only through services."""

    list_display = ["id", "action", "agent", "status", "consequence_class", "created_at"]
    list_filter = ["status", "consequence_class"]
    list_select_related = ["action", "agent"]
    search_fields = ["action__name", "agent__name", "fingerprint"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["id", "at", "kind", "actor", "plan"]
    list_filter = ["kind"]
    list_select_related = ["plan__action"]
    search_fields = ["kind", "actor", "fingerprint"]


@admin.register(SessionGrant)
class SessionGrantAdmin(ReadOnlyAdmin):
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


@admin.register(Passkey)
class PasskeyAdmin(admin.ModelAdmin):
    """Every reviewer's passkeys. Revoked, never deleted: the approvals a passkey signed
    stay verifiable (manage.py verify_signed_approvals), and it signs nothing more."""

    list_display = ["name", "user", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "user"]
    list_select_related = ["user"]
    search_fields = ["user__username", "name"]
    readonly_fields = [
        "user",
        "name",
        "credential_id",
        "sign_count",
        "transports",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    exclude = ["public_key"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=_("Revoke the selected passkeys"))
    def revoke(self, request, queryset):
        for passkey in queryset.filter(revoked_at__isnull=True):
            passkey_revoke(passkey_id=passkey.id, actor_user=request.user, by_admin=True)
        self.message_user(request, _("Revoked."))


@admin.register(OidcIdentity)
class OidcIdentityAdmin(admin.ModelAdmin):
    """Which identity-provider account each single-sign-on user is."""

    list_display = ["user", "subject", "issuer", "created_at", "last_login_at"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "created_at", "last_login_at"]

    def has_add_permission(self, request):
        return False
