"""The dashboard: outcomes by class, time to decision, the busiest agents and actions,
whether the workers and the sweeper are alive, and how long audit events wait to be
sealed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import formats, timezone
from django.utils.translation import get_language, gettext, pgettext_lazy
from django.views.decorators.http import require_GET

from actions.lib.checkpoints import SEAL_STALE_SECONDS, audit_unsealed_age
from actions.models import Action, ConsequenceClass
from actions.text import localized

from ..models import PlanStatus
from ..ops.heartbeats import heartbeat_status
from ..selectors import (
    SIGN_IN_REFUSED,
    awaiting_count,
    busiest,
    decision_waits,
    outcomes_by_class,
    plans_mine,
    plans_visible,
    sees_every_plan,
    shadow_disagreements,
    sign_in_refusals,
)
from .pages import reviewer_page

DASHBOARD_DAYS = 14
OUTCOME_GROUPS = {
    "completed": (
        pgettext_lazy("outcome", "Completed"),
        {PlanStatus.COMPLETED, PlanStatus.ALREADY_IN_DESIRED_STATE},
    ),
    "failed": (
        pgettext_lazy("outcome", "Failed"),
        {
            PlanStatus.REJECTED,
            PlanStatus.NOT_APPLIED,
            PlanStatus.STALE,
            PlanStatus.REFUSED,
            PlanStatus.UNKNOWN,
        },
    ),
    "denied": (pgettext_lazy("outcome", "Denied"), {PlanStatus.DENIED}),
    "lapsed": (
        pgettext_lazy("outcome", "Expired or cancelled"),
        {PlanStatus.EXPIRED, PlanStatus.CANCELLED},
    ),
    "open": (pgettext_lazy("outcome", "Open"), PlanStatus.in_flight() | {PlanStatus.PENDING}),
}
# Staff see the single sign-ons refused in this many hours, with the latest reason.
SIGN_IN_REFUSALS_HOURS = 24
BAR_WIDTH = 560  # the SVG's drawing width for the longest bar, in user units
LABEL_CHARS = 30  # what fits left of the bars at 13px (the full label is the tooltip)


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


def _short(label: str, limit: int = LABEL_CHARS) -> str:
    """A label cut at a word boundary, never mid-word, with an ellipsis if cut."""
    label = " ".join(str(label).split())
    if len(label) <= limit:
        return label
    cut = label[: limit - 1].rsplit(" ", 1)[0] if " " in label[: limit - 1] else label[: limit - 1]
    return cut.rstrip(" ,;:-") + "…"


def _bars(counts: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """Horizontal bars scaled to the largest count, laid out for an SVG."""
    top = max((n for _, n in counts), default=0) or 1
    return [
        {
            "label": label,
            "short": _short(label),
            "count": n,
            "y": i * 28,
            "width": round(BAR_WIDTH * n / top),
        }
        for i, (label, n) in enumerate(counts)
    ]


def _titled(counts: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Actions' names as their titles in the reader's language (one query)."""
    titles = dict(
        Action.objects.filter(name__in=[name for name, _ in counts]).values_list(
            "name", "definition__title"
        )
    )
    language = get_language()
    return [(localized(titles.get(name), language) or name, n) for name, n in counts]


@require_GET
@reviewer_page()
def dashboard(request: HttpRequest) -> HttpResponse:
    since = timezone.now() - timedelta(days=DASHBOARD_DAYS)
    # Each person's figures are over the plans they may see (selectors.plans_visible):
    # every plan with the view permission, else the ones their groups decide.
    plans = plans_visible(request.user)
    by_class: dict[str, dict[str, int]] = {
        c: dict.fromkeys(OUTCOME_GROUPS, 0) for c in ConsequenceClass.values
    }
    for row in outcomes_by_class(since, plans):
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
    waits = decision_waits(since, plans)
    top_agents = busiest(since, "agent__name", plans=plans)
    top_actions = _titled(busiest(since, "action__name", plans=plans))
    machinery = heartbeat_status()
    unsealed_age = audit_unsealed_age()
    context = {
        "audit_unsealed": unsealed_age > 0,
        "audit_age": _duration(unsealed_age),
        "audit_stale": unsealed_age > SEAL_STALE_SECONDS,
        "days": DASHBOARD_DAYS,
        "sweeper_age": _duration(machinery["sweeper_age"]),
        "sweeper_ran": machinery["sweeper_age"] is not None,
        "sweeper_stale": machinery["sweeper_stale"],
        "workers_fresh": machinery["workers_fresh"],
        "pending": awaiting_count(plans),
        "shadow_disagreements": shadow_disagreements(since, plans),
        "mine": plans_mine(request.user).count(),
        "sees_every_plan": sees_every_plan(request.user),
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
    if request.user.is_staff:
        context["sign_in"] = _sign_in_refusals()
    return render(request, "approvals/dashboard.html", context)


def _sign_in_refusals() -> dict[str, Any] | None:
    """For staff: the single sign-ons refused lately, and why the last one was. A person
    refused is not signed in, so this is where an administrator reads the provider's
    error (its error_description too, which the refusal page does not show)."""
    since = timezone.now() - timedelta(hours=SIGN_IN_REFUSALS_HOURS)
    count, latest = sign_in_refusals(since)
    if latest is None:
        return None
    data = latest.data if isinstance(latest.data, dict) else {}
    return {
        "count": count,
        "hours": SIGN_IN_REFUSALS_HOURS,
        "at": latest.at,
        "reason": str(data.get("reason", "")),
        "error": str(data.get("provider_error", "")),
        "description": str(data.get("provider_error_description", "")),
        "kind": SIGN_IN_REFUSED,
    }
