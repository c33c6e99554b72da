"""Reads: what an agent may see (the JSON API and the MCP server both use these, so an
agent sees the same actions and plans through either door), and the queries behind the
reviewers' pages (the queue, a plan, the audit log, the dashboard)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from actions.lib.actors import agent_actor
from actions.lib.exceptions import NotFound
from actions.lib.models import AuditEvent
from actions.models import Action, Agent

from .decisions.policies import MODE as POLICY_MODE
from .decisions.policies import POLICY_PART
from .decisions.requirements import approvals_standing, plan_requirement_answer
from .decisions.standing import approvals_standing_prefetch
from .models import Approval, Attempt, DecidingGroup, OidcIdentity, Plan, PlanStatus


def actions_for_agent(agent: Agent) -> QuerySet[Action]:
    """The enabled actions ``agent`` may propose, by name."""
    return agent.actions.filter(enabled=True).order_by("name")


def plan_for_agent(agent: Agent, plan_id: uuid.UUID | str) -> Plan:
    """One of the agent's own plans; another agent's plan is as absent as a missing one.

    Its attempt's state comes in the same query (``attempt_state``, None without one),
    read in the same snapshot as the plan: what the API says of a settled plan's write
    (``request_sent``) costs no second round trip."""
    plan = (
        Plan.objects.select_related("action")
        .annotate(
            attempt_state=Subquery(Attempt.objects.filter(plan=OuterRef("pk")).values("state")[:1])
        )
        .filter(id=plan_id, agent=agent)
        .first()
    )
    if plan is None:
        raise NotFound("no such plan for this agent")
    return plan


# --- who sees what -------------------------------------------------------------------------
#
# A reviewer's own plans come first: the queue opens on "mine to decide", the plans a
# person may decide now (approvals/decisions). Every other plan is visible, read-only, to
# holders of the view permission (``approvals.view_plan``, which the reviewers group has by
# default); without it, a person sees the plans their groups decide, the ones they decided
# and the ones they requested, and no other.

VIEW_PERMISSION = "approvals.view_plan"


def sees_every_plan(user) -> bool:
    return bool(user and user.is_active and user.has_perm(VIEW_PERMISSION))


def _requested_by(user) -> Q | None:
    """Plans proposed on behalf of ``user`` (their sign-in identity), or None."""
    q = None
    for issuer, subject in OidcIdentity.objects.filter(user=user).values_list("issuer", "subject"):
        mine = Q(requester__iss=issuer, requester__sub=subject)
        q = mine if q is None else q | mine
    return q


def _group_names(user) -> list[str]:
    return list(user.groups.values_list("name", flat=True))


def plans_visible(user, plans: QuerySet[Plan] | None = None) -> QuerySet[Plan]:
    """The plans ``user`` may see (all of them with the view permission)."""
    plans = Plan.objects.all() if plans is None else plans
    if sees_every_plan(user):
        return plans
    visible = (
        Q(requirement={})
        | Exists(DecidingGroup.objects.filter(plan=OuterRef("pk"), group__in=_group_names(user)))
        | Exists(Approval.objects.filter(plan=OuterRef("pk"), reviewer=user))
    )
    requested = _requested_by(user)
    if requested is not None:
        visible |= requested
    return plans.filter(visible)


def plans_mine(user, plans: QuerySet[Plan] | None = None, *, now=None) -> QuerySet[Plan]:
    """The plans ``user`` may decide now: awaiting, under the class default or with one of
    their groups eligible by now, not yet decided by them and not requested by them."""
    plans = Plan.objects.all() if plans is None else plans
    now = now or timezone.now()
    eligible = Q(requirement={}) | Exists(
        DecidingGroup.objects.filter(
            plan=OuterRef("pk"), group__in=_group_names(user), eligible_from__lte=now
        )
    )
    plans = plans.filter(eligible, status=PlanStatus.AWAITING_APPROVAL).exclude(
        Exists(Approval.objects.filter(plan=OuterRef("pk"), reviewer=user))
    )
    requested = _requested_by(user)
    if requested is not None:
        plans = plans.filter(Q(requester__isnull=True) | ~requested)
    return plans


def plan_visible_to(user, plan_id) -> bool:
    return sees_every_plan(user) or plans_visible(user, Plan.objects.filter(id=plan_id)).exists()


# --- the review queue ---------------------------------------------------------------------

QUEUE_PAGE_SIZE = 25
# Sort name -> the keyset: (column, descending). Ties broken by id in the same direction.
QUEUE_SORTS = {"newest": ("created_at", True), "urgent": ("expires_at", False)}
EXPIRING_SOON = timedelta(minutes=10)


QUEUE_VIEWS = ("mine", "all")
# The dashboard's link to the plans where the shadow policies and people disagreed.
SHADOW_DISAGREE = "disagree"
QUEUE_MAX_DAYS = 366


def queue_filters(params) -> dict[str, str]:
    sort = params.get("sort", "newest")
    view = params.get("view", "")
    if view not in QUEUE_VIEWS:
        # A filtered link from before the views existed means every plan, as it did.
        view = (
            "all"
            if any(params.get(k) for k in ("status", "cls", "agent", "action", "q", "shadow"))
            else "mine"
        )
    days = params.get("days", "")
    return {
        "view": view,
        # "All plans" means all of them, whatever their status, unless a status is asked
        # for: a default of "awaiting" hid what policies and people had already decided.
        "status": params.get("status", "") or "any",
        "shadow": SHADOW_DISAGREE if params.get("shadow") == SHADOW_DISAGREE else "",
        "days": days if days.isdigit() and 0 < int(days) <= QUEUE_MAX_DAYS else "",
        "cls": params.get("cls", ""),
        "agent": params.get("agent", ""),
        "action": params.get("action", ""),
        "q": params.get("q", "").strip()[:200],
        "sort": sort if sort in QUEUE_SORTS else "newest",
    }


def _cursor_encode(value: datetime, plan_id) -> str:
    return f"{value.isoformat()}~{plan_id}"


def _cursor_decode(raw: str) -> tuple[datetime, str] | None:
    try:
        stamp, plan_id = raw.split("~", 1)
        return datetime.fromisoformat(stamp), str(uuid.UUID(plan_id))
    except ValueError:
        return None


def queue_page(
    filters: dict[str, str], after: str, size: int, *, user=None
) -> tuple[list[Plan], str]:
    """One page of the queue, keyset-paginated on (sort column, id): stable while plans
    arrive or leave, unlike OFFSET. Returns the plans and the cursor of the next page.

    ``filters["view"]``: ``mine`` (the plans ``user`` may decide now) or ``all`` (every
    plan ``user`` may see)."""
    plans = Plan.objects.select_related("action", "agent")
    if user is not None:
        if filters.get("view", "all") == "mine":
            plans = plans_mine(user, plans)
        else:
            plans = plans_visible(user, plans)
    if filters["status"] != "any" and filters.get("view", "all") != "mine":
        plans = plans.filter(status=filters["status"])
    if filters["cls"]:
        plans = plans.filter(consequence_class=filters["cls"])
    if filters["agent"]:
        plans = plans.filter(agent__name=filters["agent"])
    if filters["action"]:
        plans = plans.filter(action__name=filters["action"])
    if filters["q"]:
        plans = plans.filter(
            Q(target__path__icontains=filters["q"]) | Q(action__title__icontains=filters["q"])
        )
    if filters.get("shadow") == SHADOW_DISAGREE:
        plans = plans.filter(_shadow_disagreed())
    if filters.get("days"):
        plans = plans.filter(created_at__gte=timezone.now() - timedelta(days=int(filters["days"])))
    column, descending = QUEUE_SORTS[filters["sort"]]
    cursor = _cursor_decode(after) if after else None
    if cursor is not None:
        value, plan_id = cursor
        op = "lt" if descending else "gt"
        plans = plans.filter(
            Q(**{f"{column}__{op}": value}) | Q(**{column: value, f"id__{op}": plan_id})
        )
    sign = "-" if descending else ""
    rows = list(plans.order_by(f"{sign}{column}", f"{sign}id")[: size + 1])
    next_cursor = ""
    if len(rows) > size:
        rows = rows[:size]
        last = rows[-1]
        next_cursor = _cursor_encode(getattr(last, column), last.id)
    crowded = _crowded_targets(rows)
    _decisions_read(rows)
    now = timezone.now()
    for plan in rows:
        plan.same_target = crowded.get(_target_key(plan.target), 0) - 1
        plan.approvals_needed = max(0, plan.required_approvals - plan.approvals_given)
        plan.expired_now = plan.expires_at <= now
        plan.expiring_soon = (
            plan.status == PlanStatus.AWAITING_APPROVAL and plan.expires_at - now < EXPIRING_SOON
        )
    return rows, next_cursor


def _decisions_read(rows: list[Plan]) -> None:
    """On each plan of the page: ``requirement_answer`` under decision rules (what is met
    and what is missing) and ``decided_by`` (plan_decided_by). One query for the page's
    decisions and their reviewers, whatever the page's size."""
    given: dict[Any, list[Approval]] = {plan.id: [] for plan in rows}
    if rows:
        for approval in (
            Approval.objects.filter(plan__in=rows)
            .select_related("reviewer")
            .order_by("created_at", "id")
        ):
            given[approval.plan_id].append(approval)
    approving = {
        plan_id: [a for a in decisions if a.decision == Approval.Decision.APPROVE]
        for plan_id, decisions in given.items()
    }
    # Whether each approval still counts (its maker active, with the review permission,
    # still in its group): one query for the page.
    approvals_standing_prefetch(rows, [a for theirs in approving.values() for a in theirs])
    for plan in rows:
        plan.requirement_answer = (
            plan_requirement_answer(plan, approvals=approving[plan.id]) if plan.requirement else {}
        )
        # The class default's count: only the approvals that still count.
        standing = approvals_standing(plan, approving[plan.id])
        plan.approvals_given = len(approving[plan.id]) - len(standing.void)
        plan.decided_by = plan_decided_by(plan, given[plan.id])


# Who decided a plan, as the queue says it. The approval's mode is in the fingerprinted
# policy (approvals/services/submission.py); the people are the plan's decisions.
DECIDED_BY_PEOPLE = "people"
DECIDED_BY_POLICY = "policy"
DECIDED_BY_GRANT = "grant"
DECIDED_BY_NO_ONE = "no_one"


def plan_decided_by(plan: Plan, decisions: list[Approval]) -> dict[str, Any] | None:
    """Who decided ``plan``: ``{"by": "policy", "policies": [...]}``, ``{"by": "grant",
    "grant": id}``, ``{"by": "no_one"}`` (a plain read that needs no decision) or
    ``{"by": "people", "people": [(username, break_glass), ...]}`` (who approved it, or
    who denied it); None while nobody has. ``decisions``: the plan's, already read."""
    mode = (plan.policy or {}).get("mode")
    # An approved plan revoked or cancelled afterwards keeps its decision: it says who
    # approved it.
    if plan.decided_at is None:
        return None
    if mode == "session_grant":
        return {"by": DECIDED_BY_GRANT, "grant": str(plan.policy.get("grant", ""))}
    if mode == POLICY_MODE:
        part = plan.policy.get(POLICY_PART) or {}
        return {"by": DECIDED_BY_POLICY, "policies": list(part.get("decided_by") or [])}
    if mode == "none":
        return {"by": DECIDED_BY_NO_ONE}
    wanted = (
        Approval.Decision.DENY if plan.status == PlanStatus.DENIED else Approval.Decision.APPROVE
    )
    people = [(a.reviewer.get_username(), a.break_glass) for a in decisions if a.decision == wanted]
    return {"by": DECIDED_BY_PEOPLE, "people": people} if people else None


def _target_key(target: dict[str, Any]) -> tuple[str, str]:
    return (str(target.get("connector", "")), str(target.get("path", "")))


def _crowded_targets(rows: list[Plan]) -> dict[tuple[str, str], int]:
    """How many plans awaiting a decision touch each target of this page, where more
    than one does: approving one may make the others' previews obsolete. One query,
    whatever the page's size."""
    paths = {plan.target.get("path", "") for plan in rows}
    if not paths:
        return {}
    counts = (
        Plan.objects.filter(status=PlanStatus.AWAITING_APPROVAL, target__path__in=sorted(paths))
        .values("target__connector", "target__path")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    return {(str(c["target__connector"]), str(c["target__path"])): c["n"] for c in counts}


def queue_page_size(raw: str | None) -> int:
    try:
        return min(100, max(1, int(raw or QUEUE_PAGE_SIZE)))
    except ValueError:
        return QUEUE_PAGE_SIZE


# --- a plan -------------------------------------------------------------------------------


def plan_for_review(plan_id) -> Plan:
    """A plan with what its page shows of the action, agent and connector."""
    plan = (
        Plan.objects.select_related("action", "agent", "action__connector")
        .filter(id=plan_id)
        .first()
    )
    if plan is None:
        raise NotFound("no such plan")
    return plan


def plan_attempt(plan: Plan) -> Attempt | None:
    return Attempt.objects.filter(plan=plan).first()


def plan_same_target(plan: Plan, limit: int = 5) -> list[Plan]:
    """Other plans awaiting a decision on this plan's target, newest first."""
    target = plan.target or {}
    return list(
        Plan.objects.select_related("action")
        .filter(
            status=PlanStatus.AWAITING_APPROVAL,
            target__connector=target.get("connector"),
            target__path=target.get("path"),
        )
        .exclude(id=plan.id)
        .order_by("-created_at", "-id")[:limit]
    )


def plan_newest_revision(plan: Plan) -> Plan | None:
    """The newest plan a reviewer made from this one (preview again, or an edit)."""
    return plan.revisions.order_by("-created_at", "-id").first()


# --- the audit log ------------------------------------------------------------------------


def _parse_when(raw: str) -> datetime | None:
    """A datetime-local value (or ISO 8601); naive means the site's time zone."""
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        return None
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return value


def audit_events(params) -> tuple[dict[str, str], QuerySet[AuditEvent]]:
    """The audit log's filters from the query string, and the events they select."""
    filters = {
        name: params.get(name, "").strip()[:200]
        for name in ("plan", "agent", "actor", "kind", "since", "until")
    }
    events = AuditEvent.objects.all()
    if filters["plan"]:
        try:
            events = events.filter(plan_id=uuid.UUID(filters["plan"]))
        except ValueError:
            events = events.none()
    if filters["agent"]:
        # What the agent did, and what happened to its plans.
        events = events.filter(
            Q(actor=agent_actor(Agent(name=filters["agent"])))
            | Q(plan__agent__name=filters["agent"])
        )
    if filters["actor"]:
        events = events.filter(actor=filters["actor"])
    if filters["kind"]:
        events = events.filter(kind=filters["kind"])
    for name, lookup in (("since", "at__gte"), ("until", "at__lt")):
        when = _parse_when(filters[name]) if filters[name] else None
        if when is not None:
            events = events.filter(**{lookup: when})
    return filters, events


def audit_page(events: QuerySet[AuditEvent], *, after: int, size: int):
    """One page of events, newest first, keyset-paginated on the (monotonic) id; and
    whether there is another page after it."""
    if after:
        events = events.filter(id__lt=after)
    # The plan's short code and action name come along in the same query (a join), and
    # only those: a plan's previews are large.
    events = events.select_related("plan__action").only(
        "id",
        "at",
        "kind",
        "actor",
        "fingerprint",
        "data",
        "hash",
        "plan__fingerprint",
        "plan__action__name",
    )
    rows = list(events.order_by("-id")[: size + 1])
    return rows[:size], len(rows) > size


# --- the dashboard ------------------------------------------------------------------------


SIGN_IN_REFUSED = "reviewer.sign_in_refused"


def sign_in_refusals(since: datetime) -> tuple[int, AuditEvent | None]:
    """How many single sign-ons were refused since ``since``, and the latest (its data
    holds the reason and, when the provider said no, its error and description).
    Served by the (kind, id) index."""
    events = AuditEvent.objects.filter(kind=SIGN_IN_REFUSED, at__gte=since)
    latest = events.order_by("-id").only("id", "at", "data").first()
    return (events.count() if latest else 0), latest


# The dashboard's figures are over ``plans``: every plan, or the ones a reader may see
# (plans_visible).


def outcomes_by_class(since: datetime, plans: QuerySet[Plan] | None = None) -> list[dict[str, Any]]:
    """(consequence class, status, how many) of the plans proposed since ``since``."""
    recent = (Plan.objects.all() if plans is None else plans).filter(created_at__gte=since)
    return list(recent.values("consequence_class", "status").annotate(n=Count("id")))


def decision_waits(since: datetime, plans: QuerySet[Plan] | None = None) -> list[float]:
    """Seconds from proposal to a person's decision, sorted. A session grant's approval
    is no person's decision: it would pull the times to 0."""
    decided = (
        (Plan.objects.all() if plans is None else plans)
        .filter(created_at__gte=since, decided_at__isnull=False)
        .exclude(policy__mode="session_grant")
        .only("created_at", "decided_at")
    )
    return sorted((p.decided_at - p.created_at).total_seconds() for p in decided)


def busiest(
    since: datetime, field: str, n: int = 5, plans: QuerySet[Plan] | None = None
) -> list[tuple[str, int]]:
    """The ``n`` agents (``agent__name``) or actions (``action__title``) with the most
    plans since ``since``."""
    recent = (Plan.objects.all() if plans is None else plans).filter(created_at__gte=since)
    return list(recent.values_list(field).annotate(n=Count("id")).order_by("-n", field)[:n])


def _shadow_disagreed() -> Q:
    """Plans where the shadow policies and people disagreed: the shadow would have
    approved what people denied, or refused what people approved."""
    approved_by_people = Q(decided_at__isnull=False) & ~Q(
        status__in=[PlanStatus.DENIED, PlanStatus.EXPIRED, PlanStatus.CANCELLED]
    )
    return Q(shadow__outcome="approve", status=PlanStatus.DENIED) | (
        Q(shadow__outcome="refuse") & approved_by_people
    )


def shadow_disagreements(since: datetime, plans: QuerySet[Plan] | None = None) -> int:
    """Plans proposed since ``since`` where the shadow policies and people disagreed (the
    queue lists them: ``shadow=disagree``)."""
    recent = (Plan.objects.all() if plans is None else plans).filter(created_at__gte=since)
    return recent.filter(_shadow_disagreed()).count()


def awaiting_count(plans: QuerySet[Plan] | None = None) -> int:
    return (
        (Plan.objects.all() if plans is None else plans)
        .filter(status=PlanStatus.AWAITING_APPROVAL)
        .count()
    )
