"""A plan proposed: validated, previewed read-only, judged by the policies and the
decision rules, fingerprinted and stored, then approved by what may approve it with no
person or handed to one."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from actions.cache import snapshot as catalog_snapshot
from actions.connectors.registry import kind_of
from actions.fingerprint import fingerprint, fingerprint_document, requester_part
from actions.lib import dispatch, logcontext
from actions.lib.actors import POLICY as POLICY_ACTOR
from actions.lib.actors import SYSTEM, agent_actor
from actions.lib.audit import audit_record
from actions.lib.canonical import CanonicalJSONError, digest, normalize
from actions.lib.exceptions import CountersignError, InvalidInput
from actions.lib.metrics import PLANS_PROPOSED, POLICY_DECISIONS, SUBMIT_LATENCY
from actions.models import Action, Agent
from actions.preview import PreviewError, compute_preview
from actions.spec import TemplateError

from ..decisions.policies import MODE as POLICY_MODE
from ..decisions.policies import POLICY_PART, Evaluated, plan_repeat_key, policy_approval
from ..decisions.requester import Requester, is_requester
from ..decisions.requirements import deciding_groups_record, grant_may_decide
from ..grants import grant_approve, grant_match
from ..lifecycle import plan_transition
from ..models import IdempotencyRecord, Plan, PlanStatus, SessionGrant
from ..notifications import notifications_wanted, notify_awaiting
from ..wakeups import counted_on_commit
from .checks import (
    check_allow_lists,
    check_rules,
    plan_policies,
    requirement_checked,
    shadow_record,
)
from .replays import Replay, awaiting_repeat, idempotency_key_reserve, repeat_record
from .validation import plan_validate_input

log = logging.getLogger(__name__)

MAX_REASON_CHARS = 2000


def _approve_with_no_person(plan: Plan, *, actor: str, data: dict[str, Any], now) -> None:
    """Approved as it is stored, with no person, and handed to a worker; recorded like
    any decision (``data``: what decided). Two things may say so, each fingerprinted
    and checked again by the worker: ``approval: none`` on a plain observation read
    (the action must still say so), and the catalog's policies (the set in force must
    still approve the plan; audited with the policies, the set's hash and version)."""
    dispatch.on_commit(dispatch.EXECUTE_PLAN, plan.id)
    plan_transition(
        plan,
        to=PlanStatus.APPROVED,
        actor=actor,
        event="plan.approved",
        data={"by": "policy", **data},
        decided_at=now,
        enqueued_at=now,
    )


def _shadow_audit(plan: Plan, agent: Agent, shadow) -> None:
    """The shadow set's would-have outcome, kept on the plan and in the audit trail;
    never enforced."""
    record = shadow_record(shadow.as_dict())
    Plan.objects.filter(pk=plan.pk).update(shadow=record)
    plan.shadow = record
    audit_record(
        kind="policy.shadow",
        actor=agent_actor(agent),
        plan=plan,
        data={
            "would": record["outcome"],
            "policies": record["policies"],
            "set": record["set_hash"],
            "errors": [e["policy"] for e in record.get("errors") or []],
        },
    )


def plan_submit(
    *,
    agent: Agent,
    action_name: str,
    input: Any,
    reason: str = "",
    idempotency_key: str | None = None,
    use_grants: bool = True,
    requester: Requester | dict | None = None,
) -> tuple[Plan, Replay | None]:
    """Validate, preview (read-only) and store a plan. Returns (plan, replayed): how an
    earlier plan was given back instead of a new one, or None for a new plan.

    An earlier plan comes back for the agent's Idempotency-Key (``Replay.IDEMPOTENCY_KEY``)
    or, with or without a key, when the same agent proposes the same plan while an
    earlier one still awaits a decision (``Replay.REPEAT``, audited as ``plan.repeated``;
    the same plan is the same fingerprint but for the moment the policies judged it:
    ``plan_repeat_key``): the JSON API and the MCP tools share the rule. Once that plan is
    decided, expired or withdrawn, the same proposal makes a new plan.

    Nothing reviewable is stored unless the preview succeeded. The catalog's policies
    are evaluated over it (approvals/decisions/policies.py): a forbid refuses it before
    it is stored; an @approve approves it in the same transaction with no person, unless
    the floor, a signed action, a revision or a decision rule that owns it keeps it for
    people (``policy_approval``, which records why). If
    instead an active session grant covers the plan (approvals.grants), the
    fingerprinted policy names the grant and the plan is approved by it; otherwise it
    awaits a person, and the groups that can decide it are notified once it is
    committed. ``use_grants=False`` (a reviewer's revision) sends it to a person
    whatever a grant or a policy would say.

    ``requester``: the person the agent acts for (approvals/identity/requester.py, already
    verified), stored on the plan and fingerprinted; None for the agent alone. A grant
    that person made does not approve it.

    The plan's correlation id is chosen first, so every log line of the submission
    (its preview read included) carries the id the plan is then stored with.
    """
    started = time.perf_counter()
    result = "error"
    correlation_id = uuid.uuid4()
    token = logcontext.bind(correlation_id=correlation_id, agent=agent.id, action=action_name)
    try:
        plan, replayed = _plan_submit(
            agent=agent,
            action_name=action_name,
            input=input,
            reason=reason,
            idempotency_key=idempotency_key,
            use_grants=use_grants,
            correlation_id=correlation_id,
            requester=requester.stored() if isinstance(requester, Requester) else requester,
        )
        result = "created" if replayed is None else str(replayed)
        if replayed is not None:
            logcontext.reset(token)
            logcontext.bind_plan(plan)
        return plan, replayed
    except CountersignError as exc:
        result = exc.type
        raise
    finally:
        SUBMIT_LATENCY.labels(result=result).observe(time.perf_counter() - started)


@catalog_snapshot()
def _plan_submit(
    *,
    agent: Agent,
    action_name: str,
    input: Any,
    reason: str,
    idempotency_key: str | None,
    use_grants: bool,
    correlation_id: uuid.UUID,
    requester: dict | None = None,
) -> tuple[Plan, Replay | None]:
    """plan_submit's steps, in order: validate, reserve the key, preview, judge, route,
    fingerprint, store (or give back the plan it repeats), hand on.

    One submission sees the catalog as of one moment (actions/cache.py: snapshot): the
    action, the allow-lists, the credential, the decision rules and the policy set are
    all looked up under the generation read once here. Nothing here changes the catalog
    but a connector kind recording what an upstream now serves (an MCP tool that changed),
    and that refuses the submission."""
    action, values = plan_validate_input(agent=agent, action_name=action_name, input=input)
    # Allow-lists need no read: refuse out-of-scope input before touching the upstream.
    check_allow_lists(agent, action, values)
    client = kind_of(action.connector).reader(action.connector)
    notify = notifications_wanted()
    reason = _checked_reason(reason)
    reservation = None
    if idempotency_key:
        reserved = _reserve_key(
            agent=agent,
            key=idempotency_key,
            request={"action": action_name, "input": values, "reason": reason},
            requester=requester,
        )
        if isinstance(reserved, Plan):
            return reserved, Replay.IDEMPOTENCY_KEY
        reservation = reserved
    try:
        preview = _previewed(agent, action, values, client)
        evaluated, requirement, policy, policy_approves = _judged(
            agent=agent,
            action=action,
            values=values,
            preview=preview,
            requester=requester,
            revision=not use_grants,
        )
        now = timezone.now()
        with transaction.atomic():
            policy, grant = _routed(
                agent=agent,
                action=action,
                values=values,
                requester=requester,
                policy=policy,
                requirement=requirement,
                policy_approves=policy_approves,
                use_grants=use_grants,
                now=now,
            )
            document, canonical_text, hexdigest = _fingerprinted(
                agent=agent,
                action=action,
                values=values,
                preview=preview,
                policy=policy,
                requester=requester,
            )
            # The same agent proposing the same plan while an earlier one that would do
            # the same still awaits a decision (a client retrying a call) gets that plan
            # back: a person is never asked twice about one plan. Compared by the repeat
            # key, not the fingerprint: the moment the policies judged it is no part of
            # what a plan would do (policies.plan_repeat_key).
            repeat_key = plan_repeat_key(document, fingerprint=hexdigest)
            repeated = awaiting_repeat(agent=agent, repeat_key=repeat_key, now=now)
            if repeated is not None:
                return repeat_record(repeated, agent=agent, reservation=reservation), Replay.REPEAT
            plan = _plan_store(
                agent=agent,
                action=action,
                values=values,
                preview=preview,
                policy=policy,
                requirement=requirement,
                reason=reason,
                fingerprinted=(canonical_text, hexdigest, repeat_key),
                correlation_id=correlation_id,
                requester=requester,
                idempotency_key=idempotency_key,
                now=now,
            )
            if reservation is not None:
                IdempotencyRecord.objects.filter(pk=reservation.pk).update(plan=plan)
            deciding_groups_record(plan)
            _hand_on(plan, agent=agent, evaluated=evaluated, grant=grant, notify=notify, now=now)
    except BaseException:
        if reservation is not None:
            # Nothing was stored: free the key so the agent can retry with it.
            IdempotencyRecord.objects.filter(pk=reservation.pk, plan__isnull=True).delete()
        raise
    return plan, None


def _checked_reason(reason: str) -> str:
    reason = normalize(reason or "")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(
            errors=[{"pointer": "/reason", "message": f"at most {MAX_REASON_CHARS} characters"}]
        )
    return reason


def _reserve_key(
    *, agent: Agent, key: str, request: dict[str, Any], requester: dict | None
) -> IdempotencyRecord | Plan:
    """Reserve the agent's Idempotency-Key for this request, or the plan it already made."""
    if requester:
        # The same key for another person is another request (refused as reused).
        request["requester"] = requester_part(requester)
    return idempotency_key_reserve(agent, key, digest(request))


def _previewed(agent: Agent, action: Action, values: dict[str, Any], client):
    """The read-only preview, and the scope and eligibility rules applied to it."""
    try:
        with client:
            preview = compute_preview(action, values, client)
    except TemplateError as exc:
        raise InvalidInput(errors=[{"pointer": "/input", "message": str(exc)}]) from None
    if action.spec.kind != "read":
        # A read is not read before it is approved: the worker applies its scope
        # rules to what it reads, and returns nothing out of scope.
        check_rules(agent, action, preview)
    return preview


def _judged(
    *,
    agent: Agent,
    action: Action,
    values: dict[str, Any],
    preview,
    requester: dict | None,
    revision: bool,
) -> tuple[Evaluated, dict, dict[str, Any], bool]:
    """What the policies and the decision rules say of the plan: (what the policies
    evaluated to, the requirement, the policy part of the fingerprint as far as they
    settle it, and whether an @approve approves it with no person)."""
    spec = action.spec
    policy = {
        "consequence_class": action.consequence_class,
        "approvers_required": spec.approval.approvers,
        "approval_ttl_seconds": spec.approval.approval_ttl,
        "session_grant_eligible": spec.approval.session_grant,
        # "none": a plain observation read an admin lets run without a decision.
        "mode": spec.approval.mode,
        # Approvals must be passkey-signed (approvals/identity/passkeys.py).
        "signed_approval": spec.approval.signed,
    }
    # The policies and the decision rules as of one moment of the catalog (one read of
    # its generation for both).
    with catalog_snapshot():
        evaluated = plan_policies(agent, action, values, preview, requester)
        added = dict(evaluated.result.requirement) if evaluated.result else None
        requirement = requirement_checked(agent, action, values, preview, requester, added)
        # An @approve that held approves only what nothing keeps for people: the
        # floor, a signed action, a reviewer's revision (use_grants=False: someone is
        # looking at it, as for a grant) and the decision rules that own the plan.
        policy_approves, policy_part = policy_approval(
            evaluated,
            requirement=requirement,
            signed=spec.approval.signed,
            revision=revision,
            previewed=spec.previewed,
        )
    if evaluated.result is not None:
        # What the plan got: an @approve something kept for people counts as a review.
        POLICY_DECISIONS.labels(
            outcome=policy_part["outcome"],
            part="enforce",
        ).inc()
    if policy_part:
        # What the policies said, fingerprinted (the set's hash and version, the
        # outcome and the policies that decided, when and at what rate, and why an
        # @approve did not approve it): a plan a policy approved can never be spent
        # under another set, and the worker puts the same plan to the set in force
        # again.
        policy = {**policy, POLICY_PART: policy_part}
    if requirement:
        # Who may decide, fingerprinted: an approval given under one requirement
        # never counts toward another. A rule asks for people, so a plain read an
        # admin lets run undecided goes to them too.
        policy = {
            **policy,
            "requirement": requirement,
            "mode": "per_call" if policy["mode"] == "none" else policy["mode"],
        }
    return evaluated, requirement, policy, policy_approves


def _routed(
    *,
    agent: Agent,
    action: Action,
    values: dict[str, Any],
    requester: dict | None,
    policy: dict[str, Any],
    requirement: dict,
    policy_approves: bool,
    use_grants: bool,
    now,
) -> tuple[dict[str, Any], SessionGrant | None]:
    """Who approves the plan, settled in its policy part: the policies (mode "policy"),
    a session grant (mode "session_grant", naming it), or as before (people, or no one
    for a plain read its action lets run undecided). Returns the policy part and the
    grant that approves it, if one does. Runs in the storing transaction."""
    # Under a lock on the grant until commit: the cap is counted exactly.
    grant = grant_match(agent=agent, action=action, values=values, now=now) if use_grants else None
    # A plain read its action lets run undecided needs no policy ("none"), unless
    # a rule asked for people (mode per_call above): then a policy the rule lets
    # decide may, as for any plan, and the part never says "approve" beside a
    # plan people decide.
    by_policy = policy_approves and policy["mode"] != "none"
    if by_policy:
        # Needs no one: an @approve held, and neither the floor (engine.py) nor
        # the rules that own the plan kept it (policy_approval). In the
        # fingerprint, so only a plan proposed as such runs without a person.
        return {**policy, "mode": POLICY_MODE}, None
    if (
        grant is not None
        and action.spec.approval.mode == "per_call"
        # The floor: nobody approves a plan they requested, by a grant neither.
        and not is_requester(requester, grant.created_by)
        and grant_may_decide(grant, requirement)
    ):
        # In the fingerprinted document: an approval by this grant can never be
        # spent on a plan that was not proposed under it.
        return {**policy, "mode": "session_grant", "grant": str(grant.id)}, grant
    return policy, None


def _fingerprinted(
    *,
    agent: Agent,
    action: Action,
    values: dict[str, Any],
    preview,
    policy: dict[str, Any],
    requester: dict | None,
) -> tuple[dict[str, Any], str, str]:
    """The document the fingerprint is over, its canonical text and its hash."""
    document = fingerprint_document(
        action_name=action.name,
        action_version=action.version,
        action_digest=action.digest,
        agent_id=str(agent.id),
        target=preview.target,
        input=values,
        after=preview.after,
        precondition=preview.precondition,
        policy=policy,
        write_request=preview.write_request,
        requester=requester_part(requester),
    )
    try:
        canonical_text, hexdigest = fingerprint(document)
    except CanonicalJSONError as exc:
        raise PreviewError(
            f"the upstream's representation cannot be fingerprinted: {exc.message}"
        ) from None
    return document, canonical_text, hexdigest


def _plan_store(
    *,
    agent: Agent,
    action: Action,
    values: dict[str, Any],
    preview,
    policy: dict[str, Any],
    requirement: dict,
    reason: str,
    fingerprinted: tuple[str, str, str],
    correlation_id: uuid.UUID,
    requester: dict | None,
    idempotency_key: str | None,
    now,
) -> Plan:
    """The plan stored, counted and audited as proposed (``fingerprinted``: its canonical
    text, fingerprint and repeat key)."""
    canonical_text, hexdigest, repeat_key = fingerprinted
    spec = action.spec
    plan = Plan.objects.create(
        action=action,
        action_version=action.version,
        action_digest=action.digest,
        agent=agent,
        kind=action.kind,
        consequence_class=action.consequence_class,
        input=values,
        target=preview.target,
        before=preview.before,
        after=preview.after,
        changes=preview.changes,
        precondition=preview.precondition,
        policy=policy,
        write_request=preview.write_request,
        summary_markdown=preview.summary_markdown,
        reason=reason,
        fingerprint=hexdigest,
        canonical=canonical_text,
        repeat_key=repeat_key,
        approvals_required=spec.approval.approvers,
        requirement=requirement,
        expires_at=now + timedelta(seconds=spec.approval.plan_ttl),
        correlation_id=correlation_id,
        requester=requester,
    )
    logcontext.bind_plan(plan)
    log.info("plan %s proposed: %s (%s)", plan.id, action.name, action.consequence_class)
    counted_on_commit(
        PLANS_PROPOSED.labels(action=action.name, consequence_class=action.consequence_class).inc
    )
    audit_record(
        kind="plan.proposed",
        actor=agent_actor(agent),
        plan=plan,
        data={
            "action": action.name,
            "action_version": action.version,
            "target": preview.target["path"],
            "idempotency_key": bool(idempotency_key),
            "kind": action.kind,
            **(
                {"on_behalf_of": {"iss": requester["iss"], "sub": requester["sub"]}}
                if requester
                else {}
            ),
        },
    )
    return plan


def _hand_on(
    plan: Plan, *, agent: Agent, evaluated: Evaluated, grant: SessionGrant | None, notify, now
) -> None:
    """A stored plan goes on: its shadow outcome kept, then approved by its grant, by the
    policies or with no decision as its policy part says, or else its groups told."""
    policy = plan.policy
    if evaluated.shadow is not None:
        _shadow_audit(plan, agent, evaluated.shadow)
    if grant is not None:
        grant_approve(plan=plan, grant=grant, now=now)
    elif policy["mode"] == POLICY_MODE:
        result = evaluated.result
        _approve_with_no_person(
            plan,
            actor=POLICY_ACTOR,
            data={
                "policies": list(result.policies),
                "set": result.set_hash,
                "version": result.version,
            },
            now=now,
        )
    elif policy["mode"] == "none":
        _approve_with_no_person(plan, actor=SYSTEM, data={"approval": "none"}, now=now)
    elif notify:
        notify_awaiting(plan.id)
