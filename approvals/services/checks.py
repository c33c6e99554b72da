"""What refuses a proposal before any plan is stored: an agent's allow-lists, the scope and
eligibility rules, the policies' forbid and a requirement no one can meet. Each refusal
is audited (nobody is asked about what software refuses); a policy refusal is also kept
for backtests."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from actions.cache import cached
from actions.lib.actors import agent_actor
from actions.lib.audit import audit_record
from actions.lib.canonical import escape_pointer_token
from actions.lib.exceptions import (
    CountersignError,
    NoOneCanDecide,
    NotEligible,
    OutOfScope,
    PolicyRefused,
)
from actions.lib.metrics import POLICY_DECISIONS
from actions.models import Action, Agent, AgentScope
from actions.rules import first_failing, rule_text

from ..decisions.policies import Evaluated, policy_submission
from ..decisions.refusals import refused_submission_record
from ..decisions.requirements import plan_requirement


def refuse(
    agent: Agent,
    action: Action,
    exc: CountersignError,
    check: str,
    extra: dict[str, Any] | None = None,
) -> None:
    """Record a policy refusal (no plan exists: nobody is asked), then raise it."""
    with transaction.atomic():
        audit_record(
            kind="plan.refused",
            actor=agent_actor(agent),
            data={
                "action": action.name,
                "check": check,
                "type": exc.type,
                "reason": exc.detail,
                **(extra or {}),
            },
        )
    raise exc


def check_allow_lists(agent: Agent, action: Action, values: dict[str, Any]) -> None:
    scopes = cached(
        "allow_lists",
        (agent.pk, action.pk),
        lambda: list(AgentScope.objects.filter(agent=agent, action=action)),
    )
    for scope in scopes:
        if values.get(scope.field) not in scope.values:
            refuse(
                agent,
                action,
                OutOfScope(
                    f"this agent may not use this {scope.field}",
                    errors=[
                        {
                            "pointer": f"/input/{escape_pointer_token(scope.field)}",
                            "message": "outside this agent's allow-list",
                        }
                    ],
                ),
                "allow_list",
            )


def check_rules(agent: Agent, action: Action, preview) -> None:
    """Scope rules on the target (as read, or as it would be created) and eligibility
    rules on the state read. Software refuses what no person should be asked about."""
    definition = action.definition
    subject = preview.before if preview.before is not None else preview.after
    failing = first_failing(definition.get("scope") or [], subject, agent.attributes or {})
    if failing is not None:
        refuse(agent, action, OutOfScope(rule_text(failing)), "scope")
    if preview.before is not None:
        failing = first_failing(definition.get("eligibility") or [], preview.before, {})
        if failing is not None:
            refuse(agent, action, NotEligible(rule_text(failing)), "eligibility")


def plan_policies(
    agent: Agent, action: Action, values: dict[str, Any], preview, requester: dict | None
) -> Evaluated:
    """What the catalog's policies say of this plan (approvals/decisions/policies.py); a
    ``forbid`` is refused here, audited with the policies and the set's hash, before any
    plan is stored (nobody is asked about what a policy refuses)."""
    try:
        evaluated = policy_submission(
            action=action,
            agent=agent,
            target=preview.target,
            values=values,
            before=preview.before,
            after=preview.after,
            changes=preview.changes,
            requester=requester,
        )
    except PolicyRefused as exc:
        POLICY_DECISIONS.labels(outcome="refuse", part="enforce").inc()
        # Kept for backtests, committed before the refusal is raised; never a plan.
        refused = refused_submission_record(
            agent=agent,
            action=action,
            values=values,
            preview=preview,
            requester=requester,
            refusal=exc,
        )
        refuse(
            agent,
            action,
            exc,
            "policy",
            extra={
                "policies": exc.policies,
                "set": exc.set_hash,
                "refused_submission": str(refused.id),
                **({"shadow": shadow_record(exc.shadow)} if exc.shadow else {}),
            },
        )
        raise
    if evaluated.shadow is not None:
        POLICY_DECISIONS.labels(outcome=evaluated.shadow.outcome, part="shadow").inc()
    return evaluated


def shadow_record(shadow: dict[str, Any]) -> dict[str, Any]:
    """What a plan keeps of the shadow set's would-have outcome (never enforced)."""
    keep = ("outcome", "policies", "reason", "requirement", "errors", "floor", "set_hash")
    return {k: shadow[k] for k in keep if k in shadow}


def requirement_checked(
    agent: Agent,
    action: Action,
    values: dict[str, Any],
    preview,
    requester: dict | None,
    added: dict[str, Any] | None = None,
) -> dict:
    """The decision rules' requirement for this plan (approvals/decisions), with what the
    policies ``added``; one no active person can meet before the plan expires is refused
    here, audited, before any plan is stored."""
    try:
        return plan_requirement(
            action=action,
            values=values,
            before=preview.before,
            requester=requester,
            ttl_seconds=action.spec.approval.plan_ttl,
            added=added,
            agent=agent,
        )
    except NoOneCanDecide as exc:
        refuse(agent, action, exc, "decision_rules")
        raise
