"""The decision rules applied to plans (the rules themselves: actions/policy/reviewers.py).

* **At submission** (``plan_requirement``): the requirement the rules in force give the
  plan goes into its fingerprinted policy (``policy["requirement"]``, only when a rule
  matched, so a plan no rule matches is fingerprinted as before) and its
  ``requirement`` column. A requirement no set of active people could meet under the
  floor (``plan_floor``: never the requester, never the registrar alone on an
  irreversible plan, distinct approvers) refuses the plan at once (``NoOneCanDecide``),
  naming the group.
* **At each decision** (``decision_refusal``, ``approvals_count``): only a reviewer in one
  of the requirement's groups decides; the groups they were in are stored on their
  approval, and the plan is approved once distinct approvers fill every clause, each
  approval counting toward one threshold only, and only while its maker may still give
  it (``approvals_standing``: active, a reviewer, still in the group).
* **At the claim** (``claim_refusal``, ``claim_void_problem``): the worker checks the
  stored requirement is the fingerprinted one, that the rules in force still give it,
  and that the approvals, by the groups recorded when they were given and their makers
  still in, meet it.

Being a superuser gives no eligibility: only membership of a named group does (and the
review permission, as for every decision). A superuser outside the groups may decide by
**break-glass** (``approval_record(break_glass=True)``): a typed reason, a passkey
signature where signing is on, audited and notified to every group of the plan; such an
approval fills one threshold place of any group, never more.

Time matters for escalations: a group a rule escalates to may decide once the plan has
waited ``after`` seconds, and its approval counts only if given after that. Each approval
is judged with the seconds between the plan's submission and its own creation, read from
the stored rows (``_approvers``), so the worker's check needs no clock of the web's.

Whether anyone can decide a plan about to be stored, and the floor, are in
feasibility.py; which approvals still count, and for what, in standing.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import Group

from actions.lib.actors import EXECUTOR
from actions.lib.exceptions import DecisionRulesChanged, NoOneCanDecide, NotEligibleToDecide
from actions.policy.reviewers import (
    EVERY_GROUP,
    Assessment,
    plan_subject,
    requirement_assess,
    requirement_escalations,
    requirement_for,
    requirement_groups,
    requirement_merge,
    requirement_summary,
    requirement_text,
    requirement_within,
    rule_groups,
    rules_in_force,
)
from actions.policy.sources import required_groups
from actions.policy.versions import policy_version_current

from ..models import Approval, DecidingGroup, Plan
from .feasibility import plan_floor, requirement_feasibility_problem
from .policies import MODE as POLICY_MODE
from .policies import POLICY_PART, policy_requirement_current
from .standing import (
    Standing,
    _approvers,
    _elapsed,
    approvals_read,
    approvals_standing,
    approvals_standing_meet,
    approvals_void_record,
    plan_policy_requirement,
)


def _requester_groups(requester: dict | None) -> list[str] | None:
    if not requester:
        return None
    return [g for g in requester.get("groups") or [] if isinstance(g, str)]


def requirement_of(
    *, action, values: dict[str, Any], before: Any, requester: dict | None = None
) -> dict[str, Any]:
    """The requirement the rules in force give a plan of ``action`` on ``values``, the
    target as read and the person it is on behalf of (``Plan.requirement``'s form)."""
    rules = rules_in_force()
    if not rules:
        return {}
    subject = plan_subject(
        action=action.name,
        connector=action.connector.name,
        kind=action.kind,
        consequence_class=action.consequence_class,
        before=before,
        input=values,
        requester_groups=_requester_groups(requester),
    )
    return requirement_for(subject, rules)


def plan_requirement_current(plan: Plan) -> dict[str, Any]:
    """What the rules and the policies in force would give ``plan`` now (its action as
    stored, the facts its policies saw)."""
    rules = requirement_of(
        action=plan.action, values=plan.input, before=plan.before, requester=plan.requester
    )
    added = policy_requirement_current(plan)
    return requirement_merge(rules, added) if added else rules


def plan_requirement(
    *,
    action,
    values: dict[str, Any],
    before: Any,
    requester: dict | None = None,
    ttl_seconds: float | None = None,
    added: dict[str, Any] | None = None,
    agent=None,
) -> dict[str, Any]:
    """The requirement for a plan about to be stored, with the clauses its policies
    ``added``; NoOneCanDecide when nobody could ever meet it, the floor counted (the
    person it is on behalf of, and ``agent``'s registrar on an irreversible plan). An
    escalation counts toward that only if it comes before the plan expires
    (``ttl_seconds``)."""
    requirement = requirement_of(action=action, values=values, before=before, requester=requester)
    if added:
        requirement = requirement_merge(requirement, added)
    if requirement:
        reachable = requirement_within(requirement, ttl_seconds) if ttl_seconds else requirement
        floor = plan_floor(action=action, agent=agent, requester=requester)
        problem = requirement_feasibility_problem(reachable, floor)
        if problem:
            raise NoOneCanDecide(problem)
    return requirement


def deciding_groups_record(plan: Plan) -> None:
    """The plan's deciding groups as rows (DecidingGroup), in the plan's transaction."""
    requirement = plan_policy_requirement(plan)
    if not requirement:
        return
    rows = {
        (t["group"], t.get("after", 0))
        for clause in requirement.get("all_of") or []
        for t in clause["any_of"]
    }
    DecidingGroup.objects.bulk_create(
        [
            DecidingGroup(
                plan=plan,
                group=group,
                eligible_from=plan.created_at + timedelta(seconds=after),
                escalation=bool(after),
            )
            for group, after in sorted(rows)
        ]
    )


def decision_groups_named() -> set[str]:
    """The groups plans may need in force: those the decision rules name and those the
    enforced policies' ``@require`` annotations name."""
    named: set[str] = set()
    for rule in rules_in_force():
        named |= rule_groups(rule)
    current = policy_version_current()
    if current is not None:
        named |= required_groups(current.enforce)
    return named


def decision_groups_sync(user, claimed: set[str]) -> list[str]:
    """Make ``user``'s membership of the groups plans may need (the rules' and the
    policies': ``decision_groups_named``) follow the identity provider's groups claim
    (``claimed``): added when named, removed when not. Other groups are left alone.
    Returns those groups ``user`` is now in."""
    named = decision_groups_named()
    if not named:
        return []
    groups = list(Group.objects.filter(name__in=named))
    current = set(user.groups.filter(name__in=named).values_list("name", flat=True))
    user.groups.add(*[g for g in groups if g.name in claimed and g.name not in current])
    user.groups.remove(*[g for g in groups if g.name not in claimed and g.name in current])
    return sorted(g.name for g in groups if g.name in claimed)


# --- deciding ------------------------------------------------------------------------------


def reviewer_groups(plan: Plan, reviewer, *, at: datetime | None = None) -> list[str]:
    """The groups of the plan's requirement ``reviewer`` belongs to and that decide at
    ``at`` (now; an escalation's group only once its time has come), sorted."""
    requirement = plan_policy_requirement(plan)
    if not requirement:
        return []
    groups = requirement_groups(requirement, elapsed=_elapsed(plan, at))
    if not groups:
        return []
    return sorted(reviewer.groups.filter(name__in=groups).values_list("name", flat=True))


def _escalation_note(plan: Plan, requirement: dict[str, Any]) -> str:
    pending = [
        (group, after)
        for group, after in requirement_escalations(requirement)
        if _elapsed(plan) < after
    ]
    if not pending:
        return ""
    return "; " + ", ".join(
        f"{group} may decide from {(plan.created_at + timedelta(seconds=after)):%H:%M} UTC"
        for group, after in pending
    )


def decision_refusal(
    plan: Plan, reviewer, *, approving: bool = True, break_glass: bool = False
) -> tuple[type[Exception], str, str] | None:
    """Why ``reviewer`` may not decide ``plan`` now: (exception, reason, audit kind), or
    None. A plan without a requirement is decided by any reviewer, as before. Only an
    approval needs the rules in force to still give the plan its requirement: a denial
    sends nothing, and is decided by the plan's own groups. A break-glass decision is not
    held to the groups (its own checks are the caller's), only to the rules in force."""
    requirement = plan_policy_requirement(plan)
    current = plan_requirement_current(plan) if approving else requirement
    if current != requirement:
        return (
            DecisionRulesChanged,
            "the decision rules changed since this plan was proposed"
            + (f" (it would now need {requirement_text(current)})" if current else "")
            + "; the agent must propose again",
            "approval.rules_changed",
        )
    if not requirement or break_glass:
        return None
    if not reviewer_groups(plan, reviewer):
        return (
            NotEligibleToDecide,
            "you cannot decide this plan: it needs "
            + requirement_text(requirement)
            + _escalation_note(plan, requirement),
            "approval.not_eligible",
        )
    return None


def approval_alone_meets(plan: Plan, reviewer, *, break_glass: bool = False) -> bool:
    """Would ``reviewer``'s approval, given now with no other, meet the requirement?"""
    requirement = plan_policy_requirement(plan)
    groups = [EVERY_GROUP] if break_glass else reviewer_groups(plan, reviewer)
    return requirement_assess(requirement, [(0, groups, _elapsed(plan))]).met


def approvals_count(plan: Plan, rows=None, standing: Standing | None = None) -> Assessment:
    """Assign the plan's approvals (of its fingerprint; ``rows``, when already read) that
    still count to threshold places, store on each the group it counts for (none for a
    void one), and return the assessment."""
    if rows is None:
        rows = list(
            plan.approvals.filter(decision=Approval.Decision.APPROVE, fingerprint=plan.fingerprint)
        )
    assessment = requirement_assess(plan_policy_requirement(plan), _approvers(plan, rows, standing))
    for row in rows:
        counted = assessment.counted_for.get(row.pk, "")
        if row.counted_for != counted:
            Approval.objects.filter(pk=row.pk).update(counted_for=counted)
            row.counted_for = counted
    return assessment


def plan_requirement_answer(plan: Plan, *, approvals=None) -> dict[str, Any]:
    """The requirement as an agent or a page is told it: rules, thresholds, what is met
    and what is missing, and the escalations with whether their time has come (groups
    and counts, never people). ``approvals``: the plan's, when already read.

    A plan a policy approved is met by that policy (``met_by``: the policies, and the
    rules that let policies decide it: a policy approves a ruled plan only when every
    rule behind its requirement says so, at submission and again at the claim), with
    nothing missing: its record, its answer and its page say one thing, that a policy
    decided, never "approved" beside "not met"."""
    requirement = plan_policy_requirement(plan)
    if not requirement:
        return {}
    if plan.policy.get("mode") == POLICY_MODE:
        answer = requirement_summary(requirement, None, elapsed=_elapsed(plan))
        for clause in answer["all_of"]:
            clause["met"] = True
        part = plan.policy.get(POLICY_PART) or {}
        return {
            **answer,
            "met": True,
            "missing": [],
            "met_by": {
                "by": "policy",
                "policies": list(part.get("decided_by") or []),
                "rules": [r for r in requirement.get("rules") or [] if not r.startswith("policy:")],
            },
        }
    rows = [
        a
        for a in (plan.approvals.all() if approvals is None else approvals)
        if a.decision == Approval.Decision.APPROVE and a.fingerprint == plan.fingerprint
    ]
    assessment = requirement_assess(requirement, _approvers(plan, rows))
    answer = requirement_summary(requirement, assessment, elapsed=_elapsed(plan))
    for clause in answer["all_of"]:
        for threshold in clause["any_of"]:
            if "after" in threshold:
                threshold["eligible_from"] = plan.created_at + timedelta(seconds=threshold["after"])
    return answer


def grant_may_decide(grant, requirement: dict[str, Any]) -> bool:
    """May a session grant's maker, alone, approve a plan with ``requirement``? A grant
    approves as the plan is stored, before any escalation."""
    if not requirement:
        return True
    groups = set(
        grant.created_by.groups.filter(
            name__in=requirement_groups(requirement, elapsed=0)
        ).values_list("name", flat=True)
    )
    return grant.created_by.is_active and requirement_assess(requirement, [(0, groups, 0)]).met


def grantor_cannot_decide(user, action) -> str | None:
    """What ``user`` could not decide alone among ``action``'s plans, or None: each rule
    in force that may match them (by action, connector, kind and class; its comparisons
    and the requester's groups could hold for some plan) must be one ``user`` alone
    meets, with no escalation (a grant approves at once)."""
    for rule in rules_in_force():
        static = {
            **rule,
            "match": {
                k: v
                for k, v in (rule.get("match") or {}).items()
                if k not in ("before", "input", "requester_groups")
            },
        }
        subject = plan_subject(
            action=action.name,
            connector=action.connector.name,
            kind=action.kind,
            consequence_class=action.consequence_class,
            before=None,
            input={},
        )
        requirement = requirement_for(subject, [static])
        if not requirement:
            continue
        groups = set(
            user.groups.filter(name__in=requirement_groups(requirement, elapsed=0)).values_list(
                "name", flat=True
            )
        )
        if not requirement_assess(requirement, [(0, groups, 0)]).met:
            return f"rule {rule['name']} needs {requirement_text(requirement)}"
    return None


# --- the worker's check -------------------------------------------------------------------


def claim_refusal(plan: Plan, approvals: list[Approval] | None = None) -> str | None:
    """Why the worker must not send ``plan`` on its requirement's account, or None.

    ``approvals``: the ones the claim is spending (None: only the requirement itself is
    checked)."""
    requirement = plan_policy_requirement(plan)
    if (plan.requirement or {}) != requirement:
        return "the plan's stored requirement is not the one in its fingerprint"
    current = plan_requirement_current(plan)
    if current != requirement:
        return (
            "the decision rules changed since this plan was approved: it was approved "
            f"under {requirement_text(requirement) or 'the class default'}, and now needs "
            f"{requirement_text(current) or 'the class default'}"
        )
    if approvals is None or not requirement:
        return None
    groups = requirement_groups(requirement)
    for approval in approvals:
        if approval.break_glass:
            problem = break_glass_problem(approval)
            if problem:
                return problem
        elif not approval.groups or not set(approval.groups) <= groups:
            return "an approval does not record a group of this plan's requirement"
    if not requirement_assess(requirement, _approvers(plan, approvals)).met:
        return "the approvals do not meet the plan's requirement: " + requirement_text(requirement)
    return None


def claim_void_problem(plan: Plan, now) -> str | None:
    """For the worker's claim, under the plan's row lock: why the plan must not be sent
    because approvals it was approved with no longer count (their makers deactivated,
    no longer allowed to review, out of the groups they approved for, or, for
    break-glass, no longer superusers; a session grant's maker likewise), or None.

    Each void approval is audited (``approval.voided``). The plan is refused only when
    the approvals that still count do not decide it: the consent it was approved with no
    longer holds, and it is not sent on part of it. It is not put back to wait for
    someone else either: the people who approved it did so as a whole, and the agent
    proposes again if it still wants the change. A plan a policy or ``approval: none``
    approved has no person's approval to judge."""
    if plan.policy.get("mode") in (POLICY_MODE, "none"):
        return None
    rows = approvals_read(plan, usable_at=now)
    standing = approvals_standing(plan, rows)
    if not standing.void:
        return None
    approvals_void_record(plan, rows, standing, actor=EXECUTOR)
    if approvals_standing_meet(plan, rows, standing):
        return None
    reasons = sorted(set(standing.void.values()))
    return (
        "an approval no longer counts (its maker is "
        + "; ".join(reasons)
        + "), and the others do not decide the plan; the agent must propose again"
    )


def break_glass_problem(approval: Approval) -> str | None:
    """Why a break-glass approval cannot count (for the worker), or None: it needs its
    reason, and its reviewer must still be an active superuser."""
    if not (approval.comment or "").strip():
        return "a break-glass approval has no reason"
    reviewer = approval.reviewer
    if not (reviewer.is_active and reviewer.is_superuser):
        return "a break-glass approval is by someone who is no longer an active superuser"
    return None
