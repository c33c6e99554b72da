"""Reviewer pages. Server-rendered; HTMX requests get the same template's fragment."""

from __future__ import annotations

import csv
import json
import uuid
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import markdown
import nh3
from django.contrib import messages
from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import formats, timezone
from django.utils.translation import gettext, gettext_lazy, gettext_noop, pgettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from actions.lib.audit import audit_kinds
from actions.lib.exceptions import CountersignError, NotFound
from actions.lib.models import AuditEvent
from actions.models import Action, Agent, ConsequenceClass
from actions.preview import diff

from .diffs import is_long_text, only_version_moved, word_diff
from .heartbeats import heartbeat_status
from .models import Approval, Attempt, Plan, PlanStatus
from .pages import page_error, plan_page, reviewer_page
from .services import (
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


QUEUE_PAGE_SIZE = 25
# Sort name -> the keyset: (column, descending). Ties broken by id in the same direction.
QUEUE_SORTS = {"newest": ("created_at", True), "urgent": ("expires_at", False)}
EXPIRING_SOON = timedelta(minutes=10)


def _queue_filters(params) -> dict[str, str]:
    sort = params.get("sort", "newest")
    return {
        "status": params.get("status", PlanStatus.AWAITING_APPROVAL),
        "cls": params.get("cls", ""),
        "agent": params.get("agent", ""),
        "action": params.get("action", ""),
        "q": params.get("q", "").strip()[:200],
        "sort": sort if sort in QUEUE_SORTS else "newest",
    }


def _cursor_encode(value: datetime, plan_id) -> str:
    return f"{value.isoformat()}~{plan_id}"


def _cursor_decode(raw: str) -> tuple[datetime, str] | None:
    try:
        stamp, plan_id = raw.split("~", 1)
        return datetime.fromisoformat(stamp), str(uuid.UUID(plan_id))
    except ValueError:
        return None


def _queue_page(filters: dict[str, str], after: str, size: int) -> tuple[list[Plan], str]:
    """One page of the queue, keyset-paginated on (sort column, id): stable while plans
    arrive or leave, unlike OFFSET. Returns the plans and the cursor of the next page."""
    # A correlated count, not a JOIN + GROUP BY: it runs for the page's rows only, so the
    # "all" view of a long history reads one index range instead of every plan.
    given = (
        Approval.objects.filter(plan=OuterRef("pk"), decision=Approval.Decision.APPROVE)
        .order_by()
        .values("plan")
        .annotate(n=Count("id"))
        .values("n")
    )
    plans = Plan.objects.select_related("action", "agent").annotate(
        approvals_given=Coalesce(Subquery(given), 0)
    )
    if filters["status"] != "any":
        plans = plans.filter(status=filters["status"])
    if filters["cls"]:
        plans = plans.filter(consequence_class=filters["cls"])
    if filters["agent"]:
        plans = plans.filter(agent__name=filters["agent"])
    if filters["action"]:
        plans = plans.filter(action__name=filters["action"])
    if filters["q"]:
        plans = plans.filter(
            Q(target__path__icontains=filters["q"]) | Q(action__title__icontains=filters["q"])
        )
    column, descending = QUEUE_SORTS[filters["sort"]]
    cursor = _cursor_decode(after) if after else None
    if cursor is not None:
        value, plan_id = cursor
        op = "lt" if descending else "gt"
        plans = plans.filter(
            Q(**{f"{column}__{op}": value}) | Q(**{column: value, f"id__{op}": plan_id})
        )
    sign = "-" if descending else ""
    rows = list(plans.order_by(f"{sign}{column}", f"{sign}id")[: size + 1])
    next_cursor = ""
    if len(rows) > size:
        rows = rows[:size]
        last = rows[-1]
        next_cursor = _cursor_encode(getattr(last, column), last.id)
    now = timezone.now()
    for plan in rows:
        plan.approvals_needed = max(0, plan.required_approvals - plan.approvals_given)
        plan.expired_now = plan.expires_at <= now
        plan.expiring_soon = (
            plan.status == PlanStatus.AWAITING_APPROVAL and plan.expires_at - now < EXPIRING_SOON
        )
    return rows, next_cursor


def _page_size(raw: str | None) -> int:
    try:
        return min(100, max(1, int(raw or QUEUE_PAGE_SIZE)))
    except ValueError:
        return QUEUE_PAGE_SIZE


@require_GET
@reviewer_page()
@vary_on_headers("HX-Request")
def queue(request: HttpRequest) -> HttpResponse:
    filters = _queue_filters(request.GET)
    size = _page_size(request.GET.get("per_page"))
    after = request.GET.get("after", "")
    plans, next_cursor = _queue_page(filters, after, size)
    kept = {k: v for k, v in filters.items() if v}
    if "per_page" in request.GET:
        kept["per_page"] = str(size)
    context = {
        "plans": plans,
        "filters": filters,
        "paged": bool(after),
        "per_page": kept.get("per_page", ""),
        "first_url": "?" + urlencode(kept),
        "next_url": "?" + urlencode({**kept, "after": next_cursor}) if next_cursor else "",
        "statuses": PlanStatus.choices,
        "classes": ConsequenceClass.choices,
        "agents": Agent.objects.order_by("name").values_list("name", flat=True),
        "actions": Action.objects.order_by("name").values_list("name", "title"),
    }
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
    plan = _plan_or_404(plan_id)
    approvals = list(plan.approvals.select_related("reviewer"))
    approved_by = [a for a in approvals if a.decision == "approve"]
    superseded_by = plan.revisions.order_by("-created_at", "-id").first()
    awaiting = plan.status == PlanStatus.AWAITING_APPROVAL
    # The sweeper moves it to expired within a period; until then it only looks awaiting.
    expired = awaiting and plan.expires_at <= timezone.now()
    attempt = Attempt.objects.filter(plan=plan).first()
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
    plan = _plan_or_404(plan_id)
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


# --- the audit log ---------------------------------------------------------------------

AUDIT_PAGE_SIZE = 50
AUDIT_EXPORT_FIELDS = ["id", "at", "kind", "actor", "plan", "fingerprint", "data", "hash"]


def _parse_when(raw: str) -> datetime | None:
    """A datetime-local value (or ISO 8601); naive means the site's time zone."""
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        return None
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return value


def _audit_filters(params) -> tuple[dict[str, str], Any]:
    filters = {
        name: params.get(name, "").strip()[:200]
        for name in ("plan", "agent", "actor", "kind", "since", "until")
    }
    events = AuditEvent.objects.all()
    if filters["plan"]:
        try:
            events = events.filter(plan_id=uuid.UUID(filters["plan"]))
        except ValueError:
            events = events.none()
    if filters["agent"]:
        # What the agent did, and what happened to its plans.
        events = events.filter(
            Q(actor=f"agent:{filters['agent']}") | Q(plan__agent__name=filters["agent"])
        )
    if filters["actor"]:
        events = events.filter(actor=filters["actor"])
    if filters["kind"]:
        events = events.filter(kind=filters["kind"])
    for name, lookup in (("since", "at__gte"), ("until", "at__lt")):
        when = _parse_when(filters[name]) if filters[name] else None
        if when is not None:
            events = events.filter(**{lookup: when})
    return filters, events


@require_GET
@reviewer_page()
def audit_log(request: HttpRequest) -> HttpResponse:
    """Every event, newest first, keyset-paginated on the (monotonic) id."""
    filters, events = _audit_filters(request.GET)
    try:
        after = int(request.GET.get("after", "") or 0)
    except ValueError:
        after = 0
    if after:
        events = events.filter(id__lt=after)
    rows = list(events.order_by("-id")[: AUDIT_PAGE_SIZE + 1])
    kept = {k: v for k, v in filters.items() if v}
    next_url = ""
    if len(rows) > AUDIT_PAGE_SIZE:
        rows = rows[:AUDIT_PAGE_SIZE]
        next_url = "?" + urlencode({**kept, "after": rows[-1].id})
    query = urlencode(kept)
    context = {
        "events": rows,
        "filters": filters,
        "paged": bool(after),
        "first_url": "?" + query,
        "next_url": next_url,
        "query": query,
        "kinds": audit_kinds(),
        "agents": Agent.objects.order_by("name").values_list("name", flat=True),
    }
    return render(request, "approvals/audit.html", context)


def _export_row(event: AuditEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "at": event.at.isoformat(),
        "kind": event.kind,
        "actor": event.actor,
        "plan": str(event.plan_id) if event.plan_id else "",
        "fingerprint": event.fingerprint,
        "data": event.data,
        "hash": event.hash,
    }


def _csv_cell(value: Any) -> str:
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = value
    # A spreadsheet would run a cell starting like a formula; agents write some of this text.
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        text = "'" + text
    return text


@require_GET
@reviewer_page()
def audit_export(request: HttpRequest, fmt: str) -> HttpResponse:
    """The filtered events, oldest first, streamed: CSV or JSON lines."""
    if fmt not in ("csv", "jsonl"):
        raise Http404("csv or jsonl")
    _, events = _audit_filters(request.GET)
    events = events.order_by("id").iterator(chunk_size=1000)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if fmt == "csv":

        class Echo:
            def write(self, value: str) -> str:
                return value

        writer = csv.writer(Echo())

        def rows():
            yield writer.writerow(AUDIT_EXPORT_FIELDS)
            for event in events:
                row = _export_row(event)
                yield writer.writerow([_csv_cell(row[f]) for f in AUDIT_EXPORT_FIELDS])

        response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
        extension = "csv"
    else:

        def lines():
            for event in events:
                yield json.dumps(_export_row(event), ensure_ascii=False, sort_keys=True) + "\n"

        response = StreamingHttpResponse(lines(), content_type="application/x-ndjson")
        extension = "jsonl"
    filename = f"countersign-audit-{stamp}.{extension}"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


# --- the dashboard -----------------------------------------------------------------------

DASHBOARD_DAYS = 14
OUTCOME_GROUPS = {
    "completed": (pgettext_lazy("outcome", "Completed"), {"completed", "already_in_desired_state"}),
    "failed": (pgettext_lazy("outcome", "Failed"), {"rejected", "stale", "refused", "unknown"}),
    "denied": (pgettext_lazy("outcome", "Denied"), {"denied"}),
    "lapsed": (pgettext_lazy("outcome", "Expired or cancelled"), {"expired", "cancelled"}),
    "open": (
        pgettext_lazy("outcome", "Open"),
        {"awaiting_approval", "approved", "executing", "pending"},
    ),
}
BAR_WIDTH = 600  # the SVG's drawing width for the longest bar, in user units


def _percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile."""
    if not sorted_values:
        return None
    rank = max(1, int(-(-fraction * len(sorted_values) // 1)))
    return sorted_values[rank - 1]


def _duration(seconds: float | None) -> str:
    """Seconds as the reviewer reads them: "90 s", "12 min", "2.5 h" ("2,5 h" in pt-BR)."""
    if seconds is None:
        return "—"
    seconds = int(round(seconds))
    if seconds < 120:
        return gettext("%(n)s s") % {"n": seconds}
    if seconds < 7200:
        return gettext("%(n)s min") % {"n": seconds // 60}
    return gettext("%(n)s h") % {"n": formats.number_format(seconds / 3600, 1)}


def _bars(counts: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """Horizontal bars scaled to the largest count, laid out for an SVG."""
    top = max((n for _, n in counts), default=0) or 1
    return [
        {"label": label, "count": n, "y": i * 28, "width": round(BAR_WIDTH * n / top)}
        for i, (label, n) in enumerate(counts)
    ]


@require_GET
@reviewer_page()
def dashboard(request: HttpRequest) -> HttpResponse:
    since = timezone.now() - timedelta(days=DASHBOARD_DAYS)
    recent = Plan.objects.filter(created_at__gte=since)
    by_class: dict[str, dict[str, int]] = {
        c: dict.fromkeys(OUTCOME_GROUPS, 0) for c in ConsequenceClass.values
    }
    for row in recent.values("consequence_class", "status").annotate(n=Count("id")):
        for group, (_, statuses) in OUTCOME_GROUPS.items():
            if row["status"] in statuses and row["consequence_class"] in by_class:
                by_class[row["consequence_class"]][group] += row["n"]
    top = max((sum(g.values()) for g in by_class.values()), default=0) or 1
    class_rows = []
    for i, (value, label) in enumerate(ConsequenceClass.choices):
        x = 0
        segments = []
        for group, (group_label, _) in OUTCOME_GROUPS.items():
            n = by_class[value][group]
            width = round(BAR_WIDTH * n / top)
            if n:
                segments.append(
                    {"group": group, "label": group_label, "n": n, "x": x, "width": width}
                )
            x += width
        class_rows.append(
            {
                "value": value,
                "label": label,
                "y": i * 28,
                "segments": segments,
                "total": sum(by_class[value].values()),
                "cells": [by_class[value][g] for g in OUTCOME_GROUPS],
            }
        )
    waits = sorted(
        (p.decided_at - p.created_at).total_seconds()
        for p in recent.filter(decided_at__isnull=False)
        # A session grant's approval is no person's decision: it would pull the times to 0.
        .exclude(policy__mode="session_grant")
        .only("created_at", "decided_at")
    )
    top_agents = list(
        recent.values_list("agent__name").annotate(n=Count("id")).order_by("-n", "agent__name")[:5]
    )
    top_actions = list(
        recent.values_list("action__title")
        .annotate(n=Count("id"))
        .order_by("-n", "action__title")[:5]
    )
    machinery = heartbeat_status()
    context = {
        "days": DASHBOARD_DAYS,
        "sweeper_age": _duration(machinery["sweeper_age"]),
        "sweeper_ran": machinery["sweeper_age"] is not None,
        "sweeper_stale": machinery["sweeper_stale"],
        "workers_fresh": machinery["workers_fresh"],
        "pending": Plan.objects.filter(status=PlanStatus.AWAITING_APPROVAL).count(),
        "total": sum(r["total"] for r in class_rows),
        "class_rows": class_rows,
        "class_height": len(class_rows) * 28,
        "groups": [(g, label) for g, (label, _) in OUTCOME_GROUPS.items()],
        "decided": len(waits),
        "p50": _duration(_percentile(waits, 0.5)),
        "p90": _duration(_percentile(waits, 0.9)),
        "agents": _bars(top_agents),
        "agents_height": max(1, len(top_agents)) * 28,
        "actions": _bars(top_actions),
        "actions_height": max(1, len(top_actions)) * 28,
    }
    return render(request, "approvals/dashboard.html", context)
