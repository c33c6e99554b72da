"""MCP tool pins in the admin: what a person confirmed of each tool of each MCP server,
what the server served when it last differed (DRIFTED), and the difference as a unified
diff. "Confirm this definition" pins what was served, for the plans that follow.

Every byte of a definition came from the server: it is shown escaped, in a <pre>, never
marked safe; the diff is of pretty-printed ASCII JSON, so control and bidi characters
show as escapes."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html

from actions.lib.actors import user_actor

from ..models import ToolPin
from ..toolpins import definition_diff, pin_confirm_seen
from .base import ReadOnlyAdmin


@admin.register(ToolPin)
class ToolPinAdmin(ReadOnlyAdmin):
    """Read only but for one button: confirming the served definition (POST, CSRF, the
    change_toolpin permission, audited)."""

    change_form_template = "admin/actions/toolpin/change_form.html"
    list_display = [
        "connector",
        "tool",
        "digest_short",
        "confirmed_by",
        "confirmed_at",
        "is_drifted",
    ]
    list_filter = ["connector"]
    list_select_related = ["connector"]
    search_fields = ["tool", "connector__name"]
    fields = [
        "connector",
        "tool",
        "digest",
        "confirmed_by",
        "confirmed_at",
        "seen_digest",
        "seen_at",
        "is_drifted",
        "difference",
    ]
    readonly_fields = fields

    @admin.display(description="digest")
    def digest_short(self, obj: ToolPin) -> str:
        return obj.digest[:12] if obj.digest else "not confirmed"

    @admin.display(description="drifted", boolean=True)
    def is_drifted(self, obj: ToolPin) -> bool:
        return obj.drifted

    @admin.display(description="confirmed -> served")
    def difference(self, obj: ToolPin) -> str:
        if not obj.seen_definition or obj.seen_digest == obj.digest:
            return "The server serves the confirmed definition."
        # format_html escapes the diff: upstream text is never marked safe.
        return format_html("<pre>{}</pre>", definition_diff(obj.definition, obj.seen_definition))

    def may_confirm(self, request) -> bool:
        return request.user.has_perm("actions.change_toolpin")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**(extra_context or {}), "may_confirm": self.may_confirm(request)}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path(
                "<int:pk>/confirm/",
                self.admin_site.admin_view(self.confirm_view),
                name=f"{prefix}_confirm",
            ),
            *super().get_urls(),
        ]

    def confirm_view(self, request, pk: int):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.may_confirm(request):
            raise PermissionDenied
        pin = get_object_or_404(ToolPin.objects.select_related("connector"), pk=pk)
        shown = request.POST.get("seen_digest", "")
        if pin_confirm_seen(pin, actor=user_actor(request.user), shown=shown):
            self.message_user(
                request,
                f"{pin.connector.name}: {pin.tool} confirmed as served; plans approved "
                "under the previous definition will be refused.",
                messages.SUCCESS,
            )
        elif shown != pin.seen_digest:
            self.message_user(
                request,
                "The server's definition changed since this page was shown: review the "
                "difference again. Nothing was confirmed.",
                messages.WARNING,
            )
        else:
            self.message_user(request, "Nothing new to confirm.", messages.WARNING)
        return HttpResponseRedirect(reverse("admin:actions_toolpin_change", args=[pin.pk]))
