"""Session grants: a reviewer's standing consent for one agent to run a few
low-consequence actions for a bounded time, instead of a decision on every plan.

The security story, in the order it is enforced:

* **Made** (grant_create): by a reviewer, only for actions whose definition allows
  grants (observation or reversible, one approver), that the agent may propose, for at
  most COUNTERSIGN_GRANT_MAX_SECONDS.
* **Used** (grant_match + grant_approve, inside plan_submit's transaction): a covered
  plan's fingerprinted policy says ``"mode": "session_grant", "grant": "<id>"``, so the
  fingerprint binds the grant; an Approval that records the grant approves it at once.
  The cap is counted under a row lock on the grant, so two submissions at the same
  moment cannot both take the last execution.
* **Checked again** (grant_refusal_reason, in the executor's claim): the grant must
  still be active right before anything is sent; revoking it stops every plan the
  worker has not claimed yet.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from actions.lib import dispatch
from actions.lib.actors import grant_actor, user_actor
from actions.lib.audit import audit_record
from actions.lib.canonical import CanonicalJSONError, escape_pointer_token, normalize
from actions.lib.exceptions import InvalidInput, InvalidTransition, NotAllowed, NotFound
from actions.models import Action, Agent
from actions.spec import input_validator_for

from .decisions.requirements import grantor_cannot_decide, reviewer_groups
from .lifecycle import plan_transition
from .models import Approval, Plan, PlanStatus, SessionGrant
from .permissions import can_review

MAX_REASON_CHARS = 2000
MAX_EXECUTIONS_LIMIT = 10_000
GRANT_CLASSES = ("observation", "reversible")
# Stands for an input field a plan does not have (None is a value a field may hold).
_ABSENT = object()


def action_grant_eligible(action: Action) -> bool:
    """May a session grant stand in for per-call consent on this action's plans?

    The definition must allow it (the loader and ActionSpec already refuse it for
    external and irreversible classes); the class and the one-approver rule are checked
    again here so a hand-edited row cannot widen what a grant covers.
    """
    approval = action.spec.approval
    return (
        action.enabled
        and approval.session_grant
        and action.consequence_class in GRANT_CLASSES
        and approval.approvers == 1
    )


def grant_eligible_actions() -> list[Action]:
    return [
        a for a in Action.objects.filter(enabled=True).order_by("name") if action_grant_eligible(a)
    ]


# --- making and revoking ----------------------------------------------------------------


def _check_fixed_values(
    actions: list[Action], fixed_values: Any, errors: list[dict[str, str]]
) -> dict[str, Any]:
    if fixed_values in (None, ""):
        return {}
    if not isinstance(fixed_values, dict):
        errors.append({"pointer": "/fixed_values", "message": _("must be an object")})
        return {}
    try:
        values = normalize(fixed_values)
    except CanonicalJSONError as exc:
        errors.append({"pointer": "/fixed_values" + exc.pointer, "message": exc.message})
        return {}
    for name, value in values.items():
        pointer = f"/fixed_values/{escape_pointer_token(name)}"
        for action in actions:
            schema = action.spec.input_schema
            prop = (schema.get("properties") or {}).get(name)
            if prop is None:
                errors.append(
                    {
                        "pointer": pointer,
                        "message": _("%(action)s has no such input") % {"action": action.name},
                    }
                )
                break
            problem = next(
                iter(
                    # RE2 for patterns and strict formats, like the agent's input.
                    input_validator_for(prop).iter_errors(value)
                ),
                None,
            )
            if problem is not None:
                errors.append({"pointer": pointer, "message": f"{action.name}: {problem.message}"})
                break
    return values


def grant_create(
    *,
    creator,
    agent: Agent,
    action_names: list[str],
    duration_seconds: int,
    max_executions: int | None = None,
    fixed_values: dict[str, Any] | None = None,
    reason: str = "",
) -> SessionGrant:
    """Make a grant, or raise InvalidInput listing every problem (JSON Pointers into
    the form: /actions/0, /duration_seconds, /max_executions, /fixed_values/<field>)."""
    if not can_review(creator):
        raise NotAllowed(_("you are not a reviewer"))
    errors: list[dict[str, str]] = []
    if not agent.is_active or agent.revoked_at is not None:
        errors.append({"pointer": "/agent", "message": _("this agent is not active")})
    names = list(dict.fromkeys(action_names or []))
    if not names:
        errors.append({"pointer": "/actions", "message": _("choose at least one action")})
    found = {a.name: a for a in Action.objects.filter(name__in=names)}
    allowed = set(agent.actions.filter(name__in=names).values_list("name", flat=True))
    actions: list[Action] = []
    for index, name in enumerate(names):
        action = found.get(name)
        pointer = f"/actions/{index}"
        if action is None or not action.enabled:
            errors.append(
                {
                    "pointer": pointer,
                    "message": _("no enabled action named %(name)s") % {"name": name},
                }
            )
        elif not action_grant_eligible(action):
            errors.append(
                {
                    "pointer": pointer,
                    "message": _(
                        "%(name)s (%(cls)s) cannot run under a session grant: each of its "
                        "plans needs a person's decision"
                    )
                    % {"name": name, "cls": action.consequence_class},
                }
            )
        elif name not in allowed:
            errors.append(
                {
                    "pointer": pointer,
                    "message": _("this agent may not propose %(name)s") % {"name": name},
                }
            )
        elif (needs := grantor_cannot_decide(creator, action)) is not None:
            # A grant is its maker's consent: only for what they may decide themselves.
            errors.append(
                {
                    "pointer": pointer,
                    "message": _("you cannot decide every plan of %(name)s: %(needs)s")
                    % {"name": name, "needs": needs},
                }
            )
        else:
            actions.append(action)
    limit = int(settings.COUNTERSIGN_GRANT_MAX_SECONDS)
    if isinstance(duration_seconds, bool) or not isinstance(duration_seconds, int):
        errors.append({"pointer": "/duration_seconds", "message": _("must be a whole number")})
    elif duration_seconds <= 0:
        errors.append({"pointer": "/duration_seconds", "message": _("must be positive")})
    elif duration_seconds > limit:
        errors.append(
            {
                "pointer": "/duration_seconds",
                "message": _("at most %(seconds)s seconds (%(minutes)s minutes)")
                % {"seconds": limit, "minutes": limit // 60},
            }
        )
    if max_executions is not None and (
        isinstance(max_executions, bool)
        or not isinstance(max_executions, int)
        or not 1 <= max_executions <= MAX_EXECUTIONS_LIMIT
    ):
        errors.append(
            {
                "pointer": "/max_executions",
                "message": _("a whole number from 1 to %(max)s, or empty")
                % {"max": MAX_EXECUTIONS_LIMIT},
            }
        )
    values = _check_fixed_values(actions, fixed_values, errors)
    reason = (reason or "").strip()
    if len(reason) > MAX_REASON_CHARS:
        errors.append(
            {
                "pointer": "/reason",
                "message": _("at most %(n)s characters") % {"n": MAX_REASON_CHARS},
            }
        )
    if errors:
        raise InvalidInput(_("the grant cannot be made as asked"), errors=errors)
    now = timezone.now()
    with transaction.atomic():
        grant = SessionGrant.objects.create(
            agent=agent,
            fixed_values=values,
            max_executions=max_executions,
            reason=reason,
            created_by=creator,
            expires_at=now + timedelta(seconds=duration_seconds),
        )
        grant.actions.set(actions)
        audit_record(
            kind="grant.created",
            actor=user_actor(creator),
            data={
                "grant": str(grant.id),
                "agent": agent.name,
                "actions": sorted(a.name for a in actions),
                "expires_at": grant.expires_at.isoformat(),
                "max_executions": max_executions,
                "fixed_values": values,
                "reason": reason,
            },
        )
    return grant


def grant_revoke(*, grant_id, reviewer) -> SessionGrant:
    """End a grant now. Plans it approved that the worker has not claimed yet are
    refused at claim time (see grant_refusal_reason); nothing new is covered."""
    if not can_review(reviewer):
        raise NotAllowed(_("you are not a reviewer"))
    now = timezone.now()
    with transaction.atomic():
        grant = SessionGrant.objects.select_for_update().filter(id=grant_id).first()
        if grant is None:
            raise NotFound(_("no such grant"))
        if grant.revoked_at is not None:
            raise InvalidTransition(_("this grant was already revoked"))
        if grant.expires_at <= now:
            raise InvalidTransition(_("this grant has already expired"))
        grant.revoked_at = now
        grant.revoked_by = reviewer
        grant.save(update_fields=["revoked_at", "revoked_by"])
        audit_record(
            kind="grant.revoked",
            actor=user_actor(reviewer),
            data={"grant": str(grant.id), "agent_id": str(grant.agent_id)},
        )
    return grant


def grant_list(*, now=None, recent_days: int = 7) -> QuerySet[SessionGrant]:
    """Active grants and those that ended in the last ``recent_days``, newest first,
    each with ``uses`` (plans approved under it)."""
    now = now or timezone.now()
    since = now - timedelta(days=recent_days)
    return (
        SessionGrant.objects.filter(
            Q(revoked_at__isnull=True, expires_at__gt=since) | Q(revoked_at__gt=since)
        )
        .select_related("agent", "created_by", "revoked_by")
        .prefetch_related("actions")
        .annotate(uses=Count("approvals"))
        .order_by("-created_at", "-id")
    )


# --- using ------------------------------------------------------------------------------


def grant_match(
    *, agent: Agent, action: Action, values: dict[str, Any], now=None
) -> SessionGrant | None:
    """The active grant covering this proposal, locked, or None.

    Must run inside the transaction that stores the plan and its approval: the grant
    rows stay locked (SELECT ... FOR UPDATE) until it commits, which is what makes the
    cap count exact under concurrent submissions. (SQLite ignores FOR UPDATE; there the
    IMMEDIATE transactions of config/settings.py serialize writers anyway.)
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("grant_match() must run inside the submission's transaction")
    if not action_grant_eligible(action):
        return None
    now = now or timezone.now()
    candidates = (
        SessionGrant.objects.select_for_update(of=("self",))
        .filter(agent=agent, actions=action, revoked_at__isnull=True, expires_at__gt=now)
        # The one ending soonest is spent first: a longer grant outlives it.
        .order_by("expires_at", "id")
    )
    for grant in candidates:
        if any(values.get(k, _ABSENT) != v for k, v in grant.fixed_values.items()):
            continue
        if grant.max_executions is not None:
            used = Approval.objects.filter(grant=grant).count()
            if used >= grant.max_executions:
                continue
        return grant
    return None


def grant_approve(*, plan: Plan, grant: SessionGrant, now=None) -> Plan:
    """Approve a just-stored plan under ``grant`` (same transaction as grant_match).

    The Approval's reviewer is the grant's maker: their standing consent is what
    approves, and the grant is recorded next to it.
    """
    now = now or timezone.now()
    if plan.policy.get("mode") != "session_grant" or plan.policy.get("grant") != str(grant.id):
        raise RuntimeError("the plan's fingerprinted policy does not name this grant")
    ttl = int(plan.policy.get("approval_ttl_seconds", 900))
    Approval.objects.create(
        plan=plan,
        reviewer=grant.created_by,
        decision=Approval.Decision.APPROVE,
        fingerprint=plan.fingerprint,
        comment="",
        expires_at=now + timedelta(seconds=ttl),
        grant=grant,
        # The groups the grant's maker is in, for a plan with decision rules (plan_submit
        # used the grant only if its maker alone meets the requirement).
        groups=reviewer_groups(plan, grant.created_by),
        counted_for=(reviewer_groups(plan, grant.created_by) or [""])[0],
    )
    actor = grant_actor(grant)
    used = Approval.objects.filter(grant=grant).count()
    audit_record(
        kind="approval.granted",
        actor=actor,
        plan=plan,
        data={
            "grant": str(grant.id),
            "granted_by": user_actor(grant.created_by),
            "uses": used,
            "max_executions": grant.max_executions,
        },
    )
    plan_transition(
        plan,
        to=PlanStatus.APPROVED,
        actor=actor,
        event="plan.approved",
        data={"grant": str(grant.id)},
        decided_at=now,
        enqueued_at=now,
    )
    dispatch.on_commit(dispatch.EXECUTE_PLAN, plan.id)
    return plan


def grant_refusal_reason(plan: Plan, now) -> str | None:
    """Why the worker must not send a grant-approved plan now, or None.

    Called at claim time under the plan's row lock. Revocation and expiry take effect
    here, for every plan not yet claimed.
    """
    if plan.required_approvals != 1:
        return "a session grant cannot approve a plan that needs more than one approver"
    grant_id = plan.policy.get("grant")
    grant = (
        SessionGrant.objects.filter(id=grant_id, agent_id=plan.agent_id).first()
        if grant_id
        else None
    )
    if grant is None:
        return "the session grant that approved this plan does not exist"
    if grant.revoked_at is not None:
        return "the session grant that approved this plan was revoked"
    if grant.expires_at <= now:
        return "the session grant that approved this plan has expired"
    if not grant.actions.filter(pk=plan.action_id).exists():
        return "the session grant that approved this plan does not cover its action"
    if not action_grant_eligible(plan.action):
        return "the action no longer allows session grants"
    if not plan.approvals.filter(grant=grant, fingerprint=plan.fingerprint).exists():
        return "no approval under the session grant named in the plan"
    return None
