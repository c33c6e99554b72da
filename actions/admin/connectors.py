"""Connectors in the admin: checked as the catalog file loader checks them."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from actions.lib.actors import user_actor
from actions.lib.audit import audit_record

from ..catalog import CatalogError, validate_catalog
from ..models import Connector


class ConnectorForm(forms.ModelForm):
    # A plain CharField: a URLField would quietly add a scheme the loader would refuse.
    base_url = forms.CharField(
        max_length=500,
        help_text="http:// or https://, a host and an optional path; no user, query or fragment.",
    )

    class Meta:
        model = Connector
        fields = ["name", "base_url", "connect_timeout", "read_timeout"]
        help_texts = {
            "connect_timeout": "Seconds, more than 0 and at most 30.",
            "read_timeout": "Seconds, more than 0 and at most 120.",
        }

    # Where the catalog schema's pointers land on this form.
    _FIELDS_BY_POINTER = {
        "": "name",
        "/base_url": "base_url",
        "/timeouts": "connect_timeout",
        "/timeouts/connect": "connect_timeout",
        "/timeouts/read": "read_timeout",
    }

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        name = self.instance.name if self.instance.pk else cleaned.get("name")
        needed = ("base_url", "connect_timeout", "read_timeout")
        if not name or any(cleaned.get(key) is None for key in needed):
            return cleaned  # the field errors already say what is missing
        entry = {
            "base_url": cleaned["base_url"].strip(),
            "timeouts": {"connect": cleaned["connect_timeout"], "read": cleaned["read_timeout"]},
        }
        # The loader's own check, so the admin accepts exactly what a catalog file may say.
        try:
            validate_catalog({"version": 1, "connectors": {name: entry}}, source="admin")
        except CatalogError as exc:
            prefix = f"/connectors/{name}"
            for problem in exc.problems:
                pointer = problem.pointer.removeprefix(prefix)
                if problem.pointer == "/connectors":
                    pointer = ""  # propertyNames: the name itself
                self.add_error(self._FIELDS_BY_POINTER.get(pointer), problem.message)
        cleaned["base_url"] = entry["base_url"].rstrip("/")
        return cleaned


@admin.register(Connector)
class ConnectorAdmin(admin.ModelAdmin):
    form = ConnectorForm
    list_display = ["name", "base_url", "connect_timeout", "read_timeout", "updated_at"]
    search_fields = ["name", "base_url"]

    def get_readonly_fields(self, request, obj=None):
        # Action definitions name their connector: renaming one would orphan them.
        return ["name", "created_at", "updated_at"] if obj else []

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        audit_record(
            kind="connector.changed" if change else "connector.created",
            actor=user_actor(request.user),
            data={
                "connector": obj.name,
                "base_url": obj.base_url,
                "connect_timeout": obj.connect_timeout,
                "read_timeout": obj.read_timeout,
                "fields": sorted(form.changed_data),
            },
        )
