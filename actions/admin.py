from __future__ import annotations

from django.contrib import admin

from .models import Action, Agent, Connector, Credential


@admin.register(Connector)
class ConnectorAdmin(admin.ModelAdmin):
    list_display = ["name", "base_url", "connect_timeout", "read_timeout"]


@admin.register(Credential)
class CredentialAdmin(admin.ModelAdmin):
    """Shows that a secret is set, when and by whom; never the secret itself."""

    list_display = [
        "connector",
        "role",
        "scheme",
        "created_at",
        "created_by",
        "expires_at",
        "revoked_at",
    ]
    list_filter = ["role", "connector"]
    exclude = ["ciphertext"]
    readonly_fields = ["connector", "role", "scheme", "header_name", "created_at", "created_by"]

    def has_add_permission(self, request):
        # Secrets are entered through `manage.py set_credential`, which reads them from
        # standard input and seals write secrets to the worker's key.
        return False


@admin.register(Action)
class ActionAdmin(admin.ModelAdmin):
    list_display = ["name", "title", "kind", "consequence_class", "version", "enabled"]
    list_filter = ["consequence_class", "kind", "enabled"]
    readonly_fields = ["definition", "version", "digest"]


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "token_prefix", "is_active", "created_at", "last_used_at"]
    exclude = ["token_hash"]
    readonly_fields = ["token_prefix", "created_at", "last_used_at"]
    filter_horizontal = ["actions"]
