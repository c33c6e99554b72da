"""The catalog's policies applied to plans (the engine: actions/policy/engine.py).

* **At submission** (``policy_submission``): the set in force is evaluated over the
  computed change. A ``forbid`` refuses the plan before it is stored
  (``PolicyRefused``). Otherwise what the policies said goes into the fingerprinted
  policy part (``policy["policies"]``: the set's hash and version, the outcome, the
  policies that decided, the clauses ``@require`` added, the errors, and the two facts
  that change with time: when it was evaluated and the agent's rate then), so the worker
  can put the same plan to the set again. An ``@approve`` approves the plan with no person
  (the services do it, audited with the policy ids and the set's hash) unless something
  keeps it for people (``policy_approval``): the floor, a signed action, a reviewer's
  revision, or a decision rule that owns the plan and does not say
  ``policies_may_approve: true``. The part then says so (``held``). The shadow part is
  evaluated beside it and recorded, never enforced.
* **At each decision** the requirement a plan would get now includes what the set in
  force adds (``policy_requirement_current``): a set that changed what a plan needs
  refuses approvals given under the old requirement, as changed decision rules do.
* **At the claim** (``policy_claim_refusal``): the worker puts the plan to the set in
  force, with the facts stored on it. A plan approved by policy runs only if the set in
  force still approves it (a set that changed since, or that errors, stops it) and every
  decision rule in force that matches it still lets policies approve it; any plan stops
  if a ``forbid`` in force now holds for it.

A catalog without policies adds nothing to a plan: its fingerprint is what it always was.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from actions.lib.canonical import digest
from actions.lib.exceptions import PolicyRefused
from actions.lib.metrics import POLICY_ERRORS, SHADOW_DISAGREEMENTS
from actions.policy.engine import (
    APPROVE,
    FLOOR_ERRORS,
    FLOOR_IRREVERSIBLE,
    REFUSE,
    REVIEW,
    CompiledPolicies,
    PlanFacts,
    PolicyResult,
    policy_evaluate,
)
from actions.policy.reviewers import plan_subject, requirement_for, rules_in_force, rules_keeping
from actions.policy.sources import ENFORCE, SHADOW
from actions.policy.versions import policies_in_force

from ..models import Plan
from ..wakeups import counted_on_commit

log = logging.getLogger(__name__)

# The fingerprinted policy part's key, and the plan mode of a plan a policy approved.
POLICY_PART = "policies"
MODE = "policy"
# The policy part's facts that change with the moment a plan is judged, not with what it
# would do: left out of its repeat key (``plan_repeat_key``).
MOMENT_FACTS = ("at", "rate")

# Why an @approve that held did not approve the plan with no person (the policy part's
# ``held.reasons``, in this order):
IRREVERSIBLE = "irreversible"  # the floor: an irreversible plan always has a person
EVALUATION_ERROR = "evaluation_error"  # the floor: a policy failed to evaluate
SIGNED_ACTION = "signed_action"  # the action wants passkey-signed approvals
# An MCP write with no preview: nothing was computed, so a person reads the exact call.
NO_PREVIEW = "no_preview"
RULE_OWNED = "rule_owned"  # a decision rule keeps the plan for its groups
REVISION = "revision"  # a reviewer's revision: someone is looking at it
HELD_REASONS = (IRREVERSIBLE, EVALUATION_ERROR, SIGNED_ACTION, RULE_OWNED, REVISION, NO_PREVIEW)


@dataclass(frozen=True)
class Evaluated:
    """What the set in force said of a plan about to be stored."""

    result: PolicyResult | None  # None: no policy set in force
    shadow: PolicyResult | None  # None: no shadow policy
    part: dict[str, Any]  # the fingerprinted policy part ({} without a set)
    # The @approve policies that held for the plan, whether or not the floor let them
    # approve it (the engine names them only when they did).
    approving: tuple[str, ...] = ()


# The most plans of a day counted for one agent and action (the rate's bound).
RATE_CAP = 100_000


def agent_rate(*, agent_id, action_id, now: datetime) -> tuple[int, int]:
    """The agent's plans for this action in the hour and the day before ``now``, at most
    RATE_CAP: one query, counted in the database over the agent's history index. (Not
    the rows themselves: an agent that proposes thousands of plans a day would otherwise
    make each submission read thousands of rows.)

    Written as SQL rather than built by the ORM on every submission (compiling the
    aggregate cost more than PostgreSQL's index-only count); the same statement Django
    built: the day's rows capped at RATE_CAP, and the hour's counted among them."""
    db = connection.ops
    with connection.cursor() as cursor:
        cursor.execute(
            _RATE_SQL.format(table=db.quote_name(Plan._meta.db_table), cap=RATE_CAP),
            [
                db.adapt_datetimefield_value(now - timedelta(hours=1)),
                _PLAN_AGENT.get_db_prep_value(agent_id, connection),
                action_id,
                db.adapt_datetimefield_value(now - timedelta(days=1)),
                db.adapt_datetimefield_value(now),
            ],
        )
        hour, day = cursor.fetchone()
    return hour, day


_PLAN_AGENT = Plan._meta.get_field("agent").target_field
_RATE_SQL = (
    "SELECT COUNT(*) FILTER (WHERE created_at >= %s), COUNT(*) FROM ("
    "SELECT created_at FROM {table} WHERE agent_id = %s AND action_id = %s "
    "AND created_at >= %s AND created_at < %s LIMIT {cap}) AS day"
)


def facts_of(
    *,
    action,
    agent,
    target: dict[str, Any],
    values: dict[str, Any],
    before: Any,
    after: Any,
    changes: list[dict[str, Any]],
    requester: dict | None,
    now: datetime,
    rate: tuple[int, int],
) -> PlanFacts:
    registrar = agent.created_by.get_username() if agent.created_by_id else ""
    return PlanFacts(
        action=action.name,
        agent=agent.name,
        target=target,
        input=values,
        now=now,
        before=before,
        after=after,
        changes=changes,
        registrar=registrar,
        agent_attributes=agent.attributes or {},
        requester=requester,
        rate_hour=rate[0],
        rate_day=rate[1],
    )


def plan_policy_facts(plan: Plan) -> PlanFacts:
    """A stored plan as its policies saw it: its columns, and the time and rate recorded
    in its policy part (a plan stored without policies: its submission, rates unknown)."""
    part = plan.policy.get(POLICY_PART) or {}
    at = part.get("at")
    now = datetime.fromisoformat(at) if at else plan.created_at
    rate = part.get("rate") or [0, 0]
    return facts_of(
        action=plan.action,
        agent=plan.agent,
        target=plan.target,
        values=plan.input,
        before=plan.before,
        after=plan.after,
        changes=plan.changes,
        requester=plan.requester,
        now=now,
        rate=(int(rate[0]), int(rate[1])),
    )


def _part(result: PolicyResult, now: datetime, rate: tuple[int, int]) -> dict[str, Any]:
    return {
        "set": result.set_hash,
        "version": result.version,
        "outcome": result.outcome,
        "decided_by": list(result.policies),
        "requirement": dict(result.requirement),
        "errors": sorted({e.policy for e in result.errors}),
        "at": now.isoformat(),
        "rate": list(rate),
    }


def policy_submission(
    *,
    action,
    agent,
    target: dict[str, Any],
    values: dict[str, Any],
    before: Any,
    after: Any,
    changes: list[dict[str, Any]],
    requester: dict | None,
    now: datetime | None = None,
) -> Evaluated:
    """The set in force over a plan about to be stored; PolicyRefused for a ``forbid``
    (the caller audits it). Never raises for what a plan holds: an evaluation that fails
    is a review, with the errors."""
    compiled = policies_in_force()
    if compiled.empty and not compiled.problem:
        return Evaluated(None, None, {})
    now = now or timezone.now()
    rate = agent_rate(agent_id=agent.pk, action_id=action.pk, now=now)
    facts = facts_of(
        action=action,
        agent=agent,
        target=target,
        values=values,
        before=before,
        after=after,
        changes=changes,
        requester=requester,
        now=now,
        rate=rate,
    )
    result = policy_evaluate(facts, compiled)
    _log_errors(result, action.name)
    shadow = policy_evaluate(facts, compiled, part=SHADOW) if compiled.ids(SHADOW) else None
    if shadow is not None:
        _log_errors(shadow, action.name)
    if result.outcome == REFUSE:
        raise PolicyRefused(
            result.reason,
            policies=list(result.policies),
            set_hash=result.set_hash,
            shadow=shadow.as_dict() if shadow else None,
            # The refused submission is recorded with exactly the facts judged.
            version=result.version,
            at=now,
            rate=rate,
        )
    return Evaluated(result, shadow, _part(result, now, rate), _approving(result, compiled))


def _approving(result: PolicyResult, compiled: CompiledPolicies) -> tuple[str, ...]:
    if result.outcome == APPROVE:
        return tuple(result.policies)
    if not result.floor:
        # No @approve held, or an @require held too (more people, never fewer: that is
        # not an automatic yes withheld).
        return ()
    held = (compiled.policies.get((ENFORCE, i)) for i in result.matched)
    return tuple(p.id for p in held if p is not None and p.effect == "permit" and p.approve)


def policy_approval(
    evaluated: Evaluated,
    *,
    requirement: dict[str, Any],
    signed: bool,
    revision: bool,
    previewed: bool = True,
) -> tuple[bool, dict[str, Any]]:
    """Whether the policies approve a plan about to be stored with no person, and the
    policy part to fingerprint.

    An @approve that held approves only if nothing keeps the plan for people: the floor
    (irreversible, a policy that failed: engine.py), an action that wants signed
    approvals, a reviewer's revision, and **the decision rules that own the plan**:
    every rule behind ``requirement`` must say ``policies_may_approve: true``. When
    something does, the part records it as ``held``: the policies that would have
    approved, every reason (``HELD_REASONS``) and, for ``rule_owned``, the rules and the
    groups they keep it for; its outcome is then ``review`` and no policy ``decided_by``
    it, so the plan's record, its answer and its page say one thing: people decide, and
    why no policy did. Called with the catalog snapshot ``requirement`` was made in."""
    result = evaluated.result
    if result is None or not evaluated.approving:
        return False, evaluated.part
    reasons = []
    if result.floor == FLOOR_IRREVERSIBLE:
        reasons.append(IRREVERSIBLE)
    if result.floor == FLOOR_ERRORS or (result.floor and result.errors):
        reasons.append(EVALUATION_ERROR)
    if signed:
        reasons.append(SIGNED_ACTION)
    if not previewed:
        reasons.append(NO_PREVIEW)
    keeping = rules_keeping(requirement, rules_in_force())
    if keeping:
        reasons.append(RULE_OWNED)
    if revision:
        reasons.append(REVISION)
    if not reasons:
        return True, evaluated.part
    held: dict[str, Any] = {"policies": list(evaluated.approving), "reasons": reasons}
    if keeping:
        held["rules"] = keeping
    return False, {**evaluated.part, "outcome": REVIEW, "decided_by": [], "held": held}


def plan_repeat_key(document: dict[str, Any], *, fingerprint: str = "") -> str:
    """What identifies a proposal for ``Replay.REPEAT`` (approvals/services/submission.py): the
    SHA-256 of its fingerprint document without the policy part's ``MOMENT_FACTS`` (when
    the policies judged it, and the agent's rate then, which an earlier identical
    proposal itself raised). Everything a plan would do stays in it: the action and its
    version, the agent, target, input, after, precondition, write and requester, and who
    decides (the policy set's hash and version, what the policies said, the decision
    rules' requirement, the mode). The facts stay in the fingerprint itself: the worker
    puts a plan to the set in force with the facts it was approved on, and those must
    be the ones a person or a policy approved (guarantee 2)."""
    policy = document.get("policy") or {}
    part = policy.get(POLICY_PART)
    if not part or not any(fact in part for fact in MOMENT_FACTS):
        # Nothing to leave out: the key is the fingerprint, which the caller may have
        # computed already (the same SHA-256 over the same canonical bytes).
        return fingerprint or digest(document)
    part = {k: v for k, v in part.items() if k not in MOMENT_FACTS}
    return digest({**document, "policy": {**policy, POLICY_PART: part}})


def _log_errors(result: PolicyResult, action: str) -> None:
    # Counted and logged: the policy's id and what kind of failure it was. The message is
    # one of the engine's fixed texts (actions/policy/engine.py, error_category), never
    # Cedar's own, which quotes the values it evaluated (an overflow names its operands).
    for error in result.errors:
        POLICY_ERRORS.labels(policy=error.policy or "(plan)", part=result.part).inc()
        log.warning(
            "policy %s failed to evaluate on a plan of %s (%s set): %s",
            error.policy or "(the plan)",
            action,
            result.part,
            error.message,
        )


def _in_force_over(plan: Plan, compiled: CompiledPolicies | None = None) -> PolicyResult | None:
    compiled = compiled if compiled is not None else policies_in_force()
    if compiled.empty and not compiled.problem:
        return None
    return policy_evaluate(plan_policy_facts(plan), compiled)


def policy_requirement_current(plan: Plan) -> dict[str, Any]:
    """What the set in force adds to ``plan``'s requirement now (``{}``: nothing). The set
    the plan was proposed under answers from the plan's own record, with no evaluation."""
    part = plan.policy.get(POLICY_PART)
    compiled = policies_in_force()
    if part and part.get("set") == compiled.hash and not compiled.problem:
        return part.get("requirement") or {}
    result = _in_force_over(plan, compiled)
    return dict(result.requirement) if result is not None else {}


def policy_claim_refusal(plan: Plan) -> str | None:
    """Why the worker must not send ``plan`` on its policies' account, or None.

    Always evaluated (a plan approved by policy is never taken on its record's word):
    a ``forbid`` in force that holds for the plan stops it, whoever approved it; a plan
    approved by policy runs only if the set in force approves it now, with the facts it
    was approved on."""
    approved_by_policy = plan.policy.get("mode") == MODE
    part = plan.policy.get(POLICY_PART)
    if approved_by_policy and not part:
        return "the plan says a policy approved it, but records no policy"
    result = _in_force_over(plan)
    if result is None:
        if approved_by_policy:
            return "the plan was approved by policy, and no policy is in force now"
        return None
    if result.outcome == REFUSE:
        return f"a policy in force refuses it now: {result.reason}"
    if not approved_by_policy:
        return None
    keeping = rules_keeping(_rules_requirement_now(plan), rules_in_force())
    if keeping:
        return "no policy approves this plan now: " + "; ".join(
            f"the decision rule {k['rule']} keeps it for {', '.join(k['groups'])}" for k in keeping
        )
    if result.outcome != APPROVE:
        why = result.floor or (
            "its policies failed to evaluate" if result.errors else "no policy approves it"
        )
        return (
            f"the policy set changed since a policy approved this plan (set "
            f"{str(part.get('set'))[:12]}, now {result.set_hash[:12]}): {why}"
        )
    return None


def _rules_requirement_now(plan: Plan) -> dict[str, Any]:
    """The requirement the decision rules in force give ``plan`` (not what policies add)."""
    rules = rules_in_force()
    if not rules:
        return {}
    requester = plan.requester or None
    subject = plan_subject(
        action=plan.action.name,
        connector=plan.action.connector.name,
        kind=plan.kind,
        consequence_class=plan.consequence_class,
        before=plan.before,
        input=plan.input,
        requester_groups=None
        if not requester
        else [g for g in requester.get("groups") or [] if isinstance(g, str)],
    )
    return requirement_for(subject, rules)


def policy_decided_by(plan: Plan) -> dict[str, Any] | None:
    """For the agent and the page: the policy outcome recorded on the plan (outcome,
    the policies that decided, the set's hash and version, the errors, and ``held``:
    why an @approve that held did not approve it, or None), or None."""
    part = plan.policy.get(POLICY_PART)
    if not part:
        return None
    return {
        "outcome": part.get("outcome"),
        "policies": list(part.get("decided_by") or []),
        "set": part.get("set"),
        "version": part.get("version"),
        "errors": list(part.get("errors") or []),
        "held": policy_held(plan),
    }


def policy_held(plan: Plan) -> dict[str, Any] | None:
    """Why no policy approved ``plan`` although an @approve held: ``{"policies",
    "reasons", "rules"}`` (``rules``: ``[{"rule", "groups"}]``, empty unless
    ``rule_owned``), or None.

    Plans stored before ``held`` was recorded said only what their policies said: an
    @approve recorded on a plan people decide was kept from it by a signed action or a
    reviewer's revision, read here from the plan itself."""
    part = plan.policy.get(POLICY_PART) or {}
    held = part.get("held")
    if held:
        return {
            "policies": list(held.get("policies") or []),
            "reasons": [r for r in held.get("reasons") or [] if r in HELD_REASONS],
            "rules": [dict(r) for r in held.get("rules") or []],
        }
    if part.get("outcome") == APPROVE and plan.policy.get("mode") not in (MODE, "none"):
        reasons = [SIGNED_ACTION] if plan.policy.get("signed_approval") else []
        if plan.revision_of_id and not reasons:
            reasons = [REVISION]
        return {"policies": list(part.get("decided_by") or []), "reasons": reasons, "rules": []}
    return None


def shadow_disagrees(plan: Plan, decision: str) -> bool:
    """Whether people's decision (``approve``: the plan is approved; ``deny``) is the
    opposite of what the shadow set would have done: approved what people denied, or
    refused what they approved. Counted in /metrics once the decision commits."""
    would = (plan.shadow or {}).get("outcome")
    disagrees = (would == APPROVE and decision == "deny") or (
        would == REFUSE and decision == "approve"
    )
    if disagrees:
        counted_on_commit(SHADOW_DISAGREEMENTS.labels(shadow=would).inc)
    return disagrees
