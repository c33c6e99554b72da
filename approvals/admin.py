from __future__ import annotations

import uuid
from pathlib import PurePath

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from actions.admin import ReadOnlyAdmin
from actions.lib.models import AuditEvent
from actions.policy.drafts import DraftRefused
from actions.policy.sources import MAX_TEXT_CHARS

from .decisions.backtest import BacktestRefused, backtest_window, policy_backtest_request
from .identity.passkeys import passkey_revoke
from .models import (
    NotificationTarget,
    OidcIdentity,
    Passkey,
    Plan,
    PolicyBacktest,
    SessionGrant,
)

# The admin's own names, not Django's ("Django administration").
admin.site.site_header = _("Countersign administration")
admin.site.site_title = _("Countersign admin")


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


# --- policy backtests ----------------------------------------------------------------


def _may_backtest(user) -> bool:
    """Staff with the permission (superusers have every permission)."""
    return bool(user.is_active and user.is_staff and user.has_perm("approvals.run_policy_backtest"))


class PolicyBacktestForm(forms.Form):
    draft = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 18, "cols": 100, "spellcheck": "false"}),
        help_text="Cedar: the policies to try, as the enforce part of a policy set.",
    )
    file = forms.FileField(required=False, help_text="Or a .cedar file (instead of the text).")
    since = forms.CharField(
        initial="30d",
        max_length=40,
        help_text="From when: 7d, 12h, 90m, 2w before now, a date (2026-11-01) or a date and "
        "time with its offset.",
    )
    until = forms.CharField(
        required=False, max_length=40, help_text="Until when, in the same forms (empty: now)."
    )

    def clean(self):
        data = super().clean()
        upload = data.get("file")
        if upload is not None:
            if upload.size > MAX_TEXT_CHARS:
                self.add_error("file", f"at most {MAX_TEXT_CHARS // 1024} KiB")
                return data
            try:
                data["text"] = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                self.add_error("file", "not UTF-8 text")
                return data
            data["origin"] = PurePath(upload.name).name[:200]
        else:
            data["text"] = data.get("draft") or ""
            data["origin"] = "the draft"
        if not data["text"].strip():
            self.add_error("draft", "Paste the policies, or choose a .cedar file.")
        if data.get("since"):
            try:
                data["window"] = backtest_window(data["since"], data.get("until") or "")
            except BacktestRefused as exc:
                self.add_error("since", str(exc))
        return data


@admin.register(PolicyBacktest)
class PolicyBacktestAdmin(admin.ModelAdmin):
    """Replay a draft policy set over the stored plans (approvals/decisions/backtest/):
    the page takes the draft and the window, a worker runs it (never the request), and
    the report lists the plans where the draft and people disagree. Staff with
    ``approvals.run_policy_backtest`` only; each run is audited (``policy.backtest``)."""

    list_display = ["created_at", "created_by", "hash_short", "since", "until", "state"]
    list_display_links = ["created_at"]
    list_filter = ["state"]
    list_select_related = ["created_by"]
    list_per_page = 50

    def has_module_permission(self, request):
        return _may_backtest(request.user)

    def has_view_permission(self, request, obj=None):
        return _may_backtest(request.user)

    def has_add_permission(self, request):
        return _may_backtest(request.user)

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="draft")
    def hash_short(self, obj: PolicyBacktest) -> str:
        return obj.draft_hash[:12]

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        problems: list[str] = []
        if request.method == "POST":
            form = PolicyBacktestForm(request.POST, request.FILES)
            if form.is_valid():
                since, until = form.cleaned_data["window"]
                try:
                    backtest = policy_backtest_request(
                        user=request.user,
                        draft_text=form.cleaned_data["text"],
                        since=since,
                        until=until,
                        origin=form.cleaned_data["origin"],
                    )
                except DraftRefused as exc:
                    problems = [exc.heading, *exc.problems]
                except BacktestRefused as exc:
                    problems = [str(exc)]
                else:
                    return HttpResponseRedirect(backtest.get_absolute_url())
        else:
            form = PolicyBacktestForm()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Backtest a draft policy set",
            "form": form,
            "problems": problems,
            "changelist_url": reverse("admin:approvals_policybacktest_changelist"),
        }
        return TemplateResponse(request, "admin/approvals/policybacktest/run.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            backtest = PolicyBacktest.objects.select_related("created_by").get(
                pk=uuid.UUID(str(object_id))
            )
        except (ValueError, PolicyBacktest.DoesNotExist):
            raise Http404("no such backtest") from None
        if request.GET.get("format") == "json":
            return JsonResponse(backtest.report, json_dumps_params={"indent": 1})
        running = backtest.state in (PolicyBacktest.State.QUEUED, PolicyBacktest.State.RUNNING)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Backtest {backtest.draft_hash[:12]}",
            "backtest": backtest,
            "report": backtest.report or None,
            "running": running,
            "changelist_url": reverse("admin:approvals_policybacktest_changelist"),
        }
        return TemplateResponse(request, "admin/approvals/policybacktest/report.html", context)
