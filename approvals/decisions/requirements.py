"""The decision rules applied to plans (the rules themselves: actions/policy/reviewers.py).

* **At submission** (``plan_requirement``): the requirement the rules in force give the
  plan goes into its fingerprinted policy (``policy["requirement"]``, only when a rule
  matched, so a plan no rule matches is fingerprinted as before) and its
  ``requirement`` column. A threshold no active person can fill refuses the plan at once
  (``NoOneCanDecide``), naming the group.
* **At each decision** (``decision_refusal``, ``approvals_count``): only a reviewer in one
  of the requirement's groups decides; the groups they were in are stored on their
  approval, and the plan is approved once distinct approvers fill every clause, each
  approval counting toward one threshold only.
* **At the claim** (``claim_refusal``): the worker checks the stored requirement is the
  fingerprinted one, that the rules in force still give it, and that the approvals, by
  the groups recorded when they were given, meet it.

Being a superuser gives no eligibility: only membership of a named group does (and the
review permission, as for every decision).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db.models import Q

from actions.lib.exceptions import DecisionRulesChanged, NoOneCanDecide, NotEligibleToDecide
from actions.policy.reviewers import (
    MAX_COMBINATIONS,
    Assessment,
    plan_subject,
    requirement_assess,
    requirement_combinations,
    requirement_for,
    requirement_groups,
    requirement_summary,
    requirement_text,
    rules_in_force,
)

from ..models import Approval, Plan


def plan_policy_requirement(plan: Plan) -> dict[str, Any]:
    """The requirement that binds ``plan``: the fingerprinted one."""
    return plan.policy.get("requirement") or {}


def requirement_of(*, action, values: dict[str, Any], before: Any) -> dict[str, Any]:
    """The requirement the rules in force give a plan of ``action`` on ``values`` and
    the target as read."""
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
    )
    return requirement_for(subject, rules)


def plan_requirement_current(plan: Plan) -> dict[str, Any]:
    """What the rules in force would give ``plan`` now (its action as stored)."""
    return requirement_of(action=plan.action, values=plan.input, before=plan.before)


def plan_requirement(*, action, values: dict[str, Any], before: Any) -> dict[str, Any]:
    """The requirement for a plan about to be stored; NoOneCanDecide when nobody could
    ever meet it."""
    requirement = requirement_of(action=action, values=values, before=before)
    if requirement:
        problem = requirement_feasibility_problem(requirement)
        if problem:
            raise NoOneCanDecide(problem)
    return requirement


def _review_permission() -> Permission:
    return Permission.objects.get(content_type__app_label="approvals", codename="review_plan")


def eligible_members(groups: set[str], *, per_group: int) -> list[tuple[Any, frozenset[str]]]:
    """Active people who may review and belong to ``groups``: (pk, their groups among
    ``groups``), at most ``per_group`` of each group (enough to decide any
    requirement with that many places: a matching never needs more of one group)."""
    users = get_user_model()._default_manager
    permission = _review_permission()
    reviewers = users.filter(
        Q(is_superuser=True) | Q(user_permissions=permission) | Q(groups__permissions=permission)
    ).values("pk")
    members: dict[Any, set[str]] = {}
    for name in sorted(groups):
        pks = (
            users.filter(is_active=True, groups__name=name, pk__in=reviewers)
            .order_by("pk")
            .values_list("pk", flat=True)[:per_group]
        )
        for pk in pks:
            members.setdefault(pk, set()).add(name)
    return [(pk, frozenset(g)) for pk, g in members.items()]


def requirement_feasibility_problem(requirement: dict[str, Any]) -> str | None:
    """Why no set of active people could meet ``requirement``, or None."""
    if requirement_combinations(requirement) > MAX_COMBINATIONS:
        return (
            "no one can approve this: the decision rules that match it combine into more "
            f"than {MAX_COMBINATIONS} alternatives"
        )
    places = sum(
        max(t["count"] for t in clause["any_of"]) for clause in requirement.get("all_of") or []
    )
    members = eligible_members(requirement_groups(requirement), per_group=places)
    if requirement_assess(requirement, members).met:
        return None
    counts = {g: 0 for g in requirement_groups(requirement)}
    for _pk, groups in members:
        for g in groups:
            counts[g] += 1
    for clause in requirement.get("all_of") or []:
        if all(counts[t["group"]] < t["count"] for t in clause["any_of"]):
            t = clause["any_of"][0]
            have = counts[t["group"]]
            if have == 0:
                return f"no one can approve this: {t['group']} has no active member"
            return (
                f"no one can approve this: {t['group']} has {have} active member"
                f"{'s' if have != 1 else ''}, and {t['count']} must approve"
            )
    return (
        "no one can approve this: "
        + ", ".join(sorted(counts))
        + " have too few distinct active members for "
        + requirement_text(requirement)
    )


def decision_groups_sync(user, claimed: set[str]) -> list[str]:
    """Make ``user``'s membership of the groups the decision rules in force name follow
    the identity provider's groups claim (``claimed``): added when named, removed when
    not. Other groups are left alone. Returns the rule groups ``user`` is now in."""
    named: set[str] = set()
    for rule in rules_in_force():
        named |= {t["group"] for t in (rule.get("any_of") or []) + (rule.get("all_of") or [])}
    if not named:
        return []
    groups = list(Group.objects.filter(name__in=named))
    current = set(user.groups.filter(name__in=named).values_list("name", flat=True))
    user.groups.add(*[g for g in groups if g.name in claimed and g.name not in current])
    user.groups.remove(*[g for g in groups if g.name not in claimed and g.name in current])
    return sorted(g.name for g in groups if g.name in claimed)


# --- deciding ------------------------------------------------------------------------------


def reviewer_groups(plan: Plan, reviewer) -> list[str]:
    """The groups of ``plan``'s requirement ``reviewer`` belongs to, sorted."""
    groups = requirement_groups(plan_policy_requirement(plan))
    if not groups:
        return []
    return sorted(reviewer.groups.filter(name__in=groups).values_list("name", flat=True))


def decision_refusal(
    plan: Plan, reviewer, *, approving: bool = True
) -> tuple[type[Exception], str, str] | None:
    """Why ``reviewer`` may not decide ``plan`` now: (exception, reason, audit kind), or
    None. A plan without a requirement is decided by any reviewer, as before. Only an
    approval needs the rules in force to still give the plan its requirement: a denial
    sends nothing, and is decided by the plan's own groups."""
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
    if not requirement:
        return None
    if not reviewer_groups(plan, reviewer):
        return (
            NotEligibleToDecide,
            "you cannot decide this plan: it needs " + requirement_text(requirement),
            "approval.not_eligible",
        )
    return None


def approval_alone_meets(plan: Plan, reviewer) -> bool:
    """Would ``reviewer``'s approval, with no other, meet the plan's requirement?"""
    requirement = plan_policy_requirement(plan)
    return requirement_assess(requirement, [(0, reviewer_groups(plan, reviewer))]).met


def approvals_count(plan: Plan) -> Assessment:
    """Assign the plan's approvals (of its fingerprint) to threshold places, store on each
    the group it counts for, and return the assessment."""
    rows = list(
        plan.approvals.filter(decision=Approval.Decision.APPROVE, fingerprint=plan.fingerprint)
    )
    assessment = requirement_assess(
        plan_policy_requirement(plan), [(row.pk, row.groups) for row in rows]
    )
    for row in rows:
        counted = assessment.counted_for.get(row.pk, "")
        if row.counted_for != counted:
            Approval.objects.filter(pk=row.pk).update(counted_for=counted)
            row.counted_for = counted
    return assessment


def plan_requirement_answer(plan: Plan) -> dict[str, Any]:
    """The requirement as an agent or a page is told it: rules, thresholds, what is met
    and what is missing (groups and counts, never people)."""
    requirement = plan_policy_requirement(plan)
    if not requirement:
        return {}
    rows = [
        (a.pk, a.groups)
        for a in plan.approvals.all()
        if a.decision == Approval.Decision.APPROVE and a.fingerprint == plan.fingerprint
    ]
    return requirement_summary(requirement, requirement_assess(requirement, rows))


def grant_may_decide(grant, requirement: dict[str, Any]) -> bool:
    """May a session grant's maker, alone, approve a plan with ``requirement``?"""
    if not requirement:
        return True
    groups = set(
        grant.created_by.groups.filter(name__in=requirement_groups(requirement)).values_list(
            "name", flat=True
        )
    )
    return grant.created_by.is_active and requirement_assess(requirement, [(0, groups)]).met


def grantor_cannot_decide(user, action) -> str | None:
    """What ``user`` could not decide alone among ``action``'s plans, or None: each rule
    in force that may match them (by action, connector, kind and class; its comparisons
    could hold for some plan) must be one ``user`` alone meets."""
    for rule in rules_in_force():
        static = {
            **rule,
            "match": {
                k: v for k, v in (rule.get("match") or {}).items() if k not in ("before", "input")
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
            user.groups.filter(name__in=requirement_groups(requirement)).values_list(
                "name", flat=True
            )
        )
        if not requirement_assess(requirement, [(0, groups)]).met:
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
        if not approval.groups or not set(approval.groups) <= groups:
            return "an approval does not record a group of this plan's requirement"
    if not requirement_assess(requirement, [(a.pk, a.groups) for a in approvals]).met:
        return "the approvals do not meet the plan's requirement: " + requirement_text(requirement)
    return None
