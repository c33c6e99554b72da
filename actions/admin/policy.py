"""Decision rules and policy versions in the admin: read only (a catalog or policies
file changes them, audited)."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from ..export import definition_text
from ..models import DecisionRule, PolicyVersion
from ..policy.reviewers import requirement_for_rule, requirement_text
from .base import ReadOnlyAdmin


@admin.register(DecisionRule)
class DecisionRuleAdmin(ReadOnlyAdmin):
    """The catalog's decision rules (``reviewers:``), read-only: they are changed by
    loading a catalog file, so that they are reviewed, versioned and exported as code."""

    list_display = ["name", "requirement", "policies_may_approve", "updated_by", "updated_at"]
    search_fields = ["name"]
    fields = [
        "name",
        "policies_may_approve",
        "updated_by",
        "updated_at",
        "digest",
        "definition_yaml",
    ]
    readonly_fields = fields

    @admin.display(description="requirement")
    def requirement(self, obj: DecisionRule) -> str:
        return requirement_text(requirement_for_rule(obj.name, obj.definition))

    @admin.display(description="policies may approve", boolean=True)
    def policies_may_approve(self, obj: DecisionRule) -> bool:
        # The rule's groups own its plans: a policy's @approve decides them only if
        # the rule says so (actions/policy/reviewers.py: rules_keeping).
        return obj.definition.get("policies_may_approve") is True

    @admin.display(description="definition")
    def definition_yaml(self, obj: DecisionRule) -> str:
        return format_html("<pre>{}</pre>", definition_text(obj.definition))


@admin.register(PolicyVersion)
class PolicyVersionAdmin(ReadOnlyAdmin):
    """The policy set's versions, newest first (the newest is in force). They change as
    code, by loading a catalog file's ``policies:`` section, so that each change is
    reviewed, versioned and audited (``policy.changed``)."""

    list_display = ["number", "hash_short", "enforced", "shadowed", "created_by", "created_at"]
    search_fields = ["hash", "enforce", "shadow"]
    fields = [
        "number",
        "hash",
        "created_by",
        "created_at",
        "diff_text",
        "enforce_text",
        "shadow_text",
    ]
    readonly_fields = fields

    @admin.display(description="hash")
    def hash_short(self, obj: PolicyVersion) -> str:
        return obj.hash[:12]

    @admin.display(description="enforced")
    def enforced(self, obj: PolicyVersion) -> str:
        return ", ".join((obj.policies or {}).get("enforce") or []) or "—"

    @admin.display(description="shadow")
    def shadowed(self, obj: PolicyVersion) -> str:
        return ", ".join((obj.policies or {}).get("shadow") or []) or "—"

    @admin.display(description="diff from the version before")
    def diff_text(self, obj: PolicyVersion) -> str:
        return format_html("<pre>{}</pre>", obj.diff or "(no change)")

    @admin.display(description="enforce")
    def enforce_text(self, obj: PolicyVersion) -> str:
        return format_html("<pre>{}</pre>", obj.enforce or "(empty)")

    @admin.display(description="shadow")
    def shadow_text(self, obj: PolicyVersion) -> str:
        return format_html("<pre>{}</pre>", obj.shadow or "(empty)")
