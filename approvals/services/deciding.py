"""A reviewer's decision on the exact plan they saw: approvals and denials, break-glass,
passkey signatures and the separation of duties."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from actions.cache import snapshot as catalog_snapshot
from actions.fingerprint import plan_fingerprint_matches
from actions.lib import dispatch
from actions.lib.actors import SYSTEM, user_actor
from actions.lib.audit import audit_record
from actions.lib.exceptions import (
    ActionChanged,
    AlreadyDecided,
    FingerprintMismatch,
    InvalidInput,
    InvalidTransition,
    NotAllowed,
    NotFound,
)
from actions.lib.metrics import BREAK_GLASS
from actions.policy.reviewers import requirement_text

from ..decisions.policies import shadow_disagrees
from ..decisions.requester import REQUESTER_REFUSAL, RequesterMayNotApprove, is_requester
from ..decisions.requirements import (
    approval_alone_meets,
    approvals_count,
    approvals_read,
    approvals_standing,
    approvals_standing_meet,
    approvals_void_record,
    decision_refusal,
    plan_policy_requirement,
    reviewer_groups,
)
from ..identity.passkeys import (
    SignatureRefused,
    approval_nonce_take,
    approval_signature_verify,
    plan_needs_signature,
)
from ..lifecycle import plan_expire, plan_transition, row_insert_sql
from ..models import Approval, Plan, PlanStatus
from ..notifications import NoticeEvent, notify_event
from ..permissions import can_review
from ..wakeups import counted_on_commit

ALREADY_DECIDED = "you have already decided on this plan"


def approval_record(
    *,
    plan_id,
    reviewer,
    decision: str,
    fingerprint_seen: str,
    comment: str = "",
    assertion: Any = None,
    nonce: str = "",
    break_glass: bool = False,
    confirmed: Callable[[Plan], None] | None = None,
) -> Plan:
    """Record a reviewer's decision on the exact fingerprint they saw.

    The fingerprint is recomputed from the plan's columns and compared with both the
    stored one and the one posted; any difference means the reviewer did not see this
    plan, and nothing is approved (the refusal itself is audited).

    ``break_glass``: a superuser decides a plan whose groups they are not in, giving the
    reason as ``comment``. Held to everything else a decision is (the fingerprint, the
    floor: never their own request, the registrar never alone on an irreversible plan,
    a passkey signature where signing is on), audited as ``approval.break_glass``,
    counted in /metrics and told to every group of the plan. Its approval fills one
    threshold place of any group (approvals/decisions).

    ``confirmed``: a surface's own check of what the reviewer typed to approve (the
    pages' typed confirmation), run for an approval on the plan as locked, before
    anything else about it is judged; it raises to refuse, and nothing is recorded.
    """
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    if decision not in Approval.Decision.values:
        raise InvalidInput(errors=[{"pointer": "/decision", "message": "approve or deny"}])
    comment = (comment or "")[:2000]
    if break_glass:
        _break_glass_check(plan_id, reviewer, decision, comment)
    approving = decision == Approval.Decision.APPROVE
    # Spent now, whatever happens next: a signing request is good for one attempt.
    issued = approval_nonce_take(nonce) if approving else None
    now = timezone.now()
    # One decision sees the catalog as of one moment: the decision rules, the groups'
    # requirement and the policy set under one read of its generation (actions/cache.py).
    with catalog_snapshot(), transaction.atomic():
        plan = _locked_undecided(plan_id, reviewer, confirmed if approving else None)
        # A refusal is audited and committed with whatever it recorded, then raised.
        failure = _plan_refusal(plan, reviewer, decision, fingerprint_seen, now=now)
        signed: dict | Exception = {}
        if failure is None:
            failure = _reviewer_refusal(plan, reviewer, decision, break_glass, now=now)
        if failure is None and approving:
            signed = _signature_or_refusal(plan, reviewer, assertion, nonce, issued)
            if isinstance(signed, Exception):
                failure = signed
        if failure is None:
            with _once_per_reviewer():
                unwritten = _decision_store(
                    plan,
                    reviewer,
                    decision=decision,
                    comment=comment,
                    break_glass=break_glass,
                    signed=signed,
                    now=now,
                )
                if approving:
                    _approve_if_met(
                        plan,
                        reviewer,
                        comment=comment,
                        break_glass=break_glass,
                        now=now,
                        inserting=unwritten,
                    )
                else:
                    _deny(plan, reviewer, comment=comment, now=now, inserting=unwritten)
    if failure is not None:
        raise failure
    return plan


def _locked_undecided(plan_id, reviewer, confirmed: Callable[[Plan], None] | None = None) -> Plan:
    """The plan, locked until commit; refused unless ``confirmed`` (when given) lets it
    through and it still awaits a decision. Its action's connector is joined too
    (unlocked, as the action and the agent): the decision rules match on the
    connector's name, which read lazily was a query of its own on every decision.

    Whether ``reviewer`` decided it already is read in the same query
    (``reviewer_decided``), judged where it always was (_reviewer_refusal). That read
    is of the moment the query began, before the lock was granted: a decision by the
    same reviewer committed while this one waited is caught by the approval's unique
    constraint instead (_once_per_reviewer), with the same refusal."""
    mine = Approval.objects.filter(plan=OuterRef("pk"), reviewer=reviewer)
    plan = (
        Plan.objects.select_for_update(of=("self",))
        .select_related("action__connector", "agent")
        .annotate(reviewer_decided=Exists(mine))
        .filter(id=plan_id)
        .first()
    )
    if plan is None:
        raise NotFound("no such plan")
    if confirmed is not None:
        confirmed(plan)
    if plan.status != PlanStatus.AWAITING_APPROVAL:
        raise InvalidTransition(f"this plan is {plan.status} and can no longer be decided")
    return plan


def _plan_refusal(plan: Plan, reviewer, decision: str, fingerprint_seen: str, *, now):
    """Why this plan can no longer be decided as seen (audited), or None: it expired,
    the fingerprint differs from the one seen, or (to approve) its action changed."""
    if plan.expires_at <= now:
        plan_expire(plan, actor=SYSTEM, now=now)
        return InvalidTransition("this plan expired before a decision")
    if not plan_fingerprint_matches(plan) or fingerprint_seen != plan.fingerprint:
        audit_record(
            kind="approval.fingerprint_mismatch",
            actor=user_actor(reviewer),
            plan=plan,
            data={"decision": decision, "fingerprint_seen": str(fingerprint_seen)[:64]},
        )
        return FingerprintMismatch(
            "the fingerprint you saw does not match this plan; reload and review again"
        )
    if decision == Approval.Decision.APPROVE and (
        plan.action_version != plan.action.version
        or plan.action_digest != plan.action.digest
        or not plan.action.enabled
        or not plan.action.definition_intact()
    ):
        audit_record(
            kind="approval.action_changed",
            actor=user_actor(reviewer),
            plan=plan,
            data={"plan_version": plan.action_version, "action_version": plan.action.version},
        )
        return ActionChanged("the action changed since this preview; the agent must propose again")
    return None


def _reviewer_refusal(plan: Plan, reviewer, decision: str, break_glass: bool, *, now):
    """Why this reviewer may not make this decision (audited), or None: they decided it
    already, it was requested for them, break-glass is not their way past its groups,
    the decision rules do not let them, or they registered its agent and would approve
    an irreversible plan alone."""
    approving = decision == Approval.Decision.APPROVE
    if plan.reviewer_decided:
        raise AlreadyDecided(ALREADY_DECIDED)
    if approving and is_requester(plan.requester, reviewer):
        audit_record(
            kind="approval.requester_refused",
            actor=user_actor(reviewer),
            plan=plan,
            data={"reason": "the reviewer is the person the plan was requested for"},
        )
        return RequesterMayNotApprove(REQUESTER_REFUSAL)
    if break_glass and (
        not plan_policy_requirement(plan) or reviewer_groups(plan, reviewer, at=now)
    ):
        # Break-glass is the way past a plan's groups, not a second way to decide.
        raise InvalidInput(
            "you may decide this plan without breaking glass",
            errors=[{"pointer": "/break_glass", "message": "decide it the ordinary way"}],
        )
    refusal = decision_refusal(plan, reviewer, approving=approving, break_glass=break_glass)
    if refusal is not None:
        # Who may decide (approvals/decisions): outside the plan's groups, or the
        # rules changed since it was proposed. Audited; nothing is decided.
        error, why, kind = refusal
        audit_record(
            kind=kind,
            actor=user_actor(reviewer),
            plan=plan,
            data={"decision": decision, "reason": why},
        )
        return error(why)
    if approving and _creator_would_approve_alone(plan, reviewer, break_glass=break_glass):
        audit_record(
            kind="approval.separation_of_duties",
            actor=user_actor(reviewer),
            plan=plan,
            data={"agent": plan.agent.name},
        )
        return NotAllowed(
            "you registered this agent: another reviewer must approve its irreversible plans"
        )
    return None


def _decision_store(
    plan: Plan, reviewer, *, decision: str, comment: str, break_glass: bool, signed, now
) -> tuple[str, list] | None:
    """The decision stored, bound to the plan's fingerprint (a break-glass one audited).

    On PostgreSQL the approval's INSERT (Django's own, as Model.save makes it) is made
    in the statement that comes next, one round trip fewer: break-glass's event here;
    otherwise it is returned, for a denial's move (_deny) or an approval's read of the
    approvals that count it (_approve_if_met). Elsewhere the ORM writes it here, and
    None is returned."""
    ttl = plan.policy.get("approval_ttl_seconds", 900)
    approval = Approval(
        plan=plan,
        reviewer=reviewer,
        decision=decision,
        fingerprint=plan.fingerprint,
        comment=comment,
        expires_at=now + timedelta(seconds=ttl),
        groups=[] if break_glass else reviewer_groups(plan, reviewer, at=now),
        break_glass=break_glass,
        **(signed if isinstance(signed, dict) else {}),
    )
    unwritten = row_insert_sql(approval) if connection.vendor == "postgresql" else None
    if unwritten is None:
        approval.save(force_insert=True)
    if break_glass:
        _break_glass_record(plan, reviewer, decision, comment, along=_listed(unwritten))
        unwritten = None
    return unwritten


def _listed(write: tuple[str, list] | None) -> list[tuple[str, list]]:
    return [] if write is None else [write]


@contextmanager
def _once_per_reviewer() -> Iterator[None]:
    """A second approval by the same reviewer, committed while this decision waited for
    the plan's lock, refused as the first check refuses one (AlreadyDecided): the
    transaction, aborted by the constraint, is rolled back with everything it wrote."""
    try:
        yield
    except IntegrityError as exc:
        diag = getattr(exc.__cause__, "diag", None)
        if getattr(diag, "constraint_name", None) == "approval_once_per_reviewer":
            raise AlreadyDecided(ALREADY_DECIDED) from exc
        raise


def _deny(plan: Plan, reviewer, *, comment: str, now, inserting) -> None:
    """The plan denied, the approval's INSERT still to be made (``inserting``) made in
    the move's statement; the lock held since the plan was read means it moves."""
    plan_transition(
        plan,
        to=PlanStatus.DENIED,
        actor=user_actor(reviewer),
        event="plan.denied",
        data={
            "comment": comment,
            **({"shadow_disagreed": True} if shadow_disagrees(plan, "deny") else {}),
        },
        decided_at=now,
        finished_at=now,
        outcome_detail="denied by a reviewer",
        along=_listed(inserting),
    )


def _approve_if_met(
    plan: Plan, reviewer, *, comment: str, break_glass: bool, now, inserting
) -> None:
    """The approvals that still count (the new one's INSERT still to be made,
    ``inserting``, made in their read), audited; the plan approved and handed to a
    worker once they meet what it needs."""
    actor = user_actor(reviewer)
    rows = approvals_read(plan, inserting=inserting)
    # Only approvals whose makers may still give them count: one by someone
    # deactivated, no longer allowed to review or out of the group it was
    # for since is void, and audited as such (approvals/decisions).
    standing = approvals_standing(plan, rows)
    approvals_void_record(plan, rows, standing, actor=SYSTEM)
    data = {
        "approvals": len(rows) - len(standing.void),
        "required": plan.required_approvals,
        "comment": comment,
    }
    if standing.void:
        data["void"] = len(standing.void)
    if plan_policy_requirement(plan):
        assessment = approvals_count(plan, rows, standing)
        met = assessment.met
        data["groups"] = [] if break_glass else reviewer_groups(plan, reviewer, at=now)
        data["requirement_met"] = met
    else:
        met = approvals_standing_meet(plan, rows, standing)
    if break_glass:
        data["break_glass"] = True
    audit_record(kind="approval.recorded", actor=actor, plan=plan, data=data)
    if met:
        # Registered first, so the worker's wake-up leaves at commit ahead of
        # the long-polls' (both run on commit, in this order; neither if the
        # transition below fails and the transaction rolls back).
        dispatch.on_commit(dispatch.EXECUTE_PLAN, plan.id)
        plan_transition(
            plan,
            to=PlanStatus.APPROVED,
            actor=actor,
            event="plan.approved",
            data={"shadow_disagreed": True} if shadow_disagrees(plan, "approve") else None,
            decided_at=now,
            enqueued_at=now,
        )


def _signature_or_refusal(plan: Plan, reviewer, assertion, nonce, issued) -> dict | Exception:
    """For a plan whose approvals must be signed: the verified signature to store with
    the approval, or the refusal (audited); an empty dict when none is needed."""
    if not plan_needs_signature(plan):
        return {}
    try:
        return approval_signature_verify(
            plan=plan, reviewer=reviewer, assertion=assertion, nonce=nonce, issued=issued
        )
    except SignatureRefused as exc:
        audit_record(
            kind="approval.signature_refused",
            actor=user_actor(reviewer),
            plan=plan,
            data={"reason": str(exc)[:200]},
        )
        return exc


def _break_glass_check(plan_id, reviewer, decision: str, reason: str) -> None:
    """A break-glass decision needs a superuser and a typed reason; a refusal is audited
    like the decision would have been."""
    why = None
    if not (reviewer.is_active and reviewer.is_superuser):
        why = NotAllowed("only a superuser may decide by break-glass")
    elif not reason.strip():
        why = InvalidInput(
            "a break-glass decision needs a reason",
            errors=[{"pointer": "/comment", "message": "give the reason for breaking glass"}],
        )
    if why is None:
        return
    plan = Plan.objects.filter(id=plan_id).first()
    if plan is None:
        raise NotFound("no such plan")
    with transaction.atomic():
        audit_record(
            kind="approval.break_glass_refused",
            actor=user_actor(reviewer),
            plan=plan,
            data={"decision": decision, "reason": why.detail},
        )
    raise why


def _break_glass_record(plan: Plan, reviewer, decision: str, reason: str, along) -> None:
    """Audited as such (in the statement of the approval's INSERT, ``along``, on
    PostgreSQL), counted, and told to every group of the plan (on commit)."""
    audit_record(
        kind="approval.break_glass",
        actor=user_actor(reviewer),
        plan=plan,
        data={
            "decision": decision,
            "reason": reason,
            "requirement": requirement_text(plan_policy_requirement(plan)) or "class default",
        },
        along=along,
    )
    counted_on_commit(BREAK_GLASS.labels(decision=decision).inc)
    notify_event(plan.id, NoticeEvent.BREAK_GLASS)


def _creator_would_approve_alone(plan: Plan, reviewer, *, break_glass: bool = False) -> bool:
    """Separation of duties: the person who registered an agent may not be the only one
    approving its irreversible plans (COUNTERSIGN_CREATOR_MAY_APPROVE_IRREVERSIBLE).
    Where two approvers are required the distinct-approver rule already brings in a
    second person, so this bites only when one approval would be enough."""
    if getattr(settings, "COUNTERSIGN_CREATOR_MAY_APPROVE_IRREVERSIBLE", False):
        return False
    if plan.consequence_class != "irreversible" or plan.agent.created_by_id is None:
        return False
    if plan.agent.created_by_id != reviewer.pk:
        return False
    rows = list(
        plan.approvals.filter(
            decision=Approval.Decision.APPROVE, fingerprint=plan.fingerprint
        ).exclude(reviewer=reviewer)
    )
    # Someone else's approval that no longer counts is no one else's approval.
    others = len(rows) - len(approvals_standing(plan, rows).void)
    if plan_policy_requirement(plan):
        # Decision rules: refused when this approval alone would meet the requirement.
        return others == 0 and approval_alone_meets(plan, reviewer, break_glass=break_glass)
    return others + 1 >= plan.required_approvals and others == 0
