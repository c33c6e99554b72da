"""A draft policy set replayed over the stored plans, and compared with what happened
(``manage.py policy_backtest``, the admin's backtest page; docs/policy.md, Backtesting).

Each plan of the window is put to the draft as its policies saw it at submission: its
input, the target as read (``before``), ``after`` and the changes, its agent (as it is
now: name, registrar, attributes) and the person it was for. The time and the agent's
rate are the ones recorded in the plan's policy part when it has one; a plan stored
before any policy was in force has none, so its time is its ``created_at`` and its rate
is counted here, in the same pass, from the plans before it (``RateWindows``).

The report opens with what the draft changes against the set in force: the policies it
adds, removes and changes, by id, in each part it gives (``policy_set_changes``). Then
what it loosens, each a list with links:

* plans the draft would **approve with no person** that went to people (any status: the
  policies then sent them to review, or there were none) — a security lead reads these
  first;
* submissions the policies in force **refused** then (``RefusedSubmission``, recorded at
  submission: approvals/decisions/refusals.py) that the draft would let through, to
  review or to an automatic yes, with the forbids that refused them then;

then where it disagrees with people:

* plans the draft would **approve** that people said no to, or that went wrong: denied;
  cancelled by a reviewer (an approval revoked, or the plan replaced by a reviewer's
  edit or by a fresh preview because its target moved); or ended ``stale``,
  ``refused``, ``unknown``, ``rejected`` or ``not_applied``. Expired plans do not count
  (nobody looked at them: no one said yes or no) nor do plans the agent cancelled; the
  totals count both;
* plans the draft would **refuse** that a person approved (themselves, or by their
  session grant) and that ended ``completed`` or ``already_in_desired_state``;
* **requirement changes**: plans the draft sends to people with a different
  requirement from the one stored, its ``@require`` clauses taking the place of those
  the policies of the time added (``policy:<id>``), beside the decision rules' own;

then the totals (plans read by status, by who approved them, by what the draft says,
and the two crossed), and the policies that failed to evaluate, with how many plans.

History is read in pages, keyset-paginated on (``created_at``, ``id``) over the index
that serves it, ``PAGE_SIZE`` plans at a time (then the refused submissions of the
window, the same way), and evaluated a page at a time with ``policy_evaluate_batch``.
Nothing grows with the history's length: the totals are counters, each list keeps its
``MAX_LISTED`` most recent plans, and the rate windows hold one day of plans, at most
``RATE_CAP`` per agent and action (docs/policy.md says so). Refused submissions are
put to the draft with the time and rate they recorded, and never count in a plan's
rate (the submission counts stored plans only).
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import time
from array import array
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from actions.lib import dispatch
from actions.lib.audit import audit_record
from actions.lib.models import AuditEvent
from actions.models import Action, Agent
from actions.policy.drafts import draft_compile, policy_set_changes, stored_actions
from actions.policy.engine import (
    APPROVE,
    REFUSE,
    REVIEW,
    CompiledPolicies,
    PlanFacts,
    PolicyResult,
    policy_evaluate_batch,
)
from actions.policy.reviewers import (
    requirement_for_rule,
    requirement_merge,
    requirement_text,
    rules_in_force,
    rules_keeping,
)
from actions.policy.sources import ENFORCE

from ..models import Plan, PlanStatus, PolicyBacktest, RefusedSubmission
from .policies import POLICY_PART, RATE_CAP

log = logging.getLogger(__name__)

PAGE_SIZE = 1000
MAX_PAGE_SIZE = 5000
MAX_LISTED = 200  # plans kept in each list of a report: the most recent
PROGRESS_PAGES = 20  # how often a run says how far it got
HOUR_US = 3600 * 1_000_000
DAY_US = 24 * HOUR_US
# A run whose worker stopped saying how far it got: a redelivered message takes it over.
STALLED_AFTER = timedelta(minutes=10)

# The ends that count against a draft's approval: the plan went wrong after a yes.
GONE_WRONG = frozenset(
    {
        PlanStatus.STALE,
        PlanStatus.REFUSED,
        PlanStatus.UNKNOWN,
        PlanStatus.REJECTED,
        PlanStatus.NOT_APPLIED,
    }
)
# The ends that count against a draft's refusal: a person said yes and it was done.
DONE_WELL = frozenset({PlanStatus.COMPLETED, PlanStatus.ALREADY_IN_DESIRED_STATE})
# Every status a plan reaches only after something approved it.
APPROVED_STATES = frozenset(
    {
        PlanStatus.APPROVED,
        PlanStatus.EXECUTING,
        PlanStatus.PENDING,
        *GONE_WRONG,
        *DONE_WELL,
    }
)
# A reviewer ended the plan: withdrew an approval, or replaced the plan by an edit or a
# fresh preview (the audit trail's kinds; the agent's own cancel is plan.cancelled).
REVIEWER_CANCELS = ("approval.revoked", "plan.superseded")

FIELDS = (
    "id",
    "created_at",
    "decided_at",
    "status",
    "action_id",
    "agent_id",
    "input",
    "target",
    "before",
    "after",
    "changes",
    "requester",
    "policy",
    "revision_of_id",
)


# What is read of a refused submission (approvals/decisions/refusals.py).
REFUSED_FIELDS = (
    "id",
    "created_at",
    "action_id",
    "agent_id",
    "signed_approval",
    "input",
    "target",
    "before",
    "after",
    "changes",
    "requester",
    "policies",
    "refusal",
    "set_version",
    "evaluated_at",
    "rate_hour",
    "rate_day",
)
# A refused submission's details in a report: its values cut to this many characters,
# and this many of its changes (the report stays bounded whatever was refused).
DETAIL_CHARS = 200
DETAIL_CHANGES = 10


class BacktestRefused(ValueError):
    """A window or a page size that cannot be used (the message says why)."""


# --- the window ------------------------------------------------------------------------------

_AGO = re.compile(r"(\d{1,6})\s*([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def backtest_moment(text: str, *, now: datetime) -> datetime:
    """``30d``, ``12h``, ``90m``, ``2w`` (that long before ``now``), a date
    (``2026-11-01``: its midnight in the site's time zone) or a date and time with its
    offset (``2026-11-01T08:00:00+00:00``). BacktestRefused otherwise."""
    text = (text or "").strip()
    found = _AGO.fullmatch(text)
    if found:
        return now - timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=timezone.get_current_timezone())
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BacktestRefused(
            f"{text!r}: give a duration before now (30d, 12h, 90m, 2w), a date (2026-11-01) "
            "or a date and time with its offset (2026-11-01T08:00:00+00:00)"
        ) from None
    if moment.tzinfo is None:
        raise BacktestRefused(f"{text!r}: give the offset too (+00:00, Z)")
    return moment


def backtest_window(since: str, until: str = "", *, now: datetime | None = None):
    """(since, until) from their texts; ``until`` defaults to now."""
    now = now or timezone.now()
    start = backtest_moment(since, now=now)
    end = backtest_moment(until, now=now) if until else now
    if start >= end:
        raise BacktestRefused("the window is empty: since must come before until")
    return start, end


# --- the agent's rate, counted from history -------------------------------------------------


class _Window:
    """One agent's plans of one action in the last day: their times (µs), oldest first,
    in a flat array (8 bytes each) read from ``head`` on."""

    __slots__ = ("head", "times")

    def __init__(self) -> None:
        self.times = array("q")
        self.head = 0

    def count(self, at: int) -> tuple[int, int]:
        """(hour, day): plans at or after ``at`` − 1 h (1 day) and strictly before ``at``,
        as the submission counts them (decisions/policies.py: agent_rate)."""
        times, head = self.times, self.head
        end = bisect.bisect_left(times, at, head)
        hour = end - bisect.bisect_left(times, at - HOUR_US, head, end)
        day = end - bisect.bisect_left(times, at - DAY_US, head, end)
        return hour, min(day, RATE_CAP)

    def add(self, at: int) -> None:
        times = self.times
        times.append(at)
        # Forget what fell out of the day, and keep the newest RATE_CAP at most.
        head = bisect.bisect_left(times, at - DAY_US, self.head)
        head = max(head, len(times) - RATE_CAP)
        if head > 4096 and head * 2 > len(times):
            del times[:head]
            head = 0
        self.head = head

    @property
    def newest(self) -> int:
        return self.times[-1] if len(self.times) > self.head else -(2**62)

    def __len__(self) -> int:
        return len(self.times) - self.head


class RateWindows:
    """The rate each plan would have been counted with at submission, for plans that
    recorded none: per (agent, action), a sliding window of one day over the plans read
    so far (in time order). Memory: 8 bytes per plan of the last day, at most RATE_CAP
    per agent and action; an agent and action with no plan in the last day is dropped."""

    def __init__(self) -> None:
        self.windows: OrderedDict[tuple[Any, Any], _Window] = OrderedDict()

    def count(self, key, at: int) -> tuple[int, int]:
        window = self.windows.get(key)
        return window.count(at) if window is not None else (0, 0)

    def add(self, key, at: int) -> None:
        window = self.windows.get(key)
        if window is None:
            window = self.windows[key] = _Window()
        else:
            self.windows.move_to_end(key)
        window.add(at)

    def forget_before(self, at: int) -> None:
        """Drop the windows whose newest plan is more than a day before ``at`` (the
        least recently used come first)."""
        while self.windows:
            key, window = next(iter(self.windows.items()))
            if window.newest >= at - DAY_US:
                return
            del self.windows[key]

    @property
    def held(self) -> int:
        return sum(len(w) for w in self.windows.values())


def _us(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


# --- reading history -------------------------------------------------------------------------


def _pages(
    fields, *, start: datetime, until: datetime, size: int, model=Plan
) -> Iterator[list[dict]]:
    """Plans (or ``model``'s rows) created in [start, until), oldest first, ``size`` at a
    time: keyset pages on (created_at, id), each one index range (plan_created,
    refused_created), whatever the table's size."""
    last: tuple[datetime, Any] | None = None
    while True:
        rows = model.objects.filter(created_at__lt=until)
        if last is None:
            rows = rows.filter(created_at__gte=start)
        else:
            rows = rows.filter(created_at__gte=last[0]).filter(
                Q(created_at__gt=last[0]) | Q(created_at=last[0], id__gt=last[1])
            )
        page = list(rows.order_by("created_at", "id").values(*fields)[:size])
        if not page:
            return
        yield page
        if len(page) < size:
            return
        last = (page[-1]["created_at"], page[-1]["id"])


# --- the comparison ---------------------------------------------------------------------------


def _approved_by(row: dict) -> str:
    """Who approved the plan: ``people`` (per call, break-glass included), ``grant`` (a
    person's session grant), ``policy`` (the set in force then), ``no one`` (a plain read
    that needs no decision); "" when nothing approved it."""
    status = row["status"]
    if status not in APPROVED_STATES and not (
        status == PlanStatus.CANCELLED and row["decided_at"] is not None
    ):
        return ""
    mode = (row["policy"] or {}).get("mode")
    return {"policy": "policy", "session_grant": "grant", "none": "no one"}.get(mode, "people")


def _clause_key(clause: Mapping[str, Any]) -> str:
    # A clause is a small record of strings and counts, already in a canonical order
    # (requirement_from_clauses): sorted-key JSON names it, for a fraction of a digest.
    return json.dumps(clause, sort_keys=True, separators=(",", ":"))


def _clause_keys(requirement: Mapping[str, Any]) -> set[str]:
    return {_clause_key(c) for c in requirement.get("all_of") or []}


class _Requirements:
    """What a plan's requirement would be under the draft: the stored one without the
    clauses the policies of the time added (``policy:<id>``, recorded in the plan's policy
    part), with the draft's instead. A clause both a decision rule and a policy asked
    for is kept once in the stored requirement; it stays if a rule of the stored one
    (as in force now) asks for it."""

    MEMO = 4096  # requirements repeat across plans: the last few thousand answers kept

    def __init__(self) -> None:
        self.rules = {rule["name"]: rule for rule in rules_in_force()}
        self.rule_clauses: dict[str, set[str]] = {}
        self.memo: dict[str, dict[str, Any]] = {}
        # By the rules behind a requirement: few sets of names, however many plans.
        self.owners: dict[tuple[str, ...], bool] = {}

    def _of_rule(self, name: str) -> set[str]:
        if name not in self.rule_clauses:
            rule = self.rules.get(name)
            definition = {k: v for k, v in (rule or {}).items() if k != "name"}
            self.rule_clauses[name] = (
                _clause_keys(requirement_for_rule(name, definition)) if rule else set()
            )
        return self.rule_clauses[name]

    def owned(self, requirement: Mapping[str, Any]) -> bool:
        """Whether a decision rule in force keeps plans with this requirement for its
        groups (no ``policies_may_approve``): a draft's @approve would not take them."""
        names = tuple(sorted(requirement.get("rules") or ()))
        if not names:
            return False
        if names not in self.owners:
            keeping = rules_keeping({"rules": list(names)}, self.rules.values())
            self.owners[names] = bool(keeping)
        return self.owners[names]

    def under_draft(
        self, stored: Mapping[str, Any], recorded: Mapping[str, Any], draft: Mapping[str, Any]
    ) -> dict[str, Any]:
        key = json.dumps([stored, recorded, draft], sort_keys=True)
        found = self.memo.get(key)
        if found is None:
            if len(self.memo) >= self.MEMO:
                self.memo.clear()
            found = self.memo[key] = self._under_draft(stored, recorded, draft)
        return found

    def _under_draft(
        self, stored: Mapping[str, Any], recorded: Mapping[str, Any], draft: Mapping[str, Any]
    ) -> dict[str, Any]:
        rules = [r for r in stored.get("rules") or [] if not r.startswith("policy:")]
        added = _clause_keys(recorded)
        by_rules = set().union(*(self._of_rule(r) for r in rules)) if rules else set()
        kept = {
            "rules": rules,
            "all_of": [
                c
                for c in stored.get("all_of") or []
                if _clause_key(c) not in added or _clause_key(c) in by_rules
            ],
        }
        base = requirement_merge(kept) if rules else {}
        return requirement_merge(base, draft) if draft else base


def _described(requirement: Mapping[str, Any]) -> str:
    return requirement_text(dict(requirement)) or "the class default"


@dataclass
class _Run:
    compiled: CompiledPolicies
    listed: int
    requirements: _Requirements

    def __post_init__(self) -> None:
        self.plans = 0
        self.by_status: Counter[str] = Counter()
        self.by_approver: Counter[str] = Counter()
        self.by_draft: Counter[str] = Counter()
        self.crossed: dict[str, Counter[str]] = {o: Counter() for o in (APPROVE, REVIEW, REFUSE)}
        self.versus_recorded: Counter[str] = Counter()
        self.cancelled_by_reviewer = 0
        self.rate_counted = 0
        self.approve_count = 0
        self.refuse_count = 0
        self.requirement_count = 0
        self.new_approval_count = 0
        self.new_approval_listed: deque[dict] = deque(maxlen=self.listed)
        self.refused_read = 0
        self.refused_by_draft: Counter[str] = Counter()
        self.let_through_count = 0
        self.let_through_listed: deque[dict] = deque(maxlen=self.listed)
        self.approve_listed: deque[dict] = deque(maxlen=self.listed)
        self.refuse_listed: deque[dict] = deque(maxlen=self.listed)
        self.requirement_listed: deque[dict] = deque(maxlen=self.listed)
        self.failed_plans = 0
        self.failures: Counter[str] = Counter()
        self.failure_messages: dict[str, str] = {}


def _entry(row: dict, names: dict, agents: dict, result: PolicyResult, **extra) -> dict:
    """A listed plan (its links are added to the ones a list keeps: ``_linked``)."""
    return {
        "id": str(row["id"]),
        "action": names[row["action_id"]],
        "agent": agents[row["agent_id"]][0],
        "target": str((row["target"] or {}).get("path", "")),
        "created_at": row["created_at"].isoformat(),
        "status": row["status"],
        "draft": {
            "outcome": result.outcome,
            "policies": list(result.policies),
            "reason": result.reason,
        },
        **extra,
    }


def _tally(run: _Run, row: dict, result: PolicyResult, names, agents, reviewer_ended) -> None:
    status = row["status"]
    policy = row["policy"] or {}
    recorded = policy.get(POLICY_PART) or {}
    outcome = result.outcome
    if outcome == APPROVE and (
        policy.get("signed_approval")
        or row["revision_of_id"]
        or run.requirements.owned(policy.get("requirement") or {})
    ):
        # The submission sends to people, whatever a policy says, a plan whose action
        # wants signed approvals, a reviewer's revision (someone is looking at it), and a
        # plan a decision rule keeps for its groups (policies.policy_approval).
        outcome = REVIEW
    by = _approved_by(row)
    run.plans += 1
    run.by_status[status] += 1
    run.by_approver[by or "nobody"] += 1
    run.by_draft[outcome] += 1
    run.crossed[outcome][status] += 1
    run.versus_recorded[f"{recorded.get('outcome') or 'none'} -> {outcome}"] += 1
    cancelled_by_reviewer = status == PlanStatus.CANCELLED and row["id"] in reviewer_ended
    run.cancelled_by_reviewer += cancelled_by_reviewer
    if result.errors:
        run.failed_plans += 1
        for error in result.errors:
            key = error.policy or "(the plan)"
            if key not in run.failure_messages:
                run.failure_messages[key] = error.message
        for key in {e.policy or "(the plan)" for e in result.errors}:
            run.failures[key] += 1
    if outcome == APPROVE and policy.get("mode") not in ("policy", "none"):
        # Went to people (or to a grant), and the draft would have approved it alone.
        run.new_approval_count += 1
        run.new_approval_listed.append(
            _entry(row, names, agents, result, by=by, then=recorded.get("outcome") or "")
        )
    if outcome == APPROVE:
        if status == PlanStatus.DENIED or status in GONE_WRONG or cancelled_by_reviewer:
            run.approve_count += 1
            why = (
                "denied"
                if status == PlanStatus.DENIED
                else "cancelled by a reviewer"
                if cancelled_by_reviewer
                else status
            )
            run.approve_listed.append(_entry(row, names, agents, result, why=why, by=by))
    elif outcome == REFUSE:
        if by in ("people", "grant") and status in DONE_WELL:
            run.refuse_count += 1
            run.refuse_listed.append(_entry(row, names, agents, result, by=by))
    else:
        stored = policy.get("requirement") or {}
        draft = dict(result.requirement)
        recorded_added = recorded.get("requirement") or {}
        if stored or draft:
            after = run.requirements.under_draft(stored, recorded_added, draft)
            before_keys, after_keys = _clause_keys(stored), _clause_keys(after)
            if before_keys != after_keys:
                run.requirement_count += 1
                run.requirement_listed.append(
                    _entry(
                        row,
                        names,
                        agents,
                        result,
                        by=by,
                        before=_described(stored),
                        after=_described(after),
                        added=sorted(
                            _described({"all_of": [c]})
                            for c in after.get("all_of") or []
                            if _clause_key(c) not in before_keys
                        ),
                        removed=sorted(
                            _described({"all_of": [c]})
                            for c in stored.get("all_of") or []
                            if _clause_key(c) not in after_keys
                        ),
                        rules_before=list(stored.get("rules") or []),
                        rules_after=list(after.get("rules") or []),
                    )
                )


def _cut(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def _row_facts(row: dict, names: dict, agents: dict, *, now, hour: int, day: int) -> PlanFacts:
    """A stored plan or refused submission as policies see it, at ``now`` and that rate."""
    agent = agents[row["agent_id"]]
    return PlanFacts(
        action=names[row["action_id"]],
        agent=agent[0],
        registrar=agent[1],
        agent_attributes=agent[2],
        target=row["target"] or {},
        input=row["input"] or {},
        before=row["before"],
        after=row["after"],
        changes=row["changes"] or (),
        requester=row["requester"],
        now=now,
        rate_hour=hour,
        rate_day=day,
    )


def _refused_facts(row: dict, names: dict, agents: dict) -> PlanFacts:
    """A refused submission as its policies saw it: the time and rate recorded then."""
    return _row_facts(
        row,
        names,
        agents,
        now=row["evaluated_at"],
        hour=row["rate_hour"],
        day=row["rate_day"],
    )


def _tally_refused(run: _Run, row: dict, result: PolicyResult, names, agents) -> None:
    outcome = result.outcome
    if outcome == APPROVE and row["signed_approval"]:
        outcome = REVIEW  # the submission sends those to people, whatever a policy says
    run.refused_read += 1
    run.refused_by_draft[outcome] += 1
    if result.errors:
        run.failed_plans += 1
        for error in result.errors:
            key = error.policy or "(the plan)"
            run.failure_messages.setdefault(key, error.message)
        for key in {e.policy or "(the plan)" for e in result.errors}:
            run.failures[key] += 1
    if outcome == REFUSE:
        return
    run.let_through_count += 1
    changes = row["changes"] or []
    run.let_through_listed.append(
        {
            "id": str(row["id"]),
            "action": names[row["action_id"]],
            "agent": agents[row["agent_id"]][0],
            "target": str((row["target"] or {}).get("path", "")),
            "created_at": row["created_at"].isoformat(),
            "input": _cut(row["input"]),
            "changes": [
                {
                    "path": str(c.get("path", "")),
                    "before": _cut(c.get("before")),
                    "after": _cut(c.get("after")),
                }
                for c in changes[:DETAIL_CHANGES]
                if isinstance(c, dict)
            ],
            "more_changes": max(0, len(changes) - DETAIL_CHANGES),
            "refused_by": list(row["policies"] or []),
            "refusal": row["refusal"],
            "set_version": row["set_version"],
            "requirement": (
                _described(result.requirement) if outcome == REVIEW and result.requirement else ""
            ),
            "draft": {
                "outcome": outcome,
                "policies": list(result.policies),
                "reason": result.reason,
            },
        }
    )


def _replay_refused(
    run: _Run, policies: CompiledPolicies, *, since, until, size, names, agents
) -> int:
    """The refused submissions of the window put to the draft; how many pages."""
    pages = 0
    for page in _pages(
        REFUSED_FIELDS, start=since, until=until, size=size, model=RefusedSubmission
    ):
        pages += 1
        _known(page, names, agents)
        facts = [_refused_facts(row, names, agents) for row in page]
        for row, result in zip(page, policy_evaluate_batch(facts, policies), strict=True):
            _tally_refused(run, row, result, names, agents)
    return pages


def _reviewer_ended(page: list[dict]) -> set:
    """The cancelled plans of a page that a reviewer ended (one query, served by the
    audit trail's (plan, id) index; none when the page has no cancelled plan)."""
    cancelled = [row["id"] for row in page if row["status"] == PlanStatus.CANCELLED]
    if not cancelled:
        return set()
    return set(
        AuditEvent.objects.filter(plan_id__in=cancelled, kind__in=REVIEWER_CANCELS)
        .values_list("plan_id", flat=True)
        .distinct()
    )


def backtest_run(
    *,
    policies: CompiledPolicies,
    since: datetime,
    until: datetime,
    page_size: int = PAGE_SIZE,
    listed: int = MAX_LISTED,
    progress: Callable[[int, int, float], None] | None = None,
    progress_pages: int = PROGRESS_PAGES,
    source: str = "",
    parts: tuple[str, ...] = (ENFORCE,),
) -> dict[str, Any]:
    """Replay ``policies`` (their enforce part) over the plans created in [since, until),
    and the submissions refused then, and compare with what happened; the report (JSON),
    opening with what the draft changes against the set in force in the ``parts`` it
    gives. ``progress(pages, plans, seconds)`` is called every ``progress_pages`` pages
    and at the end."""
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise BacktestRefused(f"a page holds 1 to {MAX_PAGE_SIZE} plans")
    started = time.monotonic()
    changes = policy_set_changes(policies, parts=parts)
    run = _Run(compiled=policies, listed=listed, requirements=_Requirements())
    windows = RateWindows()
    # The day before the window: only to count the rates of its first plans.
    for page in _pages(
        ("id", "created_at", "agent_id", "action_id"),
        start=since - timedelta(days=1),
        until=since,
        size=page_size,
    ):
        for row in page:
            windows.add((row["agent_id"], row["action_id"]), _us(row["created_at"]))
    names: dict[Any, str] = {}
    agents: dict[Any, tuple[str, str, dict]] = {}
    pages = 0
    for page in _pages(FIELDS, start=since, until=until, size=page_size):
        pages += 1
        _known(page, names, agents)
        reviewer_ended = _reviewer_ended(page)
        facts = []
        for row in page:
            at = _us(row["created_at"])
            key = (row["agent_id"], row["action_id"])
            recorded = (row["policy"] or {}).get(POLICY_PART) or {}
            if recorded.get("at") and recorded.get("rate") is not None:
                now = datetime.fromisoformat(recorded["at"])
                hour, day = (int(n) for n in recorded["rate"])
            else:
                now = row["created_at"]
                hour, day = windows.count(key, at)
                run.rate_counted += 1
            windows.add(key, at)
            facts.append(_row_facts(row, names, agents, now=now, hour=hour, day=day))
        windows.forget_before(_us(page[-1]["created_at"]))
        results = policy_evaluate_batch(facts, policies)
        for row, result in zip(page, results, strict=True):
            _tally(run, row, result, names, agents, reviewer_ended)
        if progress and pages % progress_pages == 0:
            progress(pages, run.plans, time.monotonic() - started)
    refused_pages = _replay_refused(
        run, policies, since=since, until=until, size=page_size, names=names, agents=agents
    )
    seconds = time.monotonic() - started
    if progress:
        progress(pages, run.plans, seconds)
    return _report(
        run,
        since=since,
        until=until,
        pages=pages,
        page_size=page_size,
        seconds=seconds,
        source=source,
        changes=changes,
        refused_pages=refused_pages,
    )


def _known(page: list[dict], names: dict, agents: dict) -> None:
    """The names of the page's actions and its agents' facts, read once per run (one
    query each, for those not seen yet: bounded by the catalog, not by history)."""
    missing = {row["action_id"] for row in page} - names.keys()
    if missing:
        names.update(Action.objects.filter(id__in=missing).values_list("id", "name"))
    missing = {row["agent_id"] for row in page} - agents.keys()
    if missing:
        for pk, name, registrar, attributes in Agent.objects.filter(id__in=missing).values_list(
            "id", "name", "created_by__username", "attributes"
        ):
            agents[pk] = (name, registrar or "", attributes or {})


def _report(
    run: _Run, *, since, until, pages, page_size, seconds, source, changes, refused_pages
) -> dict[str, Any]:
    policies = run.compiled
    return {
        "draft": {
            "hash": policies.hash,
            "source": source,
            "policies": policies.ids(),
        },
        "changes": changes,
        "window": {"since": since.isoformat(), "until": until.isoformat()},
        "read": {
            "pages": pages,
            "page_size": page_size,
            "seconds": round(seconds, 3),
            "refused_pages": refused_pages,
        },
        "listed_at_most": run.listed,
        "new_approvals": {
            "count": run.new_approval_count,
            "plans": _linked(run.new_approval_listed),
        },
        "refused_let_through": {
            "count": run.let_through_count,
            "read": run.refused_read,
            "by_draft": {o: run.refused_by_draft.get(o, 0) for o in (APPROVE, REVIEW, REFUSE)},
            "submissions": list(run.let_through_listed),
        },
        "approve_disagreements": {
            "count": run.approve_count,
            "plans": _linked(run.approve_listed),
        },
        "refuse_disagreements": {
            "count": run.refuse_count,
            "plans": _linked(run.refuse_listed),
        },
        "requirement_changes": {
            "count": run.requirement_count,
            "plans": _linked(run.requirement_listed),
        },
        "totals": {
            "plans": run.plans,
            "by_status": dict(sorted(run.by_status.items())),
            "approved_by": dict(sorted(run.by_approver.items())),
            "draft": {o: run.by_draft.get(o, 0) for o in (APPROVE, REVIEW, REFUSE)},
            "draft_by_status": {o: dict(sorted(c.items())) for o, c in run.crossed.items() if c},
            "recorded_to_draft": dict(sorted(run.versus_recorded.items())),
            "cancelled_by_reviewer": run.cancelled_by_reviewer,
            "rate_counted": run.rate_counted,
        },
        "errors": {
            "plans": run.failed_plans,
            "by_policy": dict(sorted(run.failures.items())),
            "messages": dict(sorted(run.failure_messages.items())),
        },
    }


def _linked(entries) -> list[dict]:
    """The entries a list kept, each with its page's path and URL."""
    out = []
    for entry in entries:
        path = reverse("approvals:plan-detail", args=[entry["id"]])
        out.append({"id": entry["id"], "url": settings.PUBLIC_URL + path, "path": path, **entry})
    return out


def backtest_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """What the audit trail keeps of a report: the counts, no plan."""
    changes = report.get("changes") or {}
    return {
        "plans": report["totals"]["plans"],
        "outcomes": report["totals"]["draft"],
        "policies_added": [p["id"] for p in (changes.get(ENFORCE) or {}).get("added", [])],
        "policies_removed": [p["id"] for p in (changes.get(ENFORCE) or {}).get("removed", [])],
        "policies_changed": [p["id"] for p in (changes.get(ENFORCE) or {}).get("changed", [])],
        "new_approvals": report["new_approvals"]["count"],
        "refused_read": report["refused_let_through"]["read"],
        "refused_let_through": report["refused_let_through"]["count"],
        "approve_disagreements": report["approve_disagreements"]["count"],
        "refuse_disagreements": report["refuse_disagreements"]["count"],
        "requirement_changes": report["requirement_changes"]["count"],
        "failed_plans": report["errors"]["plans"],
    }


def backtest_audit(*, actor: str, report: Mapping[str, Any]) -> None:
    """``policy.backtest``: who, the draft's hash, the window, the totals."""
    with transaction.atomic():
        audit_record(
            kind="policy.backtest",
            actor=actor,
            data={
                "draft": report["draft"]["hash"],
                "source": report["draft"]["source"][:200],
                "since": report["window"]["since"],
                "until": report["window"]["until"],
                **backtest_summary(report),
            },
        )


# --- the admin's runs: requested on the page, run by a worker ---------------------------------


def policy_backtest_request(
    *, user, draft_text: str, since: datetime, until: datetime, origin: str = "the draft"
) -> PolicyBacktest:
    """A backtest of ``draft_text`` (Cedar, the enforce part) over [since, until), to be
    run by a worker (``approvals.policy_backtest``). DraftRefused when the draft does not
    hold (an ``@require`` naming a group that does not exist included), with each
    problem's line, before anything is stored."""
    compiled = draft_compile([(origin, draft_text)], actions=stored_actions(), check_groups=True)
    if since >= until:
        raise BacktestRefused("the window is empty: since must come before until")
    with transaction.atomic():
        backtest = PolicyBacktest.objects.create(
            created_by=user,
            draft=draft_text,
            draft_hash=compiled.hash,
            since=since,
            until=until,
        )
        dispatch.on_commit(dispatch.POLICY_BACKTEST, backtest.id)
    return backtest


def policy_backtest_execute(*, backtest_id) -> str:
    """Run a requested backtest (the worker's task): claim it, replay, store the report,
    audit. Returns what happened: ``done`` or ``failed`` (this call ran it); ``busy``
    when a run of it said how far it got less than STALLED_AFTER ago (a duplicate
    message, or a message redelivered at once after its worker died: the task looks
    again later, and takes it over if it has stopped moving); ``over`` when it is done,
    failed or gone."""
    now = timezone.now()
    claimed = PolicyBacktest.objects.filter(
        Q(state=PolicyBacktest.State.QUEUED)
        | Q(state=PolicyBacktest.State.RUNNING, progress_at__lt=now - STALLED_AFTER),
        id=backtest_id,
    ).update(state=PolicyBacktest.State.RUNNING, started_at=now, progress_at=now, plans_read=0)
    if claimed != 1:
        # Another worker got there first, or the run is over.
        running = PolicyBacktest.objects.filter(
            id=backtest_id, state=PolicyBacktest.State.RUNNING
        ).exists()
        return "busy" if running else "over"
    backtest = PolicyBacktest.objects.select_related("created_by").get(id=backtest_id)

    def progress(pages: int, plans: int, seconds: float) -> None:
        PolicyBacktest.objects.filter(id=backtest_id).update(
            plans_read=plans, progress_at=timezone.now()
        )

    try:
        compiled = draft_compile([("the draft", backtest.draft)], actions=stored_actions())
        report = backtest_run(
            policies=compiled,
            since=backtest.since,
            until=backtest.until,
            progress=progress,
            source=f"admin, backtest {backtest.id}",
        )
    except Exception as exc:  # noqa: BLE001 - the page says it failed, and why
        log.exception("policy backtest %s failed", backtest_id)
        error = f"{type(exc).__name__}: {exc}"[:2000]
        with transaction.atomic():
            PolicyBacktest.objects.filter(id=backtest_id).update(
                state=PolicyBacktest.State.FAILED, finished_at=timezone.now(), error=error
            )
            audit_record(
                kind="policy.backtest",
                actor=f"user:{backtest.created_by.get_username()}",
                data={
                    "draft": backtest.draft_hash,
                    "since": backtest.since.isoformat(),
                    "until": backtest.until.isoformat(),
                    "failed": error[:300],
                },
            )
        return "failed"
    with transaction.atomic():
        PolicyBacktest.objects.filter(id=backtest_id).update(
            state=PolicyBacktest.State.DONE,
            finished_at=timezone.now(),
            plans_read=report["totals"]["plans"],
            report=report,
        )
        backtest_audit(actor=f"user:{backtest.created_by.get_username()}", report=report)
    return "done"


# --- the report, for people --------------------------------------------------------------------


def _counted(n: int, word: str) -> str:
    """``1 page``, ``2 pages``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def report_text(report: Mapping[str, Any]) -> str:
    """The report as the command prints it: what matters first, with links."""
    totals = report["totals"]
    lines = [
        f"Draft {report['draft']['hash'][:12]} ({report['draft']['source'] or 'text'}): "
        f"{', '.join(report['draft']['policies']) or 'no policy'}",
        *changes_text(report.get("changes")),
        f"Window: {report['window']['since']} to {report['window']['until']}; "
        f"{_counted(totals['plans'], 'plan')} read in "
        f"{_counted(report['read']['pages'], 'page')} "
        f"of {report['read']['page_size']} ({report['read']['seconds']:.1f} s); "
        f"{_counted(report['refused_let_through']['read'], 'refused submission')}",
        "",
    ]

    def section(title: str, key: str, describe: Callable[[dict], str]) -> None:
        found = report[key]
        lines.append(f"{title}: {found['count']:,}")
        shown = found["plans"]
        if found["count"] > len(shown):
            lines.append(f"  (the {len(shown)} most recent)")
        for plan in shown:
            lines.append(
                f"  {plan['created_at'][:19]}  {plan['action']}  {plan['target']}  {describe(plan)}"
            )
            lines.append(f"    {plan['url']}")
        lines.append("")

    def policies(plan: dict) -> str:
        return ", ".join(plan["draft"]["policies"]) or "-"

    section(
        "Would approve with no person what went to people",
        "new_approvals",
        lambda p: f"{p['status']} (approved by {p['by'] or 'nobody'}); approved by {policies(p)}",
    )
    refused = report["refused_let_through"]
    lines.append(
        f"Refused then, let through by the draft: {refused['count']:,} "
        f"of {refused['read']:,} refused submissions"
    )
    if refused["count"] > len(refused["submissions"]):
        lines.append(f"  (the {len(refused['submissions'])} most recent)")
    for sub in refused["submissions"]:
        draft = sub["draft"]
        would = (
            f"approve by {', '.join(draft['policies']) or '-'}"
            if draft["outcome"] == APPROVE
            else f"review ({sub['requirement'] or 'the class default'})"
        )
        lines.append(
            f"  {sub['created_at'][:19]}  {sub['action']}  {sub['target']}  "
            f"refused by {', '.join(sub['refused_by']) or '-'} (v{sub['set_version']}): "
            f"{sub['refusal']}; now {would}"
        )
        lines.append(f"    refused submission {sub['id']}, input {sub['input']}")
        for change in sub["changes"]:
            lines.append(f"    {change['path']}: {change['before']} -> {change['after']}")
    lines.append("")
    section(
        "Would approve what people said no to, or what went wrong",
        "approve_disagreements",
        lambda p: f"{p['why']}; approved by {policies(p)}",
    )
    section(
        "Would refuse what a person approved and was done",
        "refuse_disagreements",
        lambda p: f"{p['status']} (approved by {p['by']}); refused by {policies(p)}",
    )
    section(
        "Would change who must approve",
        "requirement_changes",
        lambda p: f"{p['before']} -> {p['after']}",
    )
    lines.append("Totals")
    lines.append(f"  plans by status: {_pairs(totals['by_status'])}")
    lines.append(f"  approved by: {_pairs(totals['approved_by'])}")
    lines.append(f"  the draft would: {_pairs(totals['draft'])}")
    for outcome, statuses in totals["draft_by_status"].items():
        lines.append(f"    {outcome}: {_pairs(statuses)}")
    lines.append(f"  recorded outcome -> draft: {_pairs(totals['recorded_to_draft'])}")
    lines.append(
        f"  cancelled by a reviewer: {totals['cancelled_by_reviewer']:,}; rates counted "
        f"from history (none recorded): {totals['rate_counted']:,}"
    )
    errors = report["errors"]
    lines.append(f"Errors: {errors['plans']:,} plans")
    for policy, count in errors["by_policy"].items():
        lines.append(f"  {policy}: {count:,} plans ({errors['messages'].get(policy, '')})")
    return "\n".join(lines) + "\n"


def changes_text(changes: Mapping[str, Any] | None) -> list[str]:
    """What the draft changes against the set in force, by id, a line a part."""
    if not changes:
        return []
    against = changes.get("against")
    lines = [
        f"Against the set in force (version {against['version']}, {against['hash'][:12]}):"
        if against
        else "Against the set in force: none (no policy is in force)"
    ]
    for part in ("enforce", "shadow"):
        found = changes.get(part)
        if found is None:
            lines.append(f"  {part}: not in the draft (not compared)")
            continue
        said = [
            f"{word} " + ", ".join(f"{p['id']} ({p['kind']})" for p in found[key])
            for key, word in (("added", "added"), ("removed", "removed"), ("changed", "changed"))
            if found[key]
        ]
        lines.append(
            f"  {part}: "
            + ("; ".join(said) if said else "no change")
            + f"; {found['unchanged']} unchanged"
        )
    return lines


def _pairs(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in counts.items()) or "none"
