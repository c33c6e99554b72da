"""Step 1 of an execution, the claim: under the plan's row lock, in one transaction, every
reason not to send is checked again (the fingerprint, the action's definition, who may
decide, signatures, the floor, policies, grants, the vault), the approvals are spent and
an Attempt with a fresh idempotency key is committed. Nothing here speaks to an upstream."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from actions.cache import snapshot as catalog_snapshot
from actions.connectors.registry import kind_of
from actions.fingerprint import plan_fingerprint_matches
from actions.lib.actors import EXECUTOR
from actions.models import Credential, VaultState, action_by_id
from approvals.decisions.policies import MODE as POLICY_MODE
from approvals.decisions.policies import policy_claim_refusal
from approvals.decisions.requester import requester_approval_problem
from approvals.decisions.requirements import claim_refusal, claim_void_problem
from approvals.grants import grant_refusal_reason
from approvals.identity.passkeys import plan_signature_problem
from approvals.lifecycle import approvals_spend, execution_begin, plan_transition
from approvals.models import Attempt, Plan, PlanStatus

ACTOR = EXECUTOR
VAULT_LOCKED = "the vault is locked"
NO_VALID_APPROVAL = "no valid approval: missing, expired or already used"
NO_WRITE_CREDENTIAL = "no usable write credential (missing, revoked or expired)"


@dataclass
class Claim:
    plan: Plan
    attempt: Attempt
    credential: Credential | None


def refusal_reason(plan: Plan, now) -> str | None:
    """Why this plan must not be sent, from what the claim already read; the approvals
    are checked last, by spending them (approvals.lifecycle.approvals_spend)."""
    if _vault_locked(plan):
        return VAULT_LOCKED
    action = plan.action
    if not plan_fingerprint_matches(plan):
        return "the plan no longer matches its fingerprint"
    if (
        plan.action_version != action.version
        or plan.action_digest != action.digest
        or not action.enabled
        or not action.definition_intact()
    ):
        return "the action's definition changed after the preview"
    if plan.target.get("base_url") != action.connector.base_url:
        return "the connector's address changed after the preview"
    # Who may decide: the stored requirement is the fingerprinted one and the decision
    # rules in force still give it (the approvals are checked against it when spent).
    problem = claim_refusal(plan)
    if problem:
        return problem
    # Signed approvals are verified again here, from the stored assertions and the
    # registered public keys: a row written straight into the database fails.
    problem = plan_signature_problem(plan)
    if problem:
        return problem
    # The floor, again: no approval by the person the plan was requested for counts.
    problem = requester_approval_problem(plan)
    if problem:
        return problem
    # Membership is authority: an approval counts only while its maker is still active,
    # may still review and is still in the group it approved for (a break-glass one while
    # its maker is still a superuser, a grant's while its maker is still active). One
    # that no longer does is audited, and the plan is not sent unless the others decide
    # it (approvals/decisions/requirements.py).
    problem = claim_void_problem(plan, now)
    if problem:
        return problem
    # The catalog's policies, again, with the facts the plan was proposed on: a forbid in
    # force stops any plan; a plan a policy approved runs only if the set in force still
    # approves it (approvals/decisions/policies.py).
    problem = policy_claim_refusal(plan)
    if problem:
        return problem
    if plan.policy.get("mode") == "session_grant":
        # Revoking or outliving the grant stops every plan not claimed yet.
        return grant_refusal_reason(plan, now)
    return None


def _vault_locked(plan: Plan) -> bool:
    """Whether the vault is locked, as the claim read it with the plan it locked
    (``vault_locked``), or read now for a plan loaded without it."""
    locked = plan.__dict__.get("vault_locked")
    return VaultState.is_locked() if locked is None else locked


def _vault_lock_read() -> RawSQL:
    """The vault lock, read in the claim's locking statement rather than in one of its
    own (no row yet means never locked, as VaultState.is_locked reads it). Read as of
    the statement's start, not after the plan's lock was granted: locking the vault never
    waits for a plan's lock, so no read here was ever ordered after it; the fence reads
    the lock again, in its own statement, before anything is sent. In plain SQL, as
    is_locked's: the ORM's EXISTS took longer to build than the query it saves."""
    return RawSQL(
        f"EXISTS (SELECT 1 FROM {connection.ops.quote_name(VaultState._meta.db_table)} "
        "WHERE id = %s AND locked)",
        [VaultState.SINGLETON_ID],
        output_field=BooleanField(),
    )


def needs_no_approval(plan: Plan) -> bool:
    """No person's approval to spend: a plain observation read its action lets run
    without a decision (the plan's fingerprinted policy says so, and the action,
    unchanged since or the claim refuses, still does), or a plan the catalog's policies
    approved (checked again above: policy_claim_refusal), never an irreversible one."""
    spec = plan.action.spec
    if plan.policy.get("mode") == POLICY_MODE:
        return (
            plan.consequence_class != "irreversible" and not spec.approval.signed and spec.previewed
        )
    return (
        plan.policy.get("mode") == "none"
        and plan.kind == "read"
        and spec.approval.mode == "none"
        and not spec.sensitive
    )


def event_name(plan: Plan, step: str) -> str:
    """What the audit trail calls a step: a read never appears as a write."""
    return f"{'read' if plan.kind == 'read' else 'execution'}.{step}"


def claim_plan(plan_id) -> Claim | None:
    now = timezone.now()
    with transaction.atomic():
        # Only the plan's row is locked (see docs/benchmarks.md: locking a joined action
        # row serialized every execution of an action and could deadlock). The action
        # and its connector come from the catalog cache, as fresh as a join would read
        # them (actions/cache.py) and without compiling a four-table join per claim. The
        # agent is joined, unlocked: the policies' facts name it, and read lazily it was
        # a query of its own on every claim. The vault lock is read in the same
        # statement (_vault_lock_read).
        plan = (
            Plan.objects.select_for_update(of=("self",))
            .select_related("attempt", "agent")
            .annotate(vault_locked=_vault_lock_read())
            .filter(id=plan_id)
            .order_by()
            .first()
        )
        if plan is None or plan.status != PlanStatus.APPROVED:
            # A duplicate delivery, or work already done: nothing to do.
            return None
        credential = None
        with catalog_snapshot():
            plan.action = action_by_id(plan.action_id)
            reason = refusal_reason(plan, now)
            # A read uses the read credential only; there is no write to open.
            if reason is None and plan.kind != "read":
                connector = plan.action.connector
                credential = connector.credential(Credential.Role.WRITE)
                if credential is None and not kind_of(connector).features.write_credential_optional:
                    reason = NO_WRITE_CREDENTIAL
        if reason is None and not (needs_no_approval(plan) or approvals_spend(plan, now)):
            reason = NO_VALID_APPROVAL
        if reason is not None:
            plan_transition(
                plan,
                to=PlanStatus.REFUSED,
                actor=ACTOR,
                event=event_name(plan, "refused"),
                data={"reason": reason},
                finished_at=now,
                outcome_detail=f"refused before sending: {reason}",
            )
            return None
        attempt = execution_begin(plan, actor=ACTOR, event=event_name(plan, "claimed"), now=now)
    return Claim(plan=plan, attempt=attempt, credential=credential)
