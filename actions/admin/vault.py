"""Credentials and the vault lock in the admin: a secret is sealed as it is entered and
never shown again; revoking and locking are audited."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils import timezone

from actions.lib.actors import user_actor
from actions.lib.audit import audit_record

from ..models import Credential, VaultState
from ..services import credentials_revoke, vault_set_locked


@admin.register(Credential)
class CredentialAdmin(admin.ModelAdmin):
    """Shows that a secret is set, when and by whom; never the secret itself."""

    list_display = [
        "connector",
        "role",
        "scheme",
        "secret",
        "status",
        "created_at",
        "created_by",
        "expires_at",
        "revoked_at",
    ]
    list_filter = ["role", "connector"]
    exclude = ["ciphertext"]
    actions = ["revoke"]

    def get_readonly_fields(self, request, obj=None):
        fields = ["connector", "role", "scheme", "header_name", "secret", "created_at"]
        # OAuth2 configuration is not secret, but changing it would send the client
        # secret elsewhere: it is fixed when the credential is stored (set_credential).
        fields += ["token_url", "scope", "audience", "client_auth"]
        fields.append("created_by")
        if obj is not None and obj.revoked_at is not None:
            # Revocation is final: a new secret is stored with set_credential instead.
            fields.append("revoked_at")
        return fields

    @admin.display(description="secret")
    def secret(self, obj: Credential) -> str:
        if obj.role == Credential.Role.WRITE:
            return "set (sealed to the worker's key; this process cannot open it)"
        return "set (encrypted)"

    @admin.display(description="status")
    def status(self, obj: Credential) -> str:
        if obj.revoked_at is not None:
            return "revoked"
        if obj.expires_at is not None and obj.expires_at <= timezone.now():
            return "expired"
        return "live"

    def has_add_permission(self, request):
        # Secrets are entered through `manage.py set_credential`, which reads them from
        # standard input and seals write secrets to the worker's key.
        return False

    def has_delete_permission(self, request, obj=None):
        # Revoke instead: the row is what the audit trail and attempts refer to.
        return False

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        audit_record(
            kind="credential.changed",
            actor=user_actor(request.user),
            data={
                "connector": obj.connector.name,
                "role": obj.role,
                "credential": str(obj.id),
                "expires_at": obj.expires_at.isoformat() if obj.expires_at else None,
                "revoked_at": obj.revoked_at.isoformat() if obj.revoked_at else None,
            },
        )

    @admin.action(description="Revoke selected credentials", permissions=["change"])
    def revoke(self, request, queryset):
        count = credentials_revoke(credentials=queryset, actor=user_actor(request.user))
        self.message_user(request, f"{count} credential(s) revoked.", messages.SUCCESS)


@admin.register(VaultState)
class VaultStateAdmin(admin.ModelAdmin):
    """The vault lock switch. While locked the executor refuses every execution."""

    list_display = ["__str__", "locked", "changed_at", "changed_by", "reason"]
    fields = ["locked", "changed_at", "changed_by", "reason"]
    readonly_fields = fields
    actions = ["lock_vault", "unlock_vault"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def changelist_view(self, request, extra_context=None):
        # The singleton row exists from the first visit, so the actions have a target;
        # made only for someone who may see it (the others get the admin's 403).
        if self.has_view_or_change_permission(request):
            VaultState.objects.get_or_create(id=VaultState.SINGLETON_ID)
        return super().changelist_view(request, extra_context)

    @admin.action(description="Lock the vault (refuse every execution)", permissions=["change"])
    def lock_vault(self, request, queryset):
        vault_set_locked(locked=True, actor=user_actor(request.user), reason="admin")
        self.message_user(request, "The vault is locked: executions are refused.", messages.WARNING)

    @admin.action(description="Unlock the vault", permissions=["change"])
    def unlock_vault(self, request, queryset):
        vault_set_locked(locked=False, actor=user_actor(request.user), reason="admin")
        self.message_user(request, "The vault is unlocked.", messages.SUCCESS)
