"""Reviewer pages. Server-rendered; HTMX requests get the same template's fragment."""

from __future__ import annotations

import json

import markdown
import nh3
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from actions.exceptions import CountersignError
from executors.models import Attempt

from .models import TERMINAL, Plan, PlanStatus
from .services import approval_record, approval_revoke, can_review

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


def _require_reviewer(request: HttpRequest) -> None:
    if not can_review(request.user):
        raise PermissionDenied("reviewers only")


def render_markdown(text: str) -> str:
    """Markdown to HTML, then sanitized: whatever the source, only harmless tags survive."""
    html = markdown.markdown(text or "", extensions=["fenced_code"], output_format="html")
    return nh3.clean(html, tags=RENDERED_TAGS, attributes={}, link_rel=None)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def queue(request: HttpRequest) -> HttpResponse:
    _require_reviewer(request)
    awaiting = (
        Plan.objects.filter(status=PlanStatus.AWAITING_APPROVAL)
        .select_related("action", "agent")
        .order_by("-created_at")[:100]
    )
    recent = (
        Plan.objects.exclude(status=PlanStatus.AWAITING_APPROVAL)
        .select_related("action", "agent")
        .order_by("-created_at")[:20]
    )
    context = {"awaiting": awaiting, "recent": recent}
    template = "approvals/queue.html"
    if request.htmx:
        template += "#queue-body"
    return render(request, template, context)


def _plan_or_404(plan_id) -> Plan:
    plan = (
        Plan.objects.select_related("action", "agent", "action__connector")
        .filter(id=plan_id)
        .first()
    )
    if plan is None:
        raise Http404("no such plan")
    return plan


def _pretty(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def plan_detail(request: HttpRequest, plan_id) -> HttpResponse:
    _require_reviewer(request)
    plan = _plan_or_404(plan_id)
    approvals = list(plan.approvals.select_related("reviewer"))
    approved_by = [a for a in approvals if a.decision == "approve"]
    context = {
        "plan": plan,
        "card": plan.action.spec.card,
        "summary_html": render_markdown(plan.summary_markdown),
        "changes": [
            {**c, "before_text": _pretty(c["before"]), "after_text": _pretty(c["after"])}
            for c in plan.changes
        ],
        "write_request_text": _pretty(plan.write_request),
        "expected_text": _pretty(plan.precondition.get("expected")),
        "approvals": approvals,
        "approved_by": approved_by,
        "approvals_missing": max(0, plan.required_approvals - len(approved_by)),
        "already_decided": any(a.reviewer_id == request.user.id for a in approvals),
        "decidable": plan.status == PlanStatus.AWAITING_APPROVAL,
        # Unknown waits for a person (who may be typing a resolution): no auto-refresh.
        "live": plan.status not in TERMINAL and plan.status != PlanStatus.UNKNOWN,
        "attempt": Attempt.objects.filter(plan=plan).first(),
    }
    template = "approvals/plan_detail.html"
    if request.htmx:
        template += "#plan-status"
    return render(request, template, context)


@require_POST
@login_required
def plan_decide(request: HttpRequest, plan_id) -> HttpResponse:
    _require_reviewer(request)
    decision = request.POST.get("decision", "")
    try:
        approval_record(
            plan_id=plan_id,
            reviewer=request.user,
            decision=decision,
            fingerprint_seen=request.POST.get("fingerprint", ""),
            comment=request.POST.get("comment", ""),
        )
    except CountersignError as exc:
        messages.error(request, exc.detail)
        status = exc.status
        if status == 404:
            raise Http404(exc.detail) from None
    else:
        messages.success(request, "Denied." if decision == "deny" else "Approval recorded.")
    return redirect("approvals:plan-detail", plan_id=plan_id)


@require_POST
@login_required
def plan_revoke(request: HttpRequest, plan_id) -> HttpResponse:
    """Withdraw an approval before the worker sends anything."""
    _require_reviewer(request)
    try:
        approval_revoke(plan_id=plan_id, reviewer=request.user)
    except CountersignError as exc:
        if exc.status == 404:
            raise Http404(exc.detail) from None
        messages.error(request, exc.detail)
    else:
        messages.success(request, "Approval revoked; nothing was sent.")
    return redirect("approvals:plan-detail", plan_id=plan_id)


@require_POST
@login_required
def plan_check(request: HttpRequest, plan_id) -> HttpResponse:
    """Check now: run the action's reconciliation (a read) for an unknown outcome."""
    from executors.services import reconcile

    _require_reviewer(request)
    plan = _plan_or_404(plan_id)
    if plan.status not in (PlanStatus.UNKNOWN, PlanStatus.PENDING):
        messages.error(request, "Only an unknown or pending outcome can be checked.")
    else:
        result = reconcile(plan_id=plan.id, actor=f"user:{request.user.get_username()}")
        if result in ("unknown", "following", "still-pending"):
            messages.info(request, "Checked: still not settled. See what was found below.")
        else:
            messages.success(request, f"Checked: {result.replace('_', ' ')}.")
    return redirect("approvals:plan-detail", plan_id=plan_id)


@require_POST
@login_required
def plan_resolve_view(request: HttpRequest, plan_id) -> HttpResponse:
    """A person records what they found for an unknown outcome."""
    from executors.services import plan_resolve

    _require_reviewer(request)
    try:
        plan_resolve(
            plan_id=plan_id,
            reviewer=request.user,
            state=request.POST.get("state", ""),
            note=request.POST.get("note", ""),
        )
    except CountersignError as exc:
        messages.error(request, exc.detail if not exc.errors else exc.errors[0]["message"])
    else:
        messages.success(request, "Resolution recorded.")
    return redirect("approvals:plan-detail", plan_id=plan_id)
