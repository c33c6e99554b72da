"""Revisions: a reviewer previews a plan again or edits it, and the new plan replaces it."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from actions.lib.actors import user_actor
from actions.lib.audit import audit_record
from actions.lib.canonical import normalize
from actions.lib.exceptions import InvalidInput, InvalidTransition, NotAllowed, NotFound

from ..decisions.requirements import decision_refusal
from ..freshness import plan_freshness
from ..lifecycle import plan_transition
from ..models import Plan, PlanStatus
from ..permissions import can_review
from .submission import plan_submit


def _plan_revise(*, original: Plan, reviewer, input: dict[str, Any], why: str) -> Plan:
    """Propose ``input`` again for the original's agent and action, then link it.

    The new plan goes through plan_submit exactly as if the agent had sent it (schema,
    allow-lists, scope rules, a fresh read-only preview and its own fingerprint). The
    preview reads the upstream, so no lock is held while it runs.
    """
    plan, replayed = plan_submit(
        agent=original.agent,
        action_name=original.action.name,
        input=input,
        reason=original.reason,
        # A reviewer is looking at this plan: it goes to a person, not to a grant or a
        # policy's approval.
        use_grants=False,
        # Still for the same person (and so never theirs to approve).
        requester=original.requester,
    )
    if replayed is not None:
        # The agent already proposed exactly this and it awaits a decision: that plan is
        # in the queue, and it is not this plan's revision.
        raise InvalidTransition(f"the same plan already awaits a decision: {plan.id}")
    with transaction.atomic():
        Plan.objects.filter(id=plan.id).update(revision_of=original)
        plan.revision_of = original
        audit_record(
            kind="plan.revised",
            actor=user_actor(reviewer),
            plan=plan,
            data={"revision_of": str(original.id), "why": why},
        )
    return plan


def plan_preview_again(*, plan_id, reviewer) -> Plan:
    """Propose a plan again with the same agent, action, input and reason: a stale plan,
    or one still awaiting a decision whose target changed since its preview (then the
    original is cancelled as superseded, as an edit does). The target is read first,
    outside any transaction: an awaiting plan whose preview still holds stays as it is.
    """
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    original = Plan.objects.select_related("action", "agent").filter(id=plan_id).first()
    if original is None:
        raise NotFound("no such plan")
    if original.status not in (PlanStatus.STALE, PlanStatus.AWAITING_APPROVAL):
        raise InvalidTransition(
            "only a stale plan, or one whose target changed since its preview, can be "
            f"previewed again; this one is {original.status}"
        )
    if original.revisions.exists():
        raise InvalidTransition("this plan was already previewed again")
    _may_revise(original, reviewer)
    if original.status == PlanStatus.STALE:
        return _plan_revise(original=original, reviewer=reviewer, input=original.input, why="stale")
    if not plan_freshness(original).obsolete:
        raise InvalidTransition("the target has not changed since this preview")
    revision = _plan_revise(original=original, reviewer=reviewer, input=original.input, why="moved")
    _supersede(
        original,
        revision,
        actor=user_actor(reviewer),
        detail="superseded: the target changed since the preview and a reviewer previewed it again",
    )
    return revision


def _may_revise(original: Plan, reviewer) -> None:
    """Editing or previewing a plan again replaces it: only someone who may decide it does
    (its groups, under decision rules; a break-glass is a decision, not an edit)."""
    refusal = decision_refusal(original, reviewer, approving=False)
    if refusal is None:
        return
    error, why, kind = refusal
    with transaction.atomic():
        audit_record(
            kind=kind,
            actor=user_actor(reviewer),
            plan=original,
            data={"decision": "revise", "reason": why},
        )
    raise error(why)


def _supersede(original: Plan, revision: Plan, *, actor: str, detail: str) -> None:
    """Cancel ``original`` for ``revision``; if it was decided meanwhile, cancel the
    revision instead, so exactly one of the two stays decidable."""
    now = timezone.now()
    try:
        plan_transition(
            original,
            to=PlanStatus.CANCELLED,
            actor=actor,
            event="plan.superseded",
            data={"superseded_by": str(revision.id)},
            finished_at=now,
            outcome_detail=detail,
        )
    except InvalidTransition:
        Plan.objects.filter(id=revision.id).update(revision_of=None)
        plan_transition(
            revision,
            to=PlanStatus.CANCELLED,
            actor=actor,
            event="plan.cancelled",
            finished_at=now,
            outcome_detail="the original plan was decided before the edit was saved",
        )
        raise InvalidTransition(
            "the plan was decided while you edited it; nothing was replaced"
        ) from None


def plan_edit(*, plan_id, reviewer, input: Any) -> Plan:
    """A reviewer changes the input of an awaiting plan: a new revision replaces it.

    The original is cancelled ("superseded by a reviewer's edit") in the same
    transaction that links the revision; if it was decided meanwhile, the revision is
    cancelled instead, so exactly one of the two stays decidable.
    """
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    original = Plan.objects.select_related("action", "agent").filter(id=plan_id).first()
    if original is None:
        raise NotFound("no such plan")
    if original.status != PlanStatus.AWAITING_APPROVAL:
        raise InvalidTransition(
            f"only a plan awaiting approval can be edited; this one is {original.status}"
        )
    _may_revise(original, reviewer)
    if isinstance(input, dict) and normalize(input) == original.input:
        raise InvalidInput(errors=[{"pointer": "/input", "message": "nothing was changed"}])
    revision = _plan_revise(original=original, reviewer=reviewer, input=input, why="edit")
    _supersede(
        original, revision, actor=user_actor(reviewer), detail="superseded by a reviewer's edit"
    )
    return revision
