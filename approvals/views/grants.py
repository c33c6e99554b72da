"""The session grants page: list, make and revoke grants (reviewers only).

State changes are POST-only forms with CSRF; the page works without JavaScript.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from actions.lib.exceptions import CountersignError
from actions.models import Agent

from ..grants import grant_create, grant_eligible_actions, grant_list, grant_revoke
from ..models import SessionGrant
from .pages import reviewer_page

DEFAULT_MINUTES = 60
# Which form field a service error's JSON Pointer belongs to.
FIELD_OF_POINTER = {
    "agent": "agent",
    "actions": "actions",
    "duration_seconds": "duration",
    "max_executions": "max_executions",
    "fixed_values": "fixed_values",
    "reason": "reason",
}


def _state(grant, now) -> str:
    if grant.revoked_at is not None:
        return "revoked"
    if grant.expires_at <= now:
        return "expired"
    if grant.max_executions is not None and grant.uses >= grant.max_executions:
        return "used_up"
    return "active"


def _context(posted: dict[str, Any] | None = None, errors: dict[str, str] | None = None):
    now = timezone.now()
    grants = list(grant_list(now=now))
    for grant in grants:
        grant.state = _state(grant, now)
        grant.state_label = _state_label(grant.state)
        grant.action_names = sorted(a.name for a in grant.actions.all())
        grant.fixed_text = (
            json.dumps(grant.fixed_values, ensure_ascii=False, sort_keys=True)
            if grant.fixed_values
            else ""
        )
    max_minutes = int(settings.COUNTERSIGN_GRANT_MAX_SECONDS) // 60
    return {
        "grants": grants,
        "active": [g for g in grants if g.state == "active"],
        "ended": [g for g in grants if g.state != "active"],
        "agents": list(Agent.objects.filter(is_active=True, revoked_at__isnull=True)),
        "eligible_actions": grant_eligible_actions(),
        "max_minutes": max_minutes,
        "form": posted
        or {"duration": str(min(DEFAULT_MINUTES, max_minutes)), "actions": [], "agent": ""},
        "errors": errors or {},
    }


def _state_label(state: str) -> str:
    labels = {
        "active": _("active"),
        "revoked": _("revoked"),
        "expired": _("expired"),
        "used_up": _("used up"),
    }
    return labels[state]


@require_GET
@reviewer_page()
def grants(request: HttpRequest) -> HttpResponse:
    return render(request, "approvals/grants.html", _context())


def _whole(raw: str, field: str, errors: dict[str, str]) -> int | None:
    raw = (raw or "").strip()
    if raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        errors[field] = _("Enter a whole number.")
        return None


@require_POST
@reviewer_page()
def grant_create_view(request: HttpRequest) -> HttpResponse:
    post = request.POST
    form = {
        "agent": post.get("agent", ""),
        "actions": post.getlist("actions"),
        "duration": post.get("duration", ""),
        "max_executions": post.get("max_executions", ""),
        "fixed_values": post.get("fixed_values", ""),
        "reason": post.get("reason", ""),
    }
    errors: dict[str, str] = {}
    agent = None
    try:
        agent = Agent.objects.filter(id=uuid.UUID(form["agent"])).first()
    except ValueError:
        pass
    if agent is None:
        errors["agent"] = _("Choose an agent.")
    minutes = _whole(form["duration"], "duration", errors)
    if minutes is None and "duration" not in errors:
        errors["duration"] = _("Enter how long the grant lasts.")
    max_executions = _whole(form["max_executions"], "max_executions", errors)
    fixed_values: Any = None
    if form["fixed_values"].strip():
        try:
            fixed_values = json.loads(form["fixed_values"])
        except ValueError:
            errors["fixed_values"] = _("Not valid JSON: write an object such as %(example)s.") % {
                "example": '{"invoice_id": "inv-2001"}'
            }
    if not errors:
        try:
            grant = grant_create(
                creator=request.user,
                agent=agent,
                action_names=form["actions"],
                duration_seconds=minutes * 60,
                max_executions=max_executions,
                fixed_values=fixed_values,
                reason=form["reason"],
            )
        except CountersignError as exc:
            for error in exc.errors:
                key = error["pointer"].strip("/").split("/")[0]
                errors.setdefault(FIELD_OF_POINTER.get(key, "form"), error["message"])
            if not exc.errors:
                errors["form"] = exc.detail
        else:
            messages.success(
                request,
                # The time in brackets: an English time ends in "a.m."/"p.m.", and a
                # sentence's period after it read "a.m..".
                _("Session grant made for agent %(agent)s (until %(until)s).")
                % {
                    "agent": agent.name,
                    "until": date_format(
                        timezone.localtime(grant.expires_at), "SHORT_DATETIME_FORMAT"
                    ),
                },
            )
            return redirect("approvals:grants")
    return render(request, "approvals/grants.html", _context(form, errors), status=422)


def _to_grants(**_) -> str:
    return reverse("approvals:grants")


# The grant services word their errors in the reader's language already.
@require_POST
@reviewer_page(subject=(SessionGrant, "grant_id"), back=_to_grants, describe=lambda exc: exc.detail)
def grant_revoke_view(request: HttpRequest, grant_id) -> HttpResponse:
    grant_revoke(grant_id=grant_id, reviewer=request.user)
    messages.success(
        request,
        _("Grant revoked: plans it approved that have not started will not be sent."),
    )
    return redirect("approvals:grants")
