"""Agents in the admin: their tokens, attributes, allow-lists and actions."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from jsonschema.exceptions import SchemaError

from actions.lib.actors import user_actor
from actions.lib.audit import audit_record

from ..models import Agent, AgentScope
from ..spec import InputValidator

# The names agents' attributes may have: what a scope rule's ``equals_agent`` can name.
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class AgentForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = ["is_active", "expires_at", "actions", "attributes"]
        help_texts = {
            "attributes": (
                'A JSON object of facts scope rules compare with, e.g. {"workspace": "ws-blue"}.'
            ),
        }

    def clean_attributes(self) -> dict[str, Any]:
        value = self.cleaned_data.get("attributes")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise ValidationError("must be a JSON object")
        for key, item in value.items():
            if not _ATTRIBUTE_NAME.fullmatch(key):
                raise ValidationError(
                    f"{key!r}: attribute names are letters, digits and _ (what equals_agent names)"
                )
            if not isinstance(item, str | int | float | bool):
                raise ValidationError(f"{key!r}: values are strings, numbers or booleans")
        return value


class AgentScopeForm(forms.ModelForm):
    class Meta:
        model = AgentScope
        fields = ["action", "field", "values"]
        help_texts = {
            "field": "An input field of the action.",
            "values": 'A JSON list of the values allowed, e.g. ["c-1001", "c-1002"].',
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # An empty list is refused below, with a message that says why.
        self.fields["values"].required = False

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        action, field, values = (cleaned.get(k) for k in ("action", "field", "values"))
        if action is None or not field:
            return cleaned
        input_schema = action.definition.get("input_schema") or {}
        properties = input_schema.get("properties") or {}
        if field not in properties:
            known = ", ".join(sorted(properties)) or "none"
            self.add_error("field", f"not an input field of {action.name} (its fields: {known})")
            return cleaned
        if "values" not in cleaned:
            return cleaned
        if not isinstance(values, list) or not values:
            self.add_error("values", "must be a non-empty JSON list")
            return cleaned
        # bool is an int to Python (True == 1): a scope of [1] must not admit true.
        if any(isinstance(v, bool) or not isinstance(v, str | int) for v in values):
            self.add_error("values", "every value must be a string or an integer")
            return cleaned
        # A value the input schema refuses could never match; say so now, not at runtime.
        schema = {**properties[field], "$defs": input_schema.get("$defs", {})}
        try:
            validator = InputValidator(schema)  # RE2 for patterns, as at submission
            bad = [v for v in values if not validator.is_valid(v)]
        except SchemaError:
            bad = []
        if bad:
            self.add_error("values", f"not valid for {field}: {', '.join(map(repr, bad))}")
        return cleaned


class AgentScopeInline(admin.TabularInline):
    model = AgentScope
    form = AgentScopeForm
    extra = 0
    verbose_name = "allow-list"
    verbose_name_plural = "allow-lists (an input field may only take these values)"


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = [
        "name",
        "token_prefix",
        "is_active",
        "expires_at",
        "revoked_at",
        "created_at",
        "last_used_at",
    ]
    list_filter = ["is_active"]
    search_fields = ["name", "token_prefix"]
    fields = [
        "name",
        "is_active",
        "expires_at",
        "revoked_at",
        "actions",
        "attributes",
        "token_prefix",
        "created_by",
        "created_at",
        "last_used_at",
    ]
    readonly_fields = [
        "name",
        "token_prefix",
        "revoked_at",
        "created_by",
        "created_at",
        "last_used_at",
    ]
    filter_horizontal = ["actions"]
    inlines = [AgentScopeInline]

    def has_add_permission(self, request):
        # `manage.py create_agent` makes the token and shows it once; only its hash is kept.
        return False

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        agent = form.instance
        audit_record(
            kind="agent.changed",
            actor=user_actor(request.user),
            data={
                "agent": agent.name,
                "is_active": agent.is_active,
                "actions": sorted(agent.actions.values_list("name", flat=True)),
                "attributes": agent.attributes,
                "scopes": [
                    {"action": s.action.name, "field": s.field, "values": s.values}
                    for s in agent.scopes.select_related("action").order_by("action__name", "field")
                ],
            },
        )
