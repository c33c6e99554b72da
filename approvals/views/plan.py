"""A plan's page: what would change, the decision bound to the fingerprint, the live
outcome; and the plan's forms (decide, revoke, check now, resolve, preview again, edit).

The page is built for a decision in seconds: one summary line first (verb, target, the
object's name, class, approvals, expiry), the changed fields right under it, then the
decision, which asks more the more a mistake costs (one click; the effect named on the
button; typing what an irreversible change destroys). Before offering Approve it checks
that the target is still as previewed (approvals/freshness.py)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import (
    get_language,
    gettext,
    gettext_lazy,
    gettext_noop,
    pgettext_lazy,
)
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRefresh

from actions.lib.exceptions import (
    CountersignError,
    DecisionRulesChanged,
    InvalidInput,
    NotFound,
)
from actions.preview import diff
from actions.spec import VERIFIABLE_KINDS
from actions.textdiff import is_text_document, line_diff

from ..decisions.policies import MODE as POLICY_MODE
from ..decisions.policies import policy_decided_by
from ..decisions.requester import RequesterMayNotApprove, is_requester, requester_label
from ..decisions.requirements import (
    approvals_standing,
    plan_requirement_answer,
    reviewer_groups,
)
from ..freshness import APPEARED, GONE, MOVED, NOTHING, UNCHECKED, plan_freshness
from ..identity.passkeys import plan_needs_signature
from ..models import Passkey, Plan, PlanStatus
from ..selectors import (
    plan_attempt,
    plan_for_review,
    plan_newest_revision,
    plan_same_target,
    plan_visible_to,
)
from ..services import (
    approval_record,
    approval_revoke,
    plan_check_request,
    plan_edit,
    plan_preview_again,
    plan_resolve,
)
from .diffs import only_version_moved
from .pages import page_error, plan_page
from .review import (
    action_texts,
    approve_words,
    change_rows,
    confirmation_matches,
    confirmation_words,
    field_rows,
    message_of,
    needs_typed_confirmation,
    plan_label,
    plan_summary_html,
    target_id,
    unchanged_rows,
    value_text,
)

# The summary line's verb, by change kind (a reviewer's word, not the HTTP method).
KIND_VERBS = {
    "create": pgettext_lazy("change kind", "CREATE"),
    "update": pgettext_lazy("change kind", "UPDATE"),
    "replace": pgettext_lazy("change kind", "REPLACE"),
    "delete": pgettext_lazy("change kind", "DELETE"),
    "invoke": pgettext_lazy("change kind", "SEND"),
    "read": pgettext_lazy("change kind", "READ"),
}
# The consequence class in one word, for the summary line (the badge has the long name).
CLASS_WORDS = {
    "observation": pgettext_lazy("class", "observation"),
    "reversible": pgettext_lazy("class", "reversible"),
    "external": pgettext_lazy("class", "external"),
    "irreversible": pgettext_lazy("class", "irreversible"),
}
FRESHNESS_WORDS = {
    MOVED: gettext_lazy("The target changed since the preview: preview again before deciding."),
    GONE: gettext_lazy("The target no longer exists: this plan cannot succeed."),
    APPEARED: gettext_lazy("The target was created since the preview: preview again."),
    UNCHECKED: gettext_lazy(
        "Could not check whether the target changed since the preview; the worker checks "
        "again right before writing."
    ),
}
# What a shadow set would have done with the plan, as the page says it.
SHADOW_WORDS = {
    "approve": gettext_lazy("would have approved this plan with no person"),
    "refuse": gettext_lazy("would have refused this plan"),
    "review": gettext_lazy("would have sent this plan to people, as it went"),
}
# The change's heading says what the plan's state makes true: it would change (not yet
# decided or written), it changed (written and done), or it was only planned.
CHANGES_HEADINGS = {
    "would": gettext_lazy("What would change"),
    "did": gettext_lazy("What changed"),
    "planned": gettext_lazy("What was planned"),
}
WOULD_CHANGE = frozenset({PlanStatus.AWAITING_APPROVAL, PlanStatus.APPROVED, PlanStatus.EXECUTING})


def _changes_tense(plan: Plan) -> str:
    if plan.status in WOULD_CHANGE:
        return "would"
    if plan.status == PlanStatus.COMPLETED:
        return "did"
    return "planned"


# Without JavaScript nothing polls: the page reloads itself while the worker is busy.
NO_SCRIPT_REFRESH_SECONDS = 5


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
        "target_moved": change_rows(moved),
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
    gettext_noop(
        "superseded: the target changed since the preview and a reviewer previewed it again"
    ),
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


def _change_context(plan: Plan) -> dict[str, Any]:
    """The change as rows: changed fields (before and after) with the untouched ones as
    context; a create's or delete's whole record; an invoke's message and recipients; a
    text document's (a file's content) unified line diff."""
    if plan.kind not in ("invoke", "read") and is_text_document(plan.before, plan.after):
        return {"text_diff": line_diff(plan.before, plan.after)}
    if plan.kind == "create":
        return {"record_rows": field_rows(plan.after)}
    if plan.kind == "delete":
        return {"record_rows": field_rows(plan.before)}
    if plan.kind == "invoke":
        message_html, rows = message_of(plan.after)
        return {"message_html": message_html, "record_rows": rows}
    return {
        "changes": change_rows(plan.changes),
        "unchanged": unchanged_rows(plan.before, plan.changes),
    }


def _request_text(write_request: dict[str, Any]) -> str:
    """The exact request, without the keys that say nothing (no body, no content type)."""
    shown = {k: v for k, v in (write_request or {}).items() if v not in (None, {}, [])}
    return json.dumps(shown, indent=2, ensure_ascii=False, sort_keys=True)


def _seen_token(plan: Plan, approvals: list, verdict: str) -> str:
    """What the live box shows, in a few bytes: the poll is answered 204 (no swap, so
    nothing is announced again to a screen reader) while it has not changed."""
    state = [plan.status, plan.outcome_detail, plan.upstream_status, verdict]
    state += [(a.reviewer_id, a.decision) for a in approvals]
    return hashlib.sha256(repr(state).encode()).hexdigest()[:16]


@require_GET
@plan_page
@vary_on_headers("HX-Request")
def plan_detail(request: HttpRequest, plan_id) -> HttpResponse:
    plan = plan_for_review(plan_id)
    if not plan_visible_to(request.user, plan.id):
        # Neither one of its deciders nor allowed to view every plan (selectors).
        raise PermissionDenied("you cannot see this plan: it is decided by other groups")
    language = get_language()
    part = request.GET.get("part", "") if request.htmx else ""
    awaiting = plan.status == PlanStatus.AWAITING_APPROVAL
    # The sweeper moves it to expired within a period; until then it only looks awaiting.
    expired = awaiting and plan.expires_at <= timezone.now()
    decidable = awaiting and not expired
    if part == "freshness":
        # Asked again by the decision form as the reviewer reaches it: a preview made
        # obsolete meanwhile reloads the page, which then offers "preview again".
        freshness = plan_freshness(plan) if decidable else None
        if freshness is None or freshness.obsolete:
            return HttpResponseClientRefresh()
        return render(
            request,
            "approvals/plan_detail.html#freshness",
            {
                "plan": plan,
                "freshness": freshness.state,
                "checked_at": timezone.now(),
                "rechecked": True,
            },
        )
    approvals = list(plan.approvals.select_related("reviewer"))
    approved_by = [a for a in approvals if a.decision == "approve"]
    approvals_counted = (
        len(approved_by) - len(approvals_standing(plan, approved_by).void)
        if not plan.requirement
        else len(approved_by)  # a ruled plan counts by clause (plan_requirement_answer)
    )
    attempt = plan_attempt(plan)
    verdict = (attempt.reconciliation or {}).get("verdict", "") if attempt else ""
    seen = _seen_token(plan, approvals, verdict)
    if request.htmx and request.GET.get("seen") == seen:
        return HttpResponse(status=204)
    superseded_by = plan_newest_revision(plan)
    requirement = plan_requirement_answer(plan)
    may_decide = not requirement or bool(reviewer_groups(plan, request.user))
    already_decided = any(a.reviewer_id == request.user.id for a in approvals)
    you_requested = is_requester(plan.requester, request.user)
    # Break-glass (approvals/services/deciding.py): a superuser outside the plan's groups may still
    # decide it, giving a reason; never their own request.
    break_glass = (
        decidable
        and not may_decide
        and request.user.is_superuser
        and not already_decided
        and not you_requested
    )
    if not may_decide:
        decidable = False
    # Someone who cannot decide is told which groups can.
    needed_groups = (
        sorted({t["group"] for c in requirement.get("all_of", []) for t in c["any_of"]})
        if requirement and not may_decide
        else []
    )
    live = plan.status in PlanStatus.in_flight() or plan.status == PlanStatus.PENDING
    context = {
        "plan": plan,
        "seen": seen,
        "verb": KIND_VERBS.get(plan.kind, plan.kind),
        "class_word": CLASS_WORDS.get(plan.consequence_class, plan.consequence_class),
        "label": plan_label(plan, language),
        "target_id": target_id(plan),
        "approvals": approvals,
        "approved_by": approved_by,
        # Only the approvals that still count (a maker since deactivated, or without the
        # review permission, counts no more: approvals/decisions/requirements.py).
        "approvals_counted": approvals_counted,
        "approvals_missing": max(0, plan.required_approvals - approvals_counted)
        if not requirement
        else 0,
        # Who decides (approvals/decisions): groups and counts, and whether this reader
        # is in one of the groups.
        "requirement": requirement,
        # What the catalog's policies said (approvals/decisions/policies.py), and what the
        # shadow set would have done (never enforced).
        "policy_outcome": policy_decided_by(plan),
        "approved_by_policy": plan.policy.get("mode") == POLICY_MODE,
        "shadow": plan.shadow or None,
        "shadow_words": SHADOW_WORDS.get((plan.shadow or {}).get("outcome"), ""),
        "clauses_met": sum(1 for c in requirement.get("all_of", []) if c["met"]),
        "may_decide": may_decide,
        "needed_groups": needed_groups,
        "break_glass": break_glass,
        "already_decided": already_decided,
        "requester_label": requester_label(plan.requester),
        "you_requested": you_requested,
        "decidable": decidable,
        "expired": expired,
        "superseded_by": superseded_by,
        "can_preview_again": plan.status == PlanStatus.STALE
        and superseded_by is None
        and may_decide,
        # Unknown waits for a person (who may be typing a resolution): no auto-refresh.
        "live": live,
        "no_script_refresh": NO_SCRIPT_REFRESH_SECONDS
        if live and not awaiting and not request.htmx
        else 0,
        "attempt": attempt,
        "result_fields": [f.name for f in plan.action.spec.result],
        "verify": plan.action.spec.verify,
        "verifiable": plan.kind in VERIFIABLE_KINDS,
        "last_check": CHECK_VERDICTS.get(verdict, verdict),
        "outcome_detail": gettext(plan.outcome_detail) if plan.outcome_detail else "",
    }
    if request.htmx:
        return render(request, "approvals/plan_detail.html#plan-status", context)
    freshness = NOTHING
    if (decidable or break_glass) and not already_decided:
        freshness = plan_freshness(plan).state
    texts = action_texts(plan.action, language)
    context.update(
        {
            **texts,
            **_change_context(plan),
            **_revision_context(plan),
            "summary_html": plan_summary_html(plan, language),
            "changes_tense": (tense := _changes_tense(plan)),
            "changes_heading": CHANGES_HEADINGS[tense],
            "request_text": _request_text(plan.write_request),
            "expected_text": value_text(plan.precondition.get("expected")),
            "freshness": freshness,
            "freshness_words": FRESHNESS_WORDS.get(freshness, ""),
            "obsolete": freshness in (MOVED, GONE, APPEARED),
            "checked_at": timezone.now(),
            "same_target": plan_same_target(plan) if awaiting else [],
            "approve_words": approve_words(plan, language),
            "typed_confirmation": needs_typed_confirmation(plan),
            "confirmation_words": confirmation_words(plan),
            "editable": decidable and plan.kind != "delete",
            "signed_approval": (signed := plan_needs_signature(plan)),
            # Asked only where it matters: most plans need no signature.
            "has_passkey": signed
            and Passkey.objects.filter(user=request.user, revoked_at__isnull=True).exists(),
        }
    )
    return render(request, "approvals/plan_detail.html", context)


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
        "title": action_texts(plan.action, get_language())["title"],
        "editable": plan.status == PlanStatus.AWAITING_APPROVAL,
        "fields": _edit_fields(plan, posted, errors),
        "problems": problems,
    }
    return render(request, "approvals/plan_edit.html", context, status=status)


@require_POST
@plan_page
def plan_decide(request: HttpRequest, plan_id) -> HttpResponse:
    decision = request.POST.get("decision", "")
    break_glass = request.POST.get("break_glass") == "1"
    try:
        approval_record(
            plan_id=plan_id,
            reviewer=request.user,
            decision=decision,
            fingerprint_seen=request.POST.get("fingerprint", ""),
            comment=request.POST.get("reason" if break_glass else "comment", ""),
            # Present when the page's script signed the approval with a passkey.
            assertion=_assertion(request.POST.get("assertion", "")),
            nonce=request.POST.get("nonce", "")[:100],
            break_glass=break_glass,
            confirmed=_typed_confirmation(request.POST.get("confirm", "")),
        )
    except (RequesterMayNotApprove, DecisionRulesChanged) as exc:
        # The plan's page again, saying why, with the refusal's status (403 for the floor,
        # approvals/decisions/requester.py; 409 decision-rules-changed when the rules in
        # force would give the plan another requirement): nothing changed, and the page
        # shows the plan as it is. An HTMX request gets the page's fragment, alike.
        messages.error(request, page_error(exc))
        response = plan_detail.__wrapped__(request, plan_id=plan_id)  # past require_GET
        response.status_code = exc.status
        return response
    if break_glass:
        messages.warning(
            request,
            gettext("Decided by break-glass: audited, and told to every group of the plan."),
        )
    else:
        messages.success(
            request, gettext("Denied.") if decision == "deny" else gettext("Approval recorded.")
        )
    return redirect("approvals:plan-detail", plan_id=plan_id)


def _typed_confirmation(typed: str) -> Callable[[Plan], None]:
    """What approval_record checks of an approval on the plan it locks: an irreversible
    plan is approved only by a reviewer who typed what it destroys. Checked here as well
    as in the browser, so it holds without JavaScript; an extra condition on top of the
    fingerprint binding, which approval_record keeps. Run on the row approval_record
    locks, it costs a decision no read of the plan of its own."""

    def check(plan: Plan) -> None:
        if needs_typed_confirmation(plan) and not confirmation_matches(plan, typed):
            raise InvalidInput(
                errors=[
                    {
                        "pointer": "/confirm",
                        "message": "type the target's id or name to approve an irreversible change",
                    }
                ]
            )

    return check


def _assertion(text: str) -> dict | None:
    try:
        value = json.loads(text) if text and len(text) < 20_000 else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


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
