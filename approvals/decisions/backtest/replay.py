"""A run of the backtest: each plan of the window, and each refused submission, put to
the draft and compared with what happened, into a bounded report."""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from actions.lib.audit import audit_record
from actions.lib.models import AuditEvent
from actions.models import Action, Agent
from actions.policy.drafts import policy_set_changes
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

from ...models import PlanStatus, RefusedSubmission
from ..policies import POLICY_PART
from .history import (
    APPROVED_STATES,
    DETAIL_CHANGES,
    DETAIL_CHARS,
    DONE_WELL,
    FIELDS,
    GONE_WRONG,
    MAX_LISTED,
    MAX_PAGE_SIZE,
    PAGE_SIZE,
    PROGRESS_PAGES,
    REFUSED_FIELDS,
    REVIEWER_CANCELS,
    BacktestRefused,
    RateWindows,
    _pages,
    _us,
)

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
