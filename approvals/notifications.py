"""Telling reviewers that a plan awaits a decision: email and signed webhooks.

Sent by Celery tasks (approvals.tasks) after the plan is committed, never from the
request that submitted it: a slow or failing receiver cannot delay or break a
submission. Each NotificationTarget names a reviewer group and a channel.

Who is told: for a plan under decision rules, only the targets of the groups that can
decide it now (approvals/decisions), never the person it was requested for; for a plan
under its class default, every target, as always. Three events: a plan **awaiting** a
decision (at submission), an **escalation** (the sweeper, once a rule's escalation time
has come: the group it escalates to), and a **break-glass** decision (every group of the
plan, after the fact).

What a message carries: the action, the agent, the target, the consequence class, the
short code and the review URL. Never the agent's reason (untrusted text, and it could
be written to look like an instruction), never input values, never secrets.

Webhook requests are signed like Slack's: ``X-Countersign-Signature: sha256=<hex>``
where the hex is HMAC-SHA256 under the target's secret of
``<X-Countersign-Timestamp>.<raw body>``. A receiver recomputes it, compares in
constant time, and rejects timestamps older than a few minutes (replay).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage, mailers
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from actions.cache import cached
from actions.lib import dispatch

from .models import DecidingGroup, NotificationTarget, Plan, PlanStatus

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Countersign-Signature"
TIMESTAMP_HEADER = "X-Countersign-Timestamp"
DELIVERY_HEADER = "X-Countersign-Delivery"
USER_AGENT = "Countersign-Notifications/1"


class NoticeEvent(StrEnum):
    """Why a plan's groups are told about it (the webhook's ``countersign.event``)."""

    AWAITING = "plan.awaiting_approval"
    ESCALATED = "plan.escalated"
    BREAK_GLASS = "plan.break_glass"


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(
    secret: str, timestamp: str, body: bytes, signature: str, *, tolerance: int = 300, now=None
) -> bool:
    """What a receiver does (and the tests do): recompute, compare, refuse old ones."""
    try:
        age = abs((now if now is not None else time.time()) - int(timestamp))
    except ValueError:
        return False
    return age <= tolerance and hmac.compare_digest(sign(secret, timestamp, body), signature)


def _facts(plan: Plan) -> dict[str, Any]:
    return {
        "plan": str(plan.id),
        "action": plan.action.name,
        "action_title": plan.action.title,
        "agent": plan.agent.name,
        "consequence_class": plan.consequence_class,
        "target": f"{plan.target.get('connector', '')} {plan.target.get('path', '')}".strip(),
        "short_code": plan.short_code,
        "approvals_required": plan.required_approvals,
        "review_url": plan.review_url,
        "expires_at": plan.expires_at.isoformat(),
    }


def _mrkdwn(text: str) -> str:
    """Slack's escaping: the three characters its markup gives meaning to."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_HEADLINES = {
    NoticeEvent.AWAITING: gettext_noop(
        "Plan %(code)s awaits a decision: %(title)s (%(cls)s) by agent %(agent)s"
    ),
    NoticeEvent.ESCALATED: gettext_noop(
        "Plan %(code)s was escalated to you: %(title)s (%(cls)s) by agent %(agent)s"
    ),
    NoticeEvent.BREAK_GLASS: gettext_noop(
        "Plan %(code)s was decided by break-glass: %(title)s (%(cls)s) by agent %(agent)s"
    ),
}
_SUBJECTS = {
    NoticeEvent.AWAITING: gettext_noop("[Countersign] %(title)s awaits a decision (%(code)s)"),
    NoticeEvent.ESCALATED: gettext_noop("[Countersign] Escalated to you: %(title)s (%(code)s)"),
    NoticeEvent.BREAK_GLASS: gettext_noop(
        "[Countersign] Break-glass decision: %(title)s (%(code)s)"
    ),
}
_OPENINGS = {
    NoticeEvent.AWAITING: gettext_noop("A plan awaits a decision."),
    NoticeEvent.ESCALATED: gettext_noop(
        "A plan waited past its escalation time: your group may now decide it."
    ),
    NoticeEvent.BREAK_GLASS: gettext_noop(
        "A superuser decided this plan by break-glass, outside its groups. "
        "The reason is in the audit log."
    ),
}


def webhook_payload(plan: Plan, event: NoticeEvent = NoticeEvent.AWAITING) -> dict[str, Any]:
    """Slack-compatible (``text`` + ``blocks``) with the facts under ``countersign``."""
    facts = _facts(plan)
    text = _(_HEADLINES[event]) % {
        "code": facts["short_code"],
        "title": facts["action_title"],
        "cls": facts["consequence_class"],
        "agent": facts["agent"],
    }
    details = "\n".join(
        [
            f"*{_mrkdwn(facts['action_title'])}* (`{_mrkdwn(facts['action'])}`)",
            _("Class: %(cls)s · Agent: %(agent)s")
            % {"cls": _mrkdwn(facts["consequence_class"]), "agent": _mrkdwn(facts["agent"])},
            _("Target: %(target)s") % {"target": f"`{_mrkdwn(facts['target'])}`"},
            _("Fingerprint: %(code)s") % {"code": f"`{facts['short_code']}`"},
        ]
    )
    return {
        "text": f"{text} — {facts['review_url']}",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": details}},
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"<{facts['review_url']}|{_mrkdwn(_('Review the plan'))}>",
                },
            },
        ],
        "countersign": {"event": str(event), **facts},
    }


def email_message(plan: Plan, event: NoticeEvent = NoticeEvent.AWAITING) -> tuple[str, str]:
    """Subject and plain-text body (no HTML part: nothing in it is rendered)."""
    facts = _facts(plan)
    subject = _(_SUBJECTS[event]) % {
        "title": facts["action_title"],
        "code": facts["short_code"],
    }
    lines = [
        _(_OPENINGS[event]),
        "",
        _("Action: %(title)s (%(name)s)")
        % {"title": facts["action_title"], "name": facts["action"]},
        _("Consequence class: %(cls)s") % {"cls": facts["consequence_class"]},
        _("Agent: %(agent)s") % {"agent": facts["agent"]},
        _("Target: %(target)s") % {"target": facts["target"]},
        _("Fingerprint: %(code)s") % {"code": facts["short_code"]},
        _("Approvals needed: %(n)s") % {"n": facts["approvals_required"]},
        _("Expires at: %(when)s") % {"when": facts["expires_at"]},
        "",
        _("Review it here: %(url)s") % {"url": facts["review_url"]},
    ]
    # Subjects are one line whatever the action's title holds.
    return " ".join(subject.split()), "\n".join(lines) + "\n"


# --- what to send ----------------------------------------------------------------------


def _noticeable(plan_id, event: NoticeEvent) -> Plan | None:
    """The plan, if telling anyone about it still makes sense: awaiting a decision for an
    awaiting or escalated notice (decided, cancelled or gone meanwhile: nobody needs
    telling); any plan for a break-glass notice, which comes after the decision."""
    plan = Plan.objects.select_related("action", "agent").filter(id=plan_id).first()
    if plan is None:
        return None
    if event != NoticeEvent.BREAK_GLASS and plan.status != PlanStatus.AWAITING_APPROVAL:
        return None
    return plan


def notice_groups(plan: Plan, event: NoticeEvent, group: str = "") -> set[str] | None:
    """The groups whose targets hear of ``event`` (None: every target, a plan under its
    class default). Awaiting: the groups that can decide it now. Escalated: the group
    it escalated to. Break-glass: every group of the plan."""
    if event == NoticeEvent.ESCALATED:
        return {group}
    rows = DecidingGroup.objects.filter(plan=plan)
    if event == NoticeEvent.AWAITING:
        rows = rows.filter(eligible_from__lte=timezone.now())
    groups = set(rows.values_list("group", flat=True))
    if not groups and not plan.requirement:
        return None
    return groups


def notifications_plan(
    plan_id, event: NoticeEvent | str = NoticeEvent.AWAITING, group: str = ""
) -> dict[str, Any]:
    """Send the emails for a plan's ``event`` and list the webhooks to call.

    Returns ``{"emailed": n, "webhooks": [target ids]}``; the webhooks are delivered by
    separate tasks so that each one retries on its own.
    """
    event = NoticeEvent(event)
    plan = _noticeable(plan_id, event)
    if plan is None:
        return {"emailed": 0, "webhooks": []}
    groups = notice_groups(plan, event, group)
    targets = NotificationTarget.objects.filter(enabled=True).select_related("group")
    if groups is not None:
        targets = targets.filter(group__name__in=groups)
    targets = list(targets)
    group_ids = [t.group_id for t in targets if t.kind == NotificationTarget.Kind.EMAIL]
    addresses: list[str] = []
    if group_ids:
        people = get_user_model().objects.filter(groups__in=group_ids, is_active=True)
        if plan.requester and event != NoticeEvent.BREAK_GLASS:
            # Never asked to decide their own request.
            people = people.exclude(
                oidc_identity__issuer=plan.requester.get("iss"),
                oidc_identity__subject=plan.requester.get("sub"),
            )
        addresses = sorted(set(people.exclude(email="").values_list("email", flat=True)))
    emailed = 0
    if addresses:
        subject, body = email_message(plan, event)
        # One message per person: reviewers do not see each other's addresses.
        messages = [EmailMessage(subject, body, to=[address]) for address in addresses]
        try:
            emailed = mailers.default.send_messages(messages) or 0
        except Exception:  # noqa: BLE001 - any mail server failure; logged, never raised
            log.warning("could not send notification email for plan %s", plan.id, exc_info=True)
    webhooks = [t.id for t in targets if t.kind == NotificationTarget.Kind.WEBHOOK]
    return {"emailed": emailed, "webhooks": webhooks}


@dataclass
class Delivery:
    outcome: str  # delivered | skipped | failed
    permanent: bool = False  # a failure not worth retrying (4xx, bad URL)
    status: int | None = None


def webhook_url_allowed(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def webhook_deliver(
    *, target_id, plan_id, event: NoticeEvent | str = NoticeEvent.AWAITING
) -> Delivery:
    """POST the signed payload to one webhook target, once. No redirects are followed
    (a redirect could take the request somewhere the admin never configured)."""
    event = NoticeEvent(event)
    target = NotificationTarget.objects.filter(
        id=target_id, enabled=True, kind=NotificationTarget.Kind.WEBHOOK
    ).first()
    plan = _noticeable(plan_id, event)
    if target is None or plan is None:
        return Delivery("skipped")
    if not webhook_url_allowed(target.address):
        log.warning("notification target %s has an unusable URL; not sent", target.id)
        return Delivery("failed", permanent=True)
    payload = webhook_payload(plan, event)
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": USER_AGENT,
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: sign(target.secret, timestamp, body),
        DELIVERY_HEADER: str(uuid.uuid4()),
    }
    timeout = float(settings.COUNTERSIGN_WEBHOOK_TIMEOUT)
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
            response = client.post(target.address, content=body, headers=headers)
    except httpx.HTTPError as exc:
        log.warning("webhook %s for plan %s failed: %s", target.id, plan.id, type(exc).__name__)
        return Delivery("failed")
    status = response.status_code
    if 200 <= status < 300:
        return Delivery("delivered", status=status)
    # 408 and 429 say "later"; a redirect (not followed) or another 4xx will not change
    # by retrying: the target's configuration needs a person.
    permanent = 300 <= status < 500 and status not in (408, 429)
    log.warning("webhook %s for plan %s answered %s", target.id, plan.id, status)
    return Delivery("failed", permanent=permanent, status=status)


def notifications_wanted() -> bool:
    """Is any notification target enabled? With none there is no one to tell, and no
    task is queued at all (remembered per catalog generation, which target edits
    change)."""
    return cached("notify", None, NotificationTarget.objects.filter(enabled=True).exists)


def notify_awaiting(plan_id) -> None:
    """Tell the reviewer groups about this plan once the surrounding transaction commits
    (callers ask ``notifications_wanted()`` first)."""
    dispatch.on_commit(dispatch.NOTIFY_PLAN, plan_id)


def notify_event(plan_id, event: NoticeEvent, group: str = "") -> None:
    """Tell the groups ``event`` concerns (``notice_groups``) once the surrounding
    transaction commits, if any target is enabled. A task of its own name: a worker of
    the release before, which knows only the awaiting notice, never receives it."""
    if notifications_wanted():
        dispatch.on_commit(dispatch.NOTIFY_EVENT, plan_id, str(event), group)
