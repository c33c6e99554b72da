from __future__ import annotations

from django.contrib import admin

from .models import AuditEvent, Plan


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    """Read-only: plans change state only through services."""

    list_display = ["id", "action", "agent", "status", "consequence_class", "created_at"]
    list_filter = ["status", "consequence_class"]

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

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
