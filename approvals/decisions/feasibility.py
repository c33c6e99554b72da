"""Whether anyone can decide a plan about to be stored: the people who may review and
belong to its requirement's groups, the floor that keeps some of them from deciding it
(``plan_floor``), and why no set of them could meet the requirement
(``requirement_feasibility_problem``; docs/security.md, "Who decides")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q

from actions.policy.reviewers import (
    MAX_COMBINATIONS,
    requirement_assess,
    requirement_combinations,
    requirement_groups,
    requirement_text,
)

from ..models import OidcIdentity


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


@dataclass(frozen=True)
class Floor:
    """Who the floor keeps from deciding a plan about to be stored: the person it is on
    behalf of (``requester``: their user's pk, when they have one here) and, for an
    irreversible plan, the person who registered its agent, who never approves it alone
    (``registrar``; None when that rule does not apply)."""

    requester: Any = None
    registrar: Any = None


def plan_floor(*, action, agent=None, requester: dict | None = None) -> Floor:
    """The floor for a plan of ``action`` by ``agent`` on behalf of ``requester``: one
    query for the requester's user, none otherwise."""
    requester_pk = None
    if requester:
        requester_pk = (
            OidcIdentity.objects.filter(issuer=requester.get("iss"), subject=requester.get("sub"))
            .values_list("user_id", flat=True)
            .first()
        )
    registrar = None
    if (
        agent is not None
        and action.consequence_class == "irreversible"
        and not getattr(settings, "COUNTERSIGN_CREATOR_MAY_APPROVE_IRREVERSIBLE", False)
    ):
        registrar = agent.created_by_id
    return Floor(requester=requester_pk, registrar=registrar)


def _members_text(count: int) -> str:
    return f"{count} active member{'s' if count != 1 else ''}"


def requirement_feasibility_problem(
    requirement: dict[str, Any], floor: Floor | None = None
) -> str | None:
    """Why no set of active people could meet ``requirement`` under the floor, or None.

    Every floor rule counts, as it will when people decide: distinct approvers, each
    counted toward one threshold (across an all_of too); never the person the plan is on
    behalf of; never the agent's registrar alone on an irreversible plan; superusers
    only as members of a group; inactive people and people who may not review never.
    Bounded: one query per group of the requirement, with at most as many members of
    each as the requirement has places (and the floor's people) read."""
    floor = floor or Floor()
    if requirement_combinations(requirement) > MAX_COMBINATIONS:
        return (
            "no one can approve this: the decision rules that match it combine into more "
            f"than {MAX_COMBINATIONS} alternatives"
        )
    places = sum(
        max(t["count"] for t in clause["any_of"]) for clause in requirement.get("all_of") or []
    )
    groups = requirement_groups(requirement)
    # Read with the requester, to say so when they are what a group lacks; one more of
    # each group for them and one for the registrar keeps the read enough for a matching.
    everyone = eligible_members(groups, per_group=places + 2)
    members = [(pk, g) for pk, g in everyone if pk != floor.requester]
    # Whenever they decide: an escalation within the plan's time counts (the caller
    # dropped the ones past it).
    if requirement_assess(requirement, [(pk, g, float("inf")) for pk, g in members]).met:
        if floor.registrar is None or [pk for pk, _ in members] != [floor.registrar]:
            # Anyone else who may decide can approve first: the registrar's approval
            # is then not the only one.
            return None
        ((_, theirs),) = members
        return (
            f"no one can approve this: the only active member of {', '.join(sorted(theirs))} "
            "registered the agent, and an irreversible plan needs someone else's approval"
        )
    counts = {g: 0 for g in groups}
    for _pk, member_groups in members:
        for g in member_groups:
            counts[g] += 1
    requester_in = next((g for pk, g in everyone if pk == floor.requester), frozenset())
    for clause in requirement.get("all_of") or []:
        if all(counts[t["group"]] < t["count"] for t in clause["any_of"]):
            t = clause["any_of"][0]
            group, have = t["group"], counts[t["group"]]
            theirs = group in requester_in
            if have == 0 and theirs:
                return (
                    f"no one can approve this: the only active member of {group} is the "
                    "person this plan is on behalf of"
                )
            if have == 0:
                return f"no one can approve this: {group} has no active member"
            besides = " besides the person this plan is on behalf of" if theirs else ""
            return (
                f"no one can approve this: {group} has {_members_text(have)}{besides}, "
                f"and {t['count']} must approve"
            )
    return (
        "no one can approve this: "
        + ", ".join(sorted(counts))
        + " have too few distinct active members for "
        + requirement_text(requirement)
        + " (each person's approval counts toward one threshold only"
        + (", and never the person this plan is on behalf of" if requester_in else "")
        + ")"
    )
