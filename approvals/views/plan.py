"""A plan's page: what would change, the decision bound to the fingerprint, the live
outcome; and the plan's forms (decide, revoke, check now, resolve, preview again, edit)."""

from __future__ import annotations

import json
from typing import Any

import markdown
import nh3
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy, gettext_noop
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from actions.lib.exceptions import CountersignError, NotFound
from actions.preview import diff
from actions.spec import VERIFIABLE_KINDS

from ..diffs import is_long_text, only_version_moved, word_diff
from ..models import Plan, PlanStatus
from ..pages import page_error, plan_page
from ..selectors import plan_attempt, plan_for_review, plan_newest_revision
from ..services import (
    approval_record,
    approval_revoke,
    plan_check_request,
    plan_edit,
    plan_preview_again,
    plan_resolve,
)

RENDERED_TAGS = {
    "p",
    "strong",
    "em",
    "code",
    "pre",
    "ul",
    "ol",
    "li",
    "br",
    "blockquote",
    "h3",
    "h4",
}


def render_markdown(text: str) -> str:
    """Markdown to HTML, then sanitized: whatever the source, only harmless tags survive."""
    html = markdown.markdown(text or "", extensions=["fenced_code"], output_format="html")
    return nh3.clean(html, tags=RENDERED_TAGS, attributes={}, link_rel=None)


def _pretty(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _change_rows(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for c in changes:
        row = {**c, "before_text": _pretty(c["before"]), "after_text": _pretty(c["after"])}
        if c["op"] == "replace" and is_long_text(c["before"], c["after"]):
            row["word_diff"] = word_diff(c["before"], c["after"])
        rows.append(row)
    return rows


def _revision_context(plan: Plan) -> dict[str, Any]:
    """How this plan relates to the one it revises, and what changed in the target."""
    original = plan.revision_of
    if original is None:
        return {}
    moved = diff(original.before, plan.before)
    same_changes = original.changes == plan.changes
    spec_version = plan.action.spec.version
    version_field = spec_version.field if spec_version and spec_version.source == "field" else ""
    return {
        "original": original,
        "target_moved": _change_rows(moved),
        "same_changes": same_changes,
        "same_after": original.after == plan.after,
        "only_version_moved": same_changes and only_version_moved(moved, version_field),
    }


# Outcome details are recorded in English (the agent reads them too); the fixed ones are
# in the catalog so the page can show them in the reviewer's language.
OUTCOME_DETAILS = [
    gettext_noop("no decision before the plan expired"),
    gettext_noop("denied by a reviewer"),
    gettext_noop("superseded by a reviewer's edit"),
    gettext_noop("the original plan was decided before the edit was saved"),
    gettext_noop("the target changed after the preview; nothing was written; propose again"),
    gettext_noop("refused before sending: the write credential cannot be opened"),
]

# What a reconciliation read found (executors.reconciliation), as a reviewer reads it.
CHECK_VERDICTS = {
    "applied": gettext_lazy("applied"),
    "not applied": gettext_lazy("not applied"),
    "changed by someone else": gettext_lazy("changed by someone else"),
    "the target is gone": gettext_lazy("the target is gone"),
}


@require_GET
@plan_page
@vary_on_headers("HX-Request")
def plan_detail(request: HttpRequest, plan_id) -> HttpResponse:
    plan = plan_for_review(plan_id)
    approvals = list(plan.approvals.select_related("reviewer"))
    approved_by = [a for a in approvals if a.decision == "approve"]
    superseded_by = plan_newest_revision(plan)
    awaiting = plan.status == PlanStatus.AWAITING_APPROVAL
    # The sweeper moves it to expired within a period; until then it only looks awaiting.
    expired = awaiting and plan.expires_at <= timezone.now()
    attempt = plan_attempt(plan)
    verdict = (attempt.reconciliation or {}).get("verdict", "") if attempt else ""
    context = {
        "plan": plan,
        "card": plan.action.spec.card,
        "summary_html": render_markdown(plan.summary_markdown),
        "changes": _change_rows(plan.changes),
        "write_request_text": _pretty(plan.write_request),
        "expected_text": _pretty(plan.precondition.get("expected")),
        "approvals": approvals,
        "approved_by": approved_by,
        "approvals_missing": max(0, plan.required_approvals - len(approved_by)),
        "already_decided": any(a.reviewer_id == request.user.id for a in approvals),
        "decidable": awaiting and not expired,
        "expired": expired,
        "superseded_by": superseded_by,
        "can_preview_again": plan.status == PlanStatus.STALE and superseded_by is None,
        # Unknown waits for a person (who may be typing a resolution): no auto-refresh.
        "live": plan.status in PlanStatus.in_flight() or plan.status == PlanStatus.PENDING,
        "attempt": attempt,
        "result_fields": [f.name for f in plan.action.spec.result],
        "verify": plan.action.spec.verify,
        "verifiable": plan.kind in VERIFIABLE_KINDS,
        "last_check": CHECK_VERDICTS.get(verdict, verdict),
        "outcome_detail": gettext(plan.outcome_detail) if plan.outcome_detail else "",
        **_revision_context(plan),
    }
    template = "approvals/plan_detail.html"
    if request.htmx:
        template += "#plan-status"
    return render(request, template, context)


@require_POST
@plan_page
def plan_preview_again_view(request: HttpRequest, plan_id) -> HttpResponse:
    """A stale plan, previewed again as a new revision the reviewer can approve."""
    revision = plan_preview_again(plan_id=plan_id, reviewer=request.user)
    messages.success(request, gettext("Previewed again: review the new plan."))
    return redirect(revision)


def _edit_fields(plan: Plan, values: dict[str, Any] | None, errors: dict[str, str]):
    """One form field per top-level input property, with the value shown as text."""
    schema = plan.action.spec.input_schema
    required = set(schema.get("required") or [])
    properties = schema.get("properties") or {}
    # The schema's required list gives a meaningful order; stored schemas sort keys.
    order = [n for n in schema.get("required") or [] if n in properties]
    order += sorted(n for n in properties if n not in order)
    fields = []
    for name in order:
        prop = properties[name]
        kind = prop.get("type", "string")
        value = (values or plan.input).get(name, "")
        if values is None and kind in ("object", "array", "integer", "number", "boolean"):
            value = json.dumps(value) if name in plan.input else ""
        fields.append(
            {
                "name": name,
                "kind": kind if isinstance(kind, str) else "string",
                "value": value,
                "required": name in required,
                "description": prop.get("description", ""),
                "error": errors.get(name, ""),
                "multiline": kind in ("object", "array")
                or (kind == "string" and int(prop.get("maxLength", 0)) > 300),
            }
        )
    return fields


def _parse_edit(plan: Plan, post) -> tuple[dict[str, Any], dict[str, str]]:
    """The posted text fields as JSON values typed by the schema; empty optionals omitted."""
    schema = plan.action.spec.input_schema
    required = set(schema.get("required") or [])
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, prop in (schema.get("properties") or {}).items():
        raw = post.get(f"input-{name}", "")
        if raw == "" and name not in required:
            continue
        if prop.get("type", "string") == "string":
            values[name] = raw
            continue
        try:
            values[name] = json.loads(raw)
        except ValueError:
            errors[name] = gettext("not a valid JSON value")
    return values, errors


@require_http_methods(["GET", "POST"])
@plan_page
def plan_edit_view(request: HttpRequest, plan_id) -> HttpResponse:
    """Edit, then approve: a reviewer's change becomes a new revision, previewed again
    through the same path an agent's proposal takes (schema, scope, read-only preview)."""
    plan = plan_for_review(plan_id)
    errors: dict[str, str] = {}
    problems: list[str] = []
    posted: dict[str, Any] | None = None
    status = 200
    if request.method == "POST":
        posted = {k[len("input-") :]: v for k, v in request.POST.items() if k.startswith("input-")}
        values, errors = _parse_edit(plan, request.POST)
        if not errors:
            try:
                revision = plan_edit(plan_id=plan.id, reviewer=request.user, input=values)
            except NotFound:
                raise  # the plan is gone: a 404 (plan_page)
            except CountersignError as exc:
                # Shown next to the fields, the reviewer's typing kept (not plan_page's
                # redirect, which would lose it).
                for error in exc.errors:
                    name = error["pointer"].removeprefix("/input/").split("/")[0]
                    if error["pointer"].startswith("/input/") and name in posted:
                        errors.setdefault(name, page_error(exc, error["message"]))
                    else:
                        problems.append(page_error(exc, error["message"]))
                if not exc.errors:
                    problems.append(page_error(exc))
            else:
                messages.success(
                    request, gettext("Edited: review the new plan before approving it.")
                )
                return redirect(revision)
        status = 422
    context = {
        "plan": plan,
        "editable": plan.status == PlanStatus.AWAITING_APPROVAL,
        "fields": _edit_fields(plan, posted, errors),
        "problems": problems,
    }
    return render(request, "approvals/plan_edit.html", context, status=status)


@require_POST
@plan_page
def plan_decide(request: HttpRequest, plan_id) -> HttpResponse:
    decision = request.POST.get("decision", "")
    approval_record(
        plan_id=plan_id,
        reviewer=request.user,
        decision=decision,
        fingerprint_seen=request.POST.get("fingerprint", ""),
        comment=request.POST.get("comment", ""),
    )
    messages.success(
        request, gettext("Denied.") if decision == "deny" else gettext("Approval recorded.")
    )
    return redirect("approvals:plan-detail", plan_id=plan_id)


@require_POST
@plan_page
def plan_revoke(request: HttpRequest, plan_id) -> HttpResponse:
    """Withdraw an approval before the worker sends anything."""
    approval_revoke(plan_id=plan_id, reviewer=request.user)
    messages.success(request, gettext("Approval revoked; nothing was sent."))
    return redirect("approvals:plan-detail", plan_id=plan_id)


@require_POST
@plan_page
def plan_check(request: HttpRequest, plan_id) -> HttpResponse:
    """Check now: a worker looks at an unknown or pending outcome at once."""
    plan_check_request(plan_id=plan_id, reviewer=request.user)
    messages.info(
        request, gettext("A worker is checking; this page shows the outcome when it is done.")
    )
    return redirect("approvals:plan-detail", plan_id=plan_id)


@require_POST
@plan_page
def plan_resolve_view(request: HttpRequest, plan_id) -> HttpResponse:
    """A person records what they found for an unknown outcome."""
    plan_resolve(
        plan_id=plan_id,
        reviewer=request.user,
        state=request.POST.get("state", ""),
        note=request.POST.get("note", ""),
    )
    messages.success(request, gettext("Resolution recorded."))
    return redirect("approvals:plan-detail", plan_id=plan_id)
