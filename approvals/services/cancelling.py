"""A plan stopped before the worker sends anything: withdrawn by its agent, or its
approval revoked by a reviewer."""

from __future__ import annotations

from django.utils import timezone

from actions.lib.actors import agent_actor, user_actor
from actions.lib.exceptions import InvalidTransition, NotAllowed, NotFound
from actions.models import Agent

from ..lifecycle import plan_transition
from ..models import Plan, PlanStatus
from ..permissions import can_review


def _cancel(plan: Plan, *, actor: str, event: str, who: str) -> Plan:
    """Stop a plan before the worker sends anything.

    Awaiting or approved plans can be cancelled; the worker's claim only takes an
    approved plan, so a cancelled one is never sent. Once the worker has claimed it the
    request may already be on its way: that is refused, and the outcome will say
    whether the request left.
    """
    if plan.status not in (PlanStatus.AWAITING_APPROVAL, PlanStatus.APPROVED):
        if plan.status == PlanStatus.EXECUTING:
            raise InvalidTransition(
                "the worker is already executing this plan; the request may have been sent"
            )
        raise InvalidTransition(f"this plan is {plan.status} and can no longer be cancelled")
    stage = "before a decision" if plan.status == PlanStatus.AWAITING_APPROVAL else "after approval"
    return plan_transition(
        plan,
        to=PlanStatus.CANCELLED,
        actor=actor,
        event=event,
        finished_at=timezone.now(),
        outcome_detail=f"cancelled by {who} {stage}; nothing was sent",
    )


def plan_cancel(*, agent: Agent, plan_id) -> Plan:
    plan = Plan.objects.filter(id=plan_id, agent=agent).select_related("action").first()
    if plan is None:
        raise NotFound("no such plan for this agent")
    return _cancel(plan, actor=agent_actor(agent), event="plan.cancelled", who="the agent")


def approval_revoke(*, plan_id, reviewer) -> Plan:
    """A reviewer withdraws consent before the worker sends anything."""
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    plan = Plan.objects.filter(id=plan_id).select_related("action").first()
    if plan is None:
        raise NotFound("no such plan")
    if plan.status != PlanStatus.APPROVED:
        raise InvalidTransition(f"only an approved plan can be revoked; this one is {plan.status}")
    return _cancel(plan, actor=user_actor(reviewer), event="approval.revoked", who="a reviewer")
