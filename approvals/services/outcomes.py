"""Unsettled outcomes: a person asks a worker to look now, or says what they found."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from actions.lib import dispatch
from actions.lib.actors import user_actor
from actions.lib.audit import audit_record
from actions.lib.exceptions import InvalidInput, InvalidTransition, NotAllowed, NotFound

from ..lifecycle import plan_transition
from ..models import Plan, PlanStatus
from ..permissions import can_review
from ..selectors import plan_visible_to


def plan_check_request(*, plan_id, reviewer) -> Plan:
    """ "Check now": a reviewer asks a worker to look at an unsettled outcome at once (the
    status request of accepted work, or the reconciliation of an unknown outcome).

    The look runs in a worker, never in the web process: repeating a keyed request
    needs the write credential, which only workers can open. It is due now in the
    database, so the sweeper publishes it again if this message is lost."""
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    if not plan_visible_to(reviewer, plan_id):
        raise NotFound("no such plan")
    with transaction.atomic():
        plan = Plan.objects.select_for_update(of=("self",)).filter(id=plan_id).first()
        if plan is None:
            raise NotFound("no such plan")
        if plan.status not in PlanStatus.unsettled():
            raise InvalidTransition(
                f"only an unknown or pending outcome can be checked; this one is {plan.status}"
            )
        actor = user_actor(reviewer)
        Plan.objects.filter(pk=plan.pk).update(next_check_at=timezone.now())
        audit_record(kind="reconcile.requested", actor=actor, plan=plan)
        dispatch.on_commit(dispatch.RECONCILE, plan.id, actor)
    return plan


def plan_resolve(*, plan_id, reviewer, state: str, note: str) -> Plan:
    """A person records what they found for an unknown outcome."""
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    allowed = (PlanStatus.COMPLETED, PlanStatus.REJECTED, PlanStatus.ALREADY_IN_DESIRED_STATE)
    if state not in allowed:
        raise InvalidInput(
            errors=[{"pointer": "/state", "message": f"one of {', '.join(allowed)}"}]
        )
    note = (note or "").strip()[:2000]
    if not note:
        raise InvalidInput(errors=[{"pointer": "/note", "message": "say what you found"}])
    if not plan_visible_to(reviewer, plan_id):
        raise NotFound("no such plan")
    with transaction.atomic():
        plan = (
            Plan.objects.select_for_update(of=("self",))
            .select_related("action")
            .filter(id=plan_id)
            .first()
        )
        if plan is None:
            raise NotFound("no such plan")
        if plan.status != PlanStatus.UNKNOWN:
            raise InvalidTransition(
                f"only an unknown outcome can be resolved; this one is {plan.status}"
            )
        plan_transition(
            plan,
            to=state,
            actor=user_actor(reviewer),
            event="reconcile.resolved_by_person",
            data={"note": note},
            finished_at=timezone.now(),
            outcome_detail=f"resolved by a reviewer: {state}",
            next_check_at=None,
        )
    return plan
