"""The backtest's window, the agent's rate counted from history, and history read in
pages (the bounds every run keeps: see the package's docstring)."""

from __future__ import annotations

import bisect
import re
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from ...models import Plan, PlanStatus
from ..policies import RATE_CAP

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
