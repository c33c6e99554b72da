from __future__ import annotations

from django.contrib import admin

from .models import AuditEvent, Plan


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
