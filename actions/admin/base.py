"""What every admin area of the catalog shares."""

from __future__ import annotations

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """A table the admin shows and never changes: its rows are written by a service
    (a catalog load, a plan's transitions, a grant), so that every change is recorded."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
