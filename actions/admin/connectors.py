"""Connectors in the admin: checked as the catalog file loader checks them.

An MCP server's connector (kind ``mcp``) shows how its server is started or reached, read
only (it is the catalog file's to say: ``mcp:``), with its timeouts editable; its page can
start an import of the server's tools (a dry run first, then stored on a POST)."""

from __future__ import annotations

import json
import logging
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from actions.lib.actors import user_actor
from actions.lib.audit import audit_record

from ..catalog import CatalogError, validate_catalog
from ..mcp_import import McpImportError, import_mcp, render_report
from ..models import Connector

log = logging.getLogger(__name__)


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


class McpConnectorForm(forms.ModelForm):
    """An MCP server's connector: only the timeouts are edited here."""

    class Meta:
        model = Connector
        fields = ["connect_timeout", "read_timeout"]
        help_texts = ConnectorForm.Meta.help_texts

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for key, top in (("connect_timeout", 30), ("read_timeout", 120)):
            value = cleaned.get(key)
            if value is not None and not 0 < value <= top:
                self.add_error(key, f"more than 0 and at most {top} seconds")
        return cleaned


@admin.register(Connector)
class ConnectorAdmin(admin.ModelAdmin):
    form = ConnectorForm
    change_form_template = "admin/actions/connector/change_form.html"
    list_display = ["name", "kind", "base_url", "connect_timeout", "read_timeout", "updated_at"]
    list_filter = ["kind"]
    search_fields = ["name", "base_url"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is not None and obj.kind == Connector.Kind.MCP:
            kwargs["form"] = McpConnectorForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is not None and obj.kind == Connector.Kind.MCP:
            return ["name", "kind", "server_text", "base_url", "connect_timeout", "read_timeout"]
        return super().get_fields(request, obj)

    def get_readonly_fields(self, request, obj=None):
        # Action definitions name their connector: renaming one would orphan them.
        if obj is not None and obj.kind == Connector.Kind.MCP:
            return ["name", "kind", "server_text", "base_url", "created_at", "updated_at"]
        return ["name", "created_at", "updated_at"] if obj else []

    @admin.display(description="server")
    def server_text(self, obj: Connector) -> str:
        text = json.dumps(obj.server, ensure_ascii=True, sort_keys=True, indent=2)
        return format_html("<pre>{}</pre>", text)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, object_id)
        may_import = (
            obj is not None
            and obj.kind == Connector.Kind.MCP
            and request.user.has_perm("actions.add_action")
        )
        extra_context = {**(extra_context or {}), "may_import_mcp": may_import}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path(
                "<int:pk>/import-mcp/",
                self.admin_site.admin_view(self.import_mcp_view),
                name=f"{prefix}_import_mcp",
            ),
            *super().get_urls(),
        ]

    def import_mcp_view(self, request, pk: int):
        """GET: what an import would propose (nothing stored); POST: store it."""
        if not request.user.has_perm("actions.add_action"):
            raise PermissionDenied
        connector = get_object_or_404(Connector, pk=pk, kind=Connector.Kind.MCP)
        dry_run = request.method != "POST"
        report_text = problem = ""
        try:
            report = import_mcp(connector.name, actor=user_actor(request.user), dry_run=dry_run)
            report_text = render_report(report)
        except McpImportError as exc:
            problem = str(exc)
        except Exception as exc:  # noqa: BLE001 - a refusal on the page, never a 500
            log.exception("MCP import failed on an unexpected error")
            problem = f"the import failed ({type(exc).__name__}); nothing was stored"
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Import the tools of {connector.name}",
            "connector": connector,
            "report_text": report_text,
            "problem": problem,
            "dry_run": dry_run,
            "actions_url": reverse("admin:actions_action_changelist") + "?source__exact=mcp",
        }
        return TemplateResponse(request, "admin/actions/connector/import_mcp.html", context)

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
