"""Which approvals still count, and for what: each judged anew from the people as they
are now (see below); approvals/decisions/requirements.py counts them against the plan's
requirement. requirements.py imports this module, never the other way round, so the
fingerprinted requirement (``plan_policy_requirement``) and the time since submission
(``_elapsed``) are read here, where both can import them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Exists, FilteredRelation, OuterRef, Q
from django.utils import timezone

from actions.lib.actors import user_actor
from actions.lib.audit import audit_record
from actions.lib.models import AuditEvent
from actions.policy.reviewers import (
    EVERY_GROUP,
    requirement_assess,
    requirement_groups,
)

from ..models import Approval, Plan
from .standing_query import REVIEW_APP_LABEL, REVIEW_CODENAME, approvals_with_makers


def plan_policy_requirement(plan: Plan) -> dict[str, Any]:
    """The requirement that binds ``plan``: the fingerprinted one."""
    return plan.policy.get("requirement") or {}


def _elapsed(plan: Plan, at: datetime | None = None) -> float:
    """Seconds between the plan's submission and ``at`` (now)."""
    return ((at or timezone.now()) - plan.created_at).total_seconds()


# --- approvals that still count ------------------------------------------------------------
#
# Membership is authority: an approval counts only while the person who gave it is still
# active, may still review, and (under decision rules) is still a member of a group it
# was recorded for; a break-glass approval only while its maker is still an active
# superuser. It is judged anew wherever approvals are counted (each decision, the page,
# the API's requirement, the worker's claim), from the people as they are then, so a
# deactivation or a removal from a group, however it was made (the admin, the identity
# provider's groups claim at sign-in, a bare UPDATE), takes effect at the next count.

VOID_DEACTIVATED = "deactivated"
VOID_NOT_REVIEWER = "no longer allowed to review plans"
VOID_NOT_SUPERUSER = "no longer a superuser (a break-glass approval needs one)"


@dataclass
class Standing:
    """What some approvals still count for: ``groups``, for each approval that counts
    (by pk), the groups it may fill now (``EVERY_GROUP`` for break-glass; empty for a
    plan without a requirement); ``void``, for each that no longer counts, why."""

    groups: dict[Any, list[str]] = field(default_factory=dict)
    void: dict[Any, str] = field(default_factory=dict)


def _may_review(user_ref: OuterRef) -> tuple[Exists, Exists]:
    """Whether the user ``user_ref`` names holds the review permission, directly and
    through a group (a superuser holds every one: see ``_facts``)."""
    users = get_user_model()
    direct = users.user_permissions.through.objects.filter(
        **{users.user_permissions.field.m2m_field_name(): user_ref},
        permission__codename=REVIEW_CODENAME,
        permission__content_type__app_label=REVIEW_APP_LABEL,
    )
    via_group = Group.objects.filter(
        user=user_ref,
        permissions__codename=REVIEW_CODENAME,
        permissions__content_type__app_label=REVIEW_APP_LABEL,
    )
    return Exists(direct), Exists(via_group)


def _facts(active: bool, superuser: bool, direct: bool, via_group: bool) -> dict[str, Any]:
    # As ``has_perm`` answers for an active user: a superuser holds every permission.
    return {
        "active": active,
        "superuser": superuser,
        "reviews": superuser or direct or via_group,
        "groups": set(),
    }


def _reviewer_facts(pks: set[Any], names: set[str]) -> dict[Any, dict[str, Any]]:
    """For each user in ``pks``: active, superuser, may review, and which of ``names``
    they are in now. One query, whatever the number of people or groups."""
    direct, via_group = _may_review(OuterRef("pk"))
    rows = (
        get_user_model()
        ._default_manager.filter(pk__in=pks)
        .annotate(direct=direct, via_group=via_group)
    )
    columns = ["pk", "is_active", "is_superuser", "direct", "via_group"]
    if names:
        rows = rows.annotate(named=FilteredRelation("groups", condition=Q(groups__name__in=names)))
        columns.append("named__name")
    facts: dict[Any, dict[str, Any]] = {}
    for row in rows.values_list(*columns):
        entry = facts.setdefault(row[0], _facts(*row[1:5]))
        if names and row[5]:
            entry["groups"].add(row[5])
    return facts


def approvals_read(
    plan: Plan, *, usable_at: datetime | None = None, inserting: tuple[str, list] | None = None
) -> list[Approval]:
    """The plan's approvals of its fingerprint (with ``usable_at``: only those not yet
    used and not expired then), oldest first, with their reviewers and what
    approvals_standing needs to know of them, in one query whose SQL is built once
    (approvals/decisions/standing_query.py): compiling it with the ORM on every decision
    and claim cost more than running it. ``inserting`` (PostgreSQL): the INSERT of a new
    approval of the plan, made in that query and read with the others."""
    requirement = plan_policy_requirement(plan)
    names = requirement_groups(requirement) if requirement else set()
    read = []
    for approval, (active, superuser, direct, via_group, groups) in approvals_with_makers(
        plan, names, usable_at, inserting
    ):
        approval.reviewer_facts = _facts(active, superuser, direct, via_group)
        approval.reviewer_facts["groups"] = groups
        read.append(approval)
    return read


def _standing_of(approval: Approval, facts: dict[str, Any] | None, names: set[str] | None):
    """(groups it counts for now, why it is void): one of the two is None."""
    if facts is None or not facts["active"]:
        return None, VOID_DEACTIVATED
    if approval.break_glass:
        if not facts["superuser"]:
            return None, VOID_NOT_SUPERUSER
        return [EVERY_GROUP], None
    if not facts["reviews"]:
        return None, VOID_NOT_REVIEWER
    if names is None:
        return [], None
    # A group recorded outside the requirement is no membership lapsing: such a row was
    # not written by the decide service, and the claim refuses it as it is.
    recorded = set(approval.groups or []) & names
    kept = sorted(recorded & facts["groups"])
    if recorded and not kept:
        return None, "no longer a member of " + ", ".join(sorted(recorded))
    return kept, None


def approvals_standing(plan: Plan, approvals) -> Standing:
    """Which of ``approvals`` (the plan's) still count, and for what; see above. One
    query, none without approvals."""
    approvals = list(approvals)
    standing = Standing()
    if not approvals:
        return standing
    requirement = plan_policy_requirement(plan)
    names = requirement_groups(requirement) if requirement else None
    if all(hasattr(a, "reviewer_facts") for a in approvals):
        # Read with them (approvals_read), or for a whole page (approvals_standing_prefetch).
        facts = {a.reviewer_id: a.reviewer_facts for a in approvals}
    else:
        facts = _reviewer_facts({a.reviewer_id for a in approvals}, names or set())
    for approval in approvals:
        groups, why = _standing_of(approval, facts.get(approval.reviewer_id), names)
        if why is None:
            standing.groups[approval.pk] = groups
        else:
            standing.void[approval.pk] = why
    return standing


def approvals_standing_prefetch(plans, approvals) -> None:
    """Read what approvals_standing needs for the ``approvals`` of several ``plans`` (a
    page of the queue) in one query, kept on each approval."""
    approvals = list(approvals)
    if not approvals:
        return
    names: set[str] = set()
    for plan in plans:
        names |= requirement_groups(plan_policy_requirement(plan))
    facts = _reviewer_facts({a.reviewer_id for a in approvals}, names)
    for approval in approvals:
        approval.reviewer_facts = facts.get(approval.reviewer_id)


def approvals_void_record(plan: Plan, approvals, standing: Standing, *, actor: str) -> None:
    """Audit each approval found void (``approval.voided``: whose, and why), once per
    approval: the ones already recorded are left out (one more query, only when some
    approval is void)."""
    if not standing.void:
        return
    seen = {
        str(value)
        for value in AuditEvent.objects.filter(plan_id=plan.id, kind="approval.voided").values_list(
            "data__approval", flat=True
        )
    }
    for approval in approvals:
        why = standing.void.get(approval.pk)
        if why is None or str(approval.pk) in seen:
            continue
        audit_record(
            kind="approval.voided",
            actor=actor,
            plan=plan,
            data={
                "approval": str(approval.pk),
                "reviewer": user_actor(approval.reviewer),
                "reason": why,
                **({"break_glass": True} if approval.break_glass else {}),
                **({"grant": str(approval.grant_id)} if approval.grant_id else {}),
            },
        )


def approvals_standing_meet(plan: Plan, approvals, standing: Standing) -> bool:
    """Do the approvals that still count decide the plan: its requirement, or the class
    default's number of distinct approvers?"""
    counting = [a for a in approvals if a.pk not in standing.void]
    requirement = plan_policy_requirement(plan)
    if requirement:
        return requirement_assess(requirement, _approvers(plan, counting, standing)).met
    return len({a.reviewer_id for a in counting}) >= plan.required_approvals


def _approvers(
    plan: Plan, approvals, standing: Standing | None = None
) -> list[tuple[Any, list[str], float]]:
    """The approvals that still count (``standing``: read when not given), as
    requirement_assess takes them: key, the groups recorded when they were given that
    their maker is still in (every group for a break-glass approval), and when, from
    the plan's submission."""
    approvals = list(approvals)
    if standing is None:
        standing = approvals_standing(plan, approvals)
    return [
        (
            a.pk,
            standing.groups[a.pk],
            _elapsed(plan, a.created_at) if a.created_at else None,
        )
        for a in approvals
        if a.pk in standing.groups
    ]
