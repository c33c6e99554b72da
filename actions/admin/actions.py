"""Actions in the admin: a definition edited as its catalog entry, checked as the loader
checks it and stored through ``action_define`` (a new version); the OpenAPI import; the
versions kept."""

from __future__ import annotations

import logging
import re
from pathlib import PurePath
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.forms.models import BaseInlineFormSet
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from actions.lib.actors import user_actor

from .. import catalog
from ..catalog import (
    CatalogError,
    CatalogProblem,
    action_define,
    catalog_schema,
    parse_catalog_text,
    validate_action_definition,
)
from ..export import definition_text
from ..models import Action, ActionVersion, Connector
from ..openapi import OpenAPIImportError, import_openapi
from ..toolpins import confirm_action_tools
from .base import ReadOnlyAdmin

log = logging.getLogger(__name__)

CARD_FIELDS = ("effect", "scope", "result", "consent", "retry")
# The importer's own limit (actions.openapi.MAX_DOCUMENT_BYTES), the same on the command line.
MAX_OPENAPI_BYTES = 16 * 1024 * 1024


def _slug_pattern() -> re.Pattern[str]:
    return re.compile(catalog_schema()["$defs"]["slug"]["pattern"])


def _problem_text(problem: CatalogProblem, line: int | None = None) -> str:
    where = f"line {line}: " if line else ""
    return f"{where}{problem.pointer or '/'}: {problem.message}"


def _line_of(text: str, pointer: str) -> int | None:
    # catalog.line_of is new; the admin works without it (no line numbers, same checks).
    finder = getattr(catalog, "line_of", None)
    return finder(text, pointer) if finder is not None and pointer else None


def enable_problems(definition: dict[str, Any], *, class_confirmed: bool) -> list[CatalogProblem]:
    """Why this definition may not be enabled (nothing if it is disabled)."""
    if definition.get("enabled", True) is not True:
        return []
    problems = []
    card = definition.get("card") if isinstance(definition.get("card"), dict) else {}
    for key in CARD_FIELDS:
        if not str(card.get(key) or "").strip():
            problems.append(
                CatalogProblem(
                    f"/card/{key}", "is empty: an action without a complete card cannot be enabled"
                )
            )
    if not class_confirmed:
        problems.append(
            CatalogProblem(
                "/enabled",
                "the consequence class has not been confirmed by a person: keep "
                "enabled: false, or use “Confirm class and enable” on the action list",
            )
        )
    return problems


def definition_problems(
    name: str, definition: dict[str, Any], *, class_confirmed: bool
) -> list[CatalogProblem]:
    """Everything the file loader refuses, plus what stops an action being enabled."""
    problems = validate_action_definition(name, definition)
    seen = {p.pointer for p in problems}
    extra = enable_problems(definition, class_confirmed=class_confirmed)
    return problems + [p for p in extra if p.pointer not in seen]


class ActionDefinitionForm(forms.ModelForm):
    """An action is edited as its catalog entry, in YAML, and checked like one."""

    definition_yaml = forms.CharField(
        label="Definition (YAML)",
        strip=False,
        widget=forms.Textarea(
            attrs={"rows": 40, "cols": 100, "spellcheck": "false", "class": "vLargeTextField"}
        ),
        help_text=(
            "The action's entry in the catalog file format (docs/catalog.md), without its "
            "name. Saving a change creates a new version: plans previewed under the old "
            "one can no longer be approved or executed."
        ),
    )
    # The version the person started from: a save on top of someone else's newer
    # version is refused instead of silently replacing it.
    based_on_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Action
        fields = ["name"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["definition_yaml"].initial = definition_text(self.instance.definition)
            self.fields["based_on_version"].initial = self.instance.version

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if not _slug_pattern().fullmatch(name):
            raise ValidationError(
                "a lowercase slug: a letter, then letters, digits, _ or - (at most 64)"
            )
        return name

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        name = self.instance.name if self.instance.pk else cleaned.get("name")
        text = cleaned.get("definition_yaml")
        if not name or text is None:
            return cleaned
        if self.instance.pk:
            # The admin's change view runs in a transaction: the lock holds until the new
            # version is stored, so two people saving at once cannot both pass this check.
            current = (
                Action.objects.select_for_update()
                .filter(pk=self.instance.pk)
                .values_list("version", "updated_by")
                .first()
            )
            based_on = cleaned.get("based_on_version")
            if current is not None and based_on is not None and based_on != current[0]:
                raise ValidationError(
                    f"this action changed since you opened it (now version {current[0]}, "
                    f"by {current[1] or 'someone'}); reload the page and make your change again"
                )
        try:
            definition = parse_catalog_text(text, source=name)
        except CatalogError as exc:
            self.add_error(
                "definition_yaml",
                [_problem_text(p, getattr(p, "line", None)) for p in exc.problems],
            )
            return cleaned
        class_confirmed = self.instance.class_confirmed if self.instance.pk else True
        problems = definition_problems(name, definition, class_confirmed=class_confirmed)
        if problems:
            self.add_error(
                "definition_yaml",
                [_problem_text(p, _line_of(text, p.pointer)) for p in problems],
            )
            return cleaned
        cleaned["definition"] = definition
        return cleaned


class ReadOnlyInlineFormSet(BaseInlineFormSet):
    def save(self, commit: bool = True) -> list:
        # History is written by action_define only; the admin never rewrites a row.
        self.new_objects, self.changed_objects, self.deleted_objects = [], [], []
        return []


class ActionVersionInline(admin.TabularInline):
    model = ActionVersion
    formset = ReadOnlyInlineFormSet
    fields = ["version", "changed_by", "changed_at", "digest_short"]
    readonly_fields = fields
    ordering = ["-version"]
    extra = 0
    can_delete = False
    show_change_link = True
    verbose_name = "version"
    verbose_name_plural = "version history"

    @admin.display(description="digest")
    def digest_short(self, obj: ActionVersion) -> str:
        return obj.digest[:12]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class OpenAPIImportForm(forms.Form):
    connector = forms.ModelChoiceField(queryset=Connector.objects.order_by("name"))
    file = forms.FileField(label="OpenAPI document (JSON or YAML, at most 16 MiB)")
    prefix = forms.RegexField(
        regex=r"^[a-z][a-z0-9_]{0,31}$",
        required=False,
        help_text="Put before every proposed name (names are unique in the catalog): stripe_",
    )
    only = forms.CharField(
        required=False,
        max_length=5000,
        label="Only operations",
        help_text="operationIds, comma-separated; empty for all.",
    )
    tag = forms.CharField(
        required=False,
        max_length=1000,
        label="Only tags",
        help_text="Operations with one of these tags, comma-separated; empty for all.",
    )
    headers = forms.CharField(
        required=False,
        max_length=2000,
        label="Fixed headers",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Documented headers every action sends with this value, one a line: "
        "“From: ops@example.com”. Never a credential.",
    )
    dry_run = forms.BooleanField(
        required=False,
        initial=True,
        label="Dry run",
        help_text="Show what would be proposed; store nothing.",
    )

    def clean_headers(self):
        headers = {}
        for line in self.cleaned_data["headers"].splitlines():
            if not line.strip():
                continue
            name, sep, value = line.partition(":")
            if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,63}", name.strip()):
                raise ValidationError(f"write “Name: value”, not {line.strip()!r}")
            headers[name.strip()] = value.strip()
        return headers

    def clean_file(self):
        upload = self.cleaned_data["file"]
        # Django has spooled a large upload to a temporary file, not to memory; only
        # the limit plus one byte is ever read from it.
        too_large = f"the file is larger than {MAX_OPENAPI_BYTES // 2**20} MiB"
        if upload.size > MAX_OPENAPI_BYTES:
            raise ValidationError(too_large)
        raw = upload.read(MAX_OPENAPI_BYTES + 1)
        if len(raw) > MAX_OPENAPI_BYTES:
            raise ValidationError(too_large)
        try:
            self.cleaned_data["text"] = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ValidationError("the file is not UTF-8 text") from None
        return upload


@admin.register(Action)
class ActionAdmin(admin.ModelAdmin):
    form = ActionDefinitionForm
    list_display = [
        "name",
        "title",
        "kind",
        "consequence_class",
        "version",
        "enabled",
        "source",
        "class_confirmed",
        "lint_count",
    ]
    list_filter = ["enabled", "class_confirmed", "source", "consequence_class", "kind"]
    search_fields = ["name", "title"]
    actions = ["confirm_class_and_enable", "disable"]
    STATE_FIELDS = [
        "version",
        "digest",
        "enabled",
        "class_confirmed",
        "source",
        "lint_list",
        "updated_by",
        "updated_at",
    ]

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [(None, {"fields": ["name", "definition_yaml"]})]
        return [
            (None, {"fields": ["name", "definition_yaml", "based_on_version"]}),
            ("State", {"fields": self.STATE_FIELDS}),
        ]

    def get_readonly_fields(self, request, obj=None):
        return ["name", *self.STATE_FIELDS] if obj else []

    def get_inlines(self, request, obj):
        return [ActionVersionInline] if obj else []

    @admin.display(description="lint")
    def lint_count(self, obj: Action) -> int:
        return len(obj.lint or [])

    @admin.display(description="lint")
    def lint_list(self, obj: Action) -> str:
        items = [(i.get("pointer") or "/", i.get("message", "")) for i in obj.lint or []]
        if not items:
            return "—"
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{}: {}</li>", items))

    def save_model(self, request, obj, form, change):
        # Not obj.save(): the service versions the definition, keeps the history and
        # audits. A person writing the definition here has stated its class.
        action, result = action_define(
            name=obj.name,
            definition=form.cleaned_data["definition"],
            actor=user_actor(request.user),
            source=Action.Source.ADMIN,
            class_confirmed=obj.class_confirmed if change else True,
        )
        obj.pk = action.pk
        obj.refresh_from_db()
        obj._state.adding = False
        if result == "unchanged":
            self.message_user(request, "The definition is unchanged: no new version.")
        elif result == "updated":
            self.message_user(
                request,
                f"{obj.name} is now version {obj.version}. Plans previewed under an earlier "
                "version can no longer be approved or executed.",
                messages.WARNING,
            )

    # --- enabling ----------------------------------------------------------------

    def _set_enabled(self, request, pk, *, enabled: bool) -> None:
        with transaction.atomic():
            action = Action.objects.select_for_update().get(pk=pk)
            if action.enabled == enabled and (action.class_confirmed or not enabled):
                self.message_user(
                    request, f"{action.name} is already {'enabled' if enabled else 'disabled'}."
                )
                return
            was_confirmed = action.class_confirmed
            definition = {**action.definition, "enabled": enabled}
            if enabled:
                problems = definition_problems(action.name, definition, class_confirmed=True)
                if problems:
                    self.message_user(
                        request,
                        f"{action.name} was not enabled: "
                        + "; ".join(_problem_text(p) for p in problems),
                        messages.ERROR,
                    )
                    return
            # The source stays: switching an action on or off does not change where its
            # definition came from. The new version still records who did it.
            action, _ = action_define(
                name=action.name,
                definition=definition,
                actor=user_actor(request.user),
                source=action.source,
                class_confirmed=True if enabled else action.class_confirmed,
            )
            if enabled and not was_confirmed:
                # An imported MCP action's tools are pinned to what the import saw.
                confirm_action_tools(action, actor=user_actor(request.user))
        if enabled:
            self.message_user(
                request,
                f"{action.name}: consequence class “{action.get_consequence_class_display()}” "
                f"confirmed; enabled as version {action.version}.",
                messages.SUCCESS,
            )
        else:
            self.message_user(
                request,
                f"{action.name} disabled (version {action.version}); its pending plans can "
                "no longer be approved or executed.",
                messages.SUCCESS,
            )

    @admin.action(description="Confirm class and enable", permissions=["change"])
    def confirm_class_and_enable(self, request, queryset):
        for pk in queryset.values_list("pk", flat=True):
            self._set_enabled(request, pk, enabled=True)

    @admin.action(description="Disable", permissions=["change"])
    def disable(self, request, queryset):
        for pk in queryset.values_list("pk", flat=True):
            self._set_enabled(request, pk, enabled=False)

    # --- OpenAPI import ----------------------------------------------------------

    def get_urls(self):
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path(
                "import-openapi/",
                self.admin_site.admin_view(self.import_openapi_view),
                name=f"{prefix}_import_openapi",
            ),
            *super().get_urls(),
        ]

    def import_openapi_view(self, request):
        if not self.has_add_permission(request):
            raise PermissionDenied
        report = problems = None
        dry_run = True
        if request.method == "POST":
            form = OpenAPIImportForm(request.POST, request.FILES)
            if form.is_valid():
                dry_run = form.cleaned_data["dry_run"]
                try:
                    report = import_openapi(
                        form.cleaned_data["text"],
                        connector=form.cleaned_data["connector"].name,
                        actor=user_actor(request.user),
                        source_name=PurePath(form.cleaned_data["file"].name).name[:200],
                        dry_run=dry_run,
                        prefix=form.cleaned_data["prefix"],
                        only=_csv(form.cleaned_data["only"]),
                        tags=_csv(form.cleaned_data["tag"]),
                        headers=form.cleaned_data["headers"],
                    )
                except OpenAPIImportError as exc:
                    problems = list(exc.problems)
                except Exception as exc:  # noqa: BLE001 - a refusal on the page, never a 500
                    log.exception("OpenAPI import failed on an unexpected error")
                    problems = [
                        CatalogProblem(
                            "", f"the import failed ({type(exc).__name__}); nothing was stored"
                        )
                    ]
        else:
            form = OpenAPIImportForm()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Import actions from OpenAPI",
            "form": form,
            "report": report,
            "reads": _as_list(getattr(report, "reads", None)),
            "problems": problems,
            "dry_run": dry_run,
            "changelist_url": reverse("admin:actions_action_changelist"),
        }
        return TemplateResponse(request, "admin/actions/action/import_openapi.html", context)


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple | set | frozenset):
        return list(value)
    if isinstance(value, dict):
        return [f"{k}: {v}" for k, v in value.items()]
    return [value]


@admin.register(ActionVersion)
class ActionVersionAdmin(ReadOnlyAdmin):
    """Every definition an action has had; written only by action_define."""

    list_display = ["action", "version", "changed_by", "changed_at", "digest_short"]
    list_filter = ["action"]
    list_select_related = ["action"]
    search_fields = ["action__name", "changed_by"]
    fields = ["action", "version", "changed_by", "changed_at", "digest", "definition_yaml"]
    readonly_fields = fields

    @admin.display(description="digest")
    def digest_short(self, obj: ActionVersion) -> str:
        return obj.digest[:12]

    @admin.display(description="definition")
    def definition_yaml(self, obj: ActionVersion) -> str:
        return format_html("<pre>{}</pre>", definition_text(obj.definition))
