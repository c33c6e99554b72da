"""State changes for plans and approvals. Views and the API call these; nothing else
writes Plan.status."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from jsonschema.exceptions import ValidationError as SchemaValidationError

from actions.cache import cached, fresh
from actions.cache import snapshot as catalog_snapshot
from actions.clients import read_client
from actions.fingerprint import (
    fingerprint,
    fingerprint_document,
    plan_fingerprint_matches,
    requester_part,
)
from actions.lib import dispatch, logcontext
from actions.lib.actors import POLICY as POLICY_ACTOR
from actions.lib.actors import SYSTEM, agent_actor, user_actor
from actions.lib.audit import audit_record
from actions.lib.canonical import CanonicalJSONError, digest, escape_pointer_token, normalize
from actions.lib.exceptions import (
    ActionChanged,
    AlreadyDecided,
    CountersignError,
    FingerprintMismatch,
    IdempotencyInFlight,
    IdempotencyKeyReused,
    InvalidInput,
    InvalidTransition,
    NoOneCanDecide,
    NotAllowed,
    NotEligible,
    NotFound,
    OutOfScope,
    PolicyRefused,
    UnknownAction,
)
from actions.lib.metrics import BREAK_GLASS, PLANS_PROPOSED, POLICY_DECISIONS, SUBMIT_LATENCY
from actions.models import Action, Agent, AgentScope
from actions.policy.reviewers import requirement_text
from actions.preview import PreviewError, compute_preview
from actions.rules import first_failing, rule_text
from actions.spec import TemplateError

from .decisions.policies import MODE as POLICY_MODE
from .decisions.policies import (
    POLICY_PART,
    Evaluated,
    plan_repeat_key,
    policy_approval,
    policy_submission,
    shadow_disagrees,
)
from .decisions.refusals import refused_submission_record
from .decisions.requester import REQUESTER_REFUSAL, Requester, RequesterMayNotApprove, is_requester
from .decisions.requirements import (
    approval_alone_meets,
    approvals_count,
    approvals_read,
    approvals_standing,
    approvals_standing_meet,
    approvals_void_record,
    deciding_groups_record,
    decision_refusal,
    grant_may_decide,
    plan_policy_requirement,
    plan_requirement,
    reviewer_groups,
)
from .freshness import plan_freshness
from .grants import grant_approve, grant_match
from .identity.passkeys import (
    SignatureRefused,
    approval_nonce_take,
    approval_signature_verify,
    plan_needs_signature,
)
from .lifecycle import plan_expire, plan_transition
from .models import Approval, IdempotencyRecord, Plan, PlanStatus
from .notifications import NoticeEvent, notifications_wanted, notify_awaiting, notify_event
from .permissions import can_review
from .selectors import plan_visible_to
from .wakeups import counted_on_commit

log = logging.getLogger(__name__)

# An Idempotency-Key reservation with no plan after this long belongs to a request
# that died mid-preview; a retry may take it over.
IDEMPOTENCY_RESERVATION_SECONDS = 60
# The advisory lock class (any constant) under which identical proposals take turns.
_REPEAT_LOCK_CLASS = 0x72657074
MAX_REASON_CHARS = 2000


# --- proposing -----------------------------------------------------------------------


def _schema_errors(action: Action, values: dict[str, Any]) -> list[dict[str, str]]:
    errors: list[dict[str, str]] = []
    validator = action.spec.input_validator()
    for error in sorted(validator.iter_errors(values), key=lambda e: list(e.absolute_path)):
        errors.extend(_error_entries(error))
    return errors


def _error_entries(error: SchemaValidationError) -> list[dict[str, str]]:
    base = "/input" + "".join(f"/{escape_pointer_token(p)}" for p in error.absolute_path)
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        return [
            {"pointer": f"{base}/{escape_pointer_token(name)}", "message": "this field is required"}
            for name in error.validator_value
            if name not in instance
        ]
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = set((error.schema or {}).get("properties", {}))
        return [
            {"pointer": f"{base}/{escape_pointer_token(name)}", "message": "unknown field"}
            for name in sorted(set(instance) - known)
        ]
    return [{"pointer": base, "message": error.message}]


def _load_action(agent_id, action_name: str) -> Action | None:
    # One query: the action, its connector, and whether this agent may propose it.
    action = (
        Action.objects.select_related("connector")
        .filter(name=action_name, enabled=True)
        .annotate(
            allowed=Exists(
                Agent.actions.through.objects.filter(agent_id=agent_id, action_id=OuterRef("pk"))
            )
        )
        .first()
    )
    if action is not None:
        action.spec  # noqa: B018 - parsed once, here, and kept with the cached action
    return action


def _resolve_action(agent: Agent, action_name: str) -> Action:
    # Remembered per catalog generation (actions/cache.py): an edit applies at once. An
    # unknown name is not remembered: the name is the caller's, and made-up ones would
    # fill the memory.
    action = cached(
        "action",
        (agent.pk, action_name),
        lambda: _load_action(agent.pk, action_name),
        keep_none=False,
    )
    if action is not None:
        action = fresh(action)
    if action is None:
        raise UnknownAction(
            f"no enabled action named {action_name!r}",
            errors=[{"pointer": "/action", "message": "unknown action"}],
        )
    if not action.allowed:
        raise NotAllowed(f"this agent may not propose {action_name!r}")
    return action


def plan_validate_input(*, agent: Agent, action_name: str, input: Any) -> tuple[Action, dict]:
    action = _resolve_action(agent, action_name)
    if not isinstance(input, dict):
        raise InvalidInput(errors=[{"pointer": "/input", "message": "must be an object"}])
    try:
        values = normalize(input)
    except CanonicalJSONError as exc:
        raise InvalidInput(
            errors=[{"pointer": "/input" + exc.pointer, "message": exc.message}]
        ) from None
    errors = _schema_errors(action, values)
    if not errors and values != input:
        # A string its normal form changed: a format field must already have been in it
        # (a Kelvin sign is refused, never mapped to the K the policies would judge).
        errors = [
            entry
            for error in action.spec.format_errors_as_sent(input)
            for entry in _error_entries(error)
        ]
    if errors:
        raise InvalidInput(errors=errors)
    return action, values


def _reserve_idempotency_key(agent: Agent, key: str, request_hash: str) -> IdempotencyRecord | Plan:
    """Reserve the key, or return the plan an earlier identical request created."""
    for _ in range(2):
        try:
            with transaction.atomic():
                return IdempotencyRecord.objects.create(
                    agent=agent, key=key, request_hash=request_hash
                )
        except IntegrityError:
            pass
        existing = IdempotencyRecord.objects.filter(agent=agent, key=key).first()
        if existing is None:
            continue  # deleted between our insert and our read: try again
        if existing.request_hash != request_hash:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was already used with a different body"
            )
        if existing.plan_id is not None:
            return existing.plan
        age = timezone.now() - existing.created_at
        if age < timedelta(seconds=IDEMPOTENCY_RESERVATION_SECONDS):
            raise IdempotencyInFlight("retry once the first request has finished")
        # The first request died mid-preview; take its reservation over.
        IdempotencyRecord.objects.filter(pk=existing.pk, plan__isnull=True).delete()
    raise IdempotencyInFlight("retry once the first request has finished")


def _refuse(
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


def _check_allow_lists(agent: Agent, action: Action, values: dict[str, Any]) -> None:
    scopes = cached(
        "allow_lists",
        (agent.pk, action.pk),
        lambda: list(AgentScope.objects.filter(agent=agent, action=action)),
    )
    for scope in scopes:
        if values.get(scope.field) not in scope.values:
            _refuse(
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


def _check_rules(agent: Agent, action: Action, preview) -> None:
    """Scope rules on the target (as read, or as it would be created) and eligibility
    rules on the state read. Software refuses what no person should be asked about."""
    definition = action.definition
    subject = preview.before if preview.before is not None else preview.after
    failing = first_failing(definition.get("scope") or [], subject, agent.attributes or {})
    if failing is not None:
        _refuse(agent, action, OutOfScope(rule_text(failing)), "scope")
    if preview.before is not None:
        failing = first_failing(definition.get("eligibility") or [], preview.before, {})
        if failing is not None:
            _refuse(agent, action, NotEligible(rule_text(failing)), "eligibility")


def _plan_policies(
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
        _refuse(
            agent,
            action,
            exc,
            "policy",
            extra={
                "policies": exc.policies,
                "set": exc.set_hash,
                "refused_submission": str(refused.id),
                **({"shadow": _shadow_record(exc.shadow)} if exc.shadow else {}),
            },
        )
        raise
    if evaluated.shadow is not None:
        POLICY_DECISIONS.labels(outcome=evaluated.shadow.outcome, part="shadow").inc()
    return evaluated


def _shadow_record(shadow: dict[str, Any]) -> dict[str, Any]:
    """What a plan keeps of the shadow set's would-have outcome (never enforced)."""
    keep = ("outcome", "policies", "reason", "requirement", "errors", "floor", "set_hash")
    return {k: shadow[k] for k in keep if k in shadow}


def _plan_requirement(
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
        _refuse(agent, action, exc, "decision_rules")
        raise


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
    record = _shadow_record(shadow.as_dict())
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
    with catalog_snapshot():
        action, values = plan_validate_input(agent=agent, action_name=action_name, input=input)
        # Allow-lists need no read: refuse out-of-scope input before touching the upstream.
        _check_allow_lists(agent, action, values)
        client = read_client(action.connector)
        notify = notifications_wanted()
    reason = normalize(reason or "")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(
            errors=[{"pointer": "/reason", "message": f"at most {MAX_REASON_CHARS} characters"}]
        )
    reservation = None
    if idempotency_key:
        request = {"action": action_name, "input": values, "reason": reason}
        if requester:
            # The same key for another person is another request (refused as reused).
            request["requester"] = requester_part(requester)
        request_hash = digest(request)
        reserved = _reserve_idempotency_key(agent, idempotency_key, request_hash)
        if isinstance(reserved, Plan):
            return reserved, Replay.IDEMPOTENCY_KEY
        reservation = reserved
    try:
        spec = action.spec
        try:
            with client:
                preview = compute_preview(action, values, client)
        except TemplateError as exc:
            raise InvalidInput(errors=[{"pointer": "/input", "message": str(exc)}]) from None
        if spec.kind != "read":
            # A read is not read before it is approved: the worker applies its scope
            # rules to what it reads, and returns nothing out of scope.
            _check_rules(agent, action, preview)
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
            evaluated = _plan_policies(agent, action, values, preview, requester)
            added = dict(evaluated.result.requirement) if evaluated.result else None
            requirement = _plan_requirement(agent, action, values, preview, requester, added)
            # An @approve that held approves only what nothing keeps for people: the
            # floor, a signed action, a reviewer's revision (use_grants=False: someone is
            # looking at it, as for a grant) and the decision rules that own the plan.
            policy_approves, policy_part = policy_approval(
                evaluated,
                requirement=requirement,
                signed=spec.approval.signed,
                revision=not use_grants,
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
        now = timezone.now()
        with transaction.atomic():
            # Under a lock on the grant until commit: the cap is counted exactly.
            grant = (
                grant_match(agent=agent, action=action, values=values, now=now)
                if use_grants
                else None
            )
            # A plain read its action lets run undecided needs no policy ("none"), unless
            # a rule asked for people (mode per_call above): then a policy the rule lets
            # decide may, as for any plan, and the part never says "approve" beside a
            # plan people decide.
            by_policy = policy_approves and policy["mode"] != "none"
            if by_policy:
                # Needs no one: an @approve held, and neither the floor (engine.py) nor
                # the rules that own the plan kept it (policy_approval). In the
                # fingerprint, so only a plan proposed as such runs without a person.
                policy = {**policy, "mode": POLICY_MODE}
                grant = None
            elif (
                grant is not None
                and spec.approval.mode == "per_call"
                # The floor: nobody approves a plan they requested, by a grant neither.
                and not is_requester(requester, grant.created_by)
                and grant_may_decide(grant, requirement)
            ):
                # In the fingerprinted document: an approval by this grant can never be
                # spent on a plan that was not proposed under it.
                policy = {**policy, "mode": "session_grant", "grant": str(grant.id)}
            else:
                grant = None
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
            # The same agent proposing the same plan while an earlier one that would do
            # the same still awaits a decision (a client retrying a call) gets that plan
            # back: a person is never asked twice about one plan. Compared by the repeat
            # key, not the fingerprint: the moment the policies judged it is no part of
            # what a plan would do (policies.plan_repeat_key).
            repeat_key = plan_repeat_key(document)
            repeated = _awaiting_repeat(agent=agent, repeat_key=repeat_key, now=now)
            if repeated is not None:
                return _repeat(repeated, agent=agent, reservation=reservation), Replay.REPEAT
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
                expires_at=now + timedelta(seconds=action.spec.approval.plan_ttl),
                correlation_id=correlation_id,
                requester=requester,
            )
            logcontext.bind_plan(plan)
            log.info("plan %s proposed: %s (%s)", plan.id, action.name, action.consequence_class)
            counted_on_commit(
                PLANS_PROPOSED.labels(
                    action=action.name, consequence_class=action.consequence_class
                ).inc
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
            if reservation is not None:
                IdempotencyRecord.objects.filter(pk=reservation.pk).update(plan=plan)
            deciding_groups_record(plan)
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
    except BaseException:
        if reservation is not None:
            # Nothing was stored: free the key so the agent can retry with it.
            IdempotencyRecord.objects.filter(pk=reservation.pk, plan__isnull=True).delete()
        raise
    return plan, None


class Replay(StrEnum):
    """Why plan_submit gave an earlier plan back."""

    IDEMPOTENCY_KEY = "idempotency_key"
    REPEAT = "repeat"


def _awaiting_repeat(*, agent: Agent, repeat_key: str, now) -> Plan | None:
    """The agent's plan with this repeat key (policies.plan_repeat_key: the fingerprint's
    document without the moment the policies judged it) that still awaits a decision,
    locked; one past its expiry is expired here (the sweeper would soon) and does not
    count. Another set of policies, other decision rules or another version of the
    action give another key, so a new plan.

    One round trip on the hot path (no such plan): on PostgreSQL the advisory lock under
    which two identical proposals racing (a client retrying while its first call still
    reads the upstream) take turns until commit, so the second finds the first, and the
    look-up itself (index plan_awaiting_repeat). SQLite starts every write transaction
    IMMEDIATE: one at a time already.
    """
    table = connection.ops.quote_name(Plan._meta.db_table)
    lookup = (
        f"SELECT id FROM {table} WHERE agent_id = %s AND repeat_key = %s "
        "AND status = 'awaiting_approval' LIMIT 1"
    )
    agent_id = Plan._meta.get_field("agent").target_field.get_db_prep_value(agent.pk, connection)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"SELECT pg_advisory_xact_lock(%s, %s); {lookup} FOR UPDATE",
                [_REPEAT_LOCK_CLASS, int(repeat_key[:7], 16), agent_id, repeat_key],
            )
            cursor.nextset()
        else:
            cursor.execute(lookup, [agent_id, repeat_key])
        row = cursor.fetchone()
    if row is None:
        return None
    plan = Plan.objects.select_related("action").get(pk=row[0])
    if plan.expires_at <= now:
        plan_expire(plan, actor=SYSTEM, now=now)
        return None
    return plan


def _repeat(plan: Plan, *, agent: Agent, reservation: IdempotencyRecord | None) -> Plan:
    audit_record(
        kind="plan.repeated",
        actor=agent_actor(agent),
        plan=plan,
        data={"idempotency_key": reservation is not None},
    )
    if reservation is not None:
        # The key now names the plan it was given back, like any other replay.
        IdempotencyRecord.objects.filter(pk=reservation.pk).update(plan=plan)
    return plan


def _cancel(plan: Plan, *, actor: str, event: str, who: str) -> Plan:
    """Stop a plan before the worker sends anything.

    Awaiting or approved plans can be cancelled; the worker's claim only takes an
    approved plan, so a cancelled one is never sent. Once the worker has claimed it the
    request may already be on its way: that is refused, and the outcome will say
    whether the request left.
    """
    if plan.status not in (PlanStatus.AWAITING_APPROVAL, PlanStatus.APPROVED):
        if plan.status == PlanStatus.EXECUTING:
            raise InvalidTransition(
                "the worker is already executing this plan; the request may have been sent"
            )
        raise InvalidTransition(f"this plan is {plan.status} and can no longer be cancelled")
    stage = "before a decision" if plan.status == PlanStatus.AWAITING_APPROVAL else "after approval"
    return plan_transition(
        plan,
        to=PlanStatus.CANCELLED,
        actor=actor,
        event=event,
        finished_at=timezone.now(),
        outcome_detail=f"cancelled by {who} {stage}; nothing was sent",
    )


def plan_cancel(*, agent: Agent, plan_id) -> Plan:
    plan = Plan.objects.filter(id=plan_id, agent=agent).select_related("action").first()
    if plan is None:
        raise NotFound("no such plan for this agent")
    return _cancel(plan, actor=agent_actor(agent), event="plan.cancelled", who="the agent")


def approval_revoke(*, plan_id, reviewer) -> Plan:
    """A reviewer withdraws consent before the worker sends anything."""
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    plan = Plan.objects.filter(id=plan_id).select_related("action").first()
    if plan is None:
        raise NotFound("no such plan")
    if plan.status != PlanStatus.APPROVED:
        raise InvalidTransition(f"only an approved plan can be revoked; this one is {plan.status}")
    return _cancel(plan, actor=user_actor(reviewer), event="approval.revoked", who="a reviewer")


# --- reviewers ----------------------------------------------------------------------

REVIEWERS_GROUP = "reviewers"


def reviewers_group_ensure(*, name: str = REVIEWERS_GROUP) -> tuple[Group, bool]:
    """The group ``name``, whose members may review plans (``approvals.review_plan``);
    created with that permission if missing, and with the one to view every plan
    read-only (``approvals.view_plan``: the queue's "all plans"), which an administrator
    may take away so that its members see only what their groups decide. Returns the
    group and whether it was made.

    An existing group without the permission is refused rather than given it: every
    one of its members would become a reviewer as a side effect. So is one that may
    change the catalog, its agents, credentials or the vault (an ``actions`` add,
    change or delete permission): a reviewer never administers what they approve
    (approvals/roles.py)."""
    permission = Permission.objects.get(content_type__app_label="approvals", codename="review_plan")
    group, created = Group.objects.get_or_create(name=name)
    if created:
        view = Permission.objects.get(content_type__app_label="approvals", codename="view_plan")
        group.permissions.add(permission, view)
        return group, created
    if not group.permissions.filter(pk=permission.pk).exists():
        raise NotAllowed(
            f"the group {name!r} exists without the permission to review plans; "
            "grant it in the admin, or choose another group"
        )
    administering = sorted(
        group.permissions.filter(
            content_type__app_label="actions",
            codename__regex=r"^(add|change|delete)_",
        ).values_list("codename", flat=True)
    )
    if administering:
        raise NotAllowed(
            f"the group {name!r} may also administer ({', '.join(administering)}): a "
            "reviewer never administers what they approve; take those permissions from "
            "it (manage.py roles does, for the reviewers group), or choose another group"
        )
    return group, created


def reviewer_create(
    *, username: str, password: str, email: str = "", group: str = REVIEWERS_GROUP, actor: str
):
    """A person who may review plans: a new user in ``group`` (see reviewers_group_ensure).

    The password must pass the configured validators (AUTH_PASSWORD_VALIDATORS); only
    its hash is stored, and it is never recorded or logged. Returns the user and whether
    the group was made for it."""
    users = get_user_model()._default_manager
    field = users.model.USERNAME_FIELD
    if users.filter(**{field: username}).exists():
        raise InvalidInput(f"a user named {username!r} already exists")
    user = users.model(**{field: username}, email=users.normalize_email(email))
    errors = []
    try:
        user.full_clean(exclude=["password"])
    except ValidationError as exc:
        errors += [
            {"pointer": f"/{name}", "message": message}
            for name, messages in exc.message_dict.items()
            for message in messages
        ]
    try:
        validate_password(password, user=user)
    except ValidationError as exc:
        errors += [{"pointer": "/password", "message": message} for message in exc.messages]
    if errors:
        raise InvalidInput(errors=errors)
    user.set_password(password)
    try:
        with transaction.atomic():
            user.save()
            reviewers, created = reviewers_group_ensure(name=group)
            user.groups.add(reviewers)
            audit_record(
                kind="reviewer.created",
                actor=actor,
                data={"username": username, "group": group, "group_created": created},
            )
    except IntegrityError:  # created meanwhile by someone else
        raise InvalidInput(f"a user named {username!r} already exists") from None
    return user, created


# --- deciding -----------------------------------------------------------------------


def approval_record(
    *,
    plan_id,
    reviewer,
    decision: str,
    fingerprint_seen: str,
    comment: str = "",
    assertion: Any = None,
    nonce: str = "",
    break_glass: bool = False,
) -> Plan:
    """Record a reviewer's decision on the exact fingerprint they saw.

    The fingerprint is recomputed from the plan's columns and compared with both the
    stored one and the one posted; any difference means the reviewer did not see this
    plan, and nothing is approved (the refusal itself is audited).

    ``break_glass``: a superuser decides a plan whose groups they are not in, giving the
    reason as ``comment``. Held to everything else a decision is (the fingerprint, the
    floor: never their own request, the registrar never alone on an irreversible plan,
    a passkey signature where signing is on), audited as ``approval.break_glass``,
    counted in /metrics and told to every group of the plan. Its approval fills one
    threshold place of any group (approvals/decisions).
    """
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    if decision not in Approval.Decision.values:
        raise InvalidInput(errors=[{"pointer": "/decision", "message": "approve or deny"}])
    comment = (comment or "")[:2000]
    if break_glass:
        _break_glass_check(plan_id, reviewer, decision, comment)
    failure: Exception | None = None
    signed: dict | Exception = {}
    # Spent now, whatever happens next: a signing request is good for one attempt.
    issued = approval_nonce_take(nonce) if decision == Approval.Decision.APPROVE else None
    now = timezone.now()
    with transaction.atomic():
        plan = (
            Plan.objects.select_for_update(of=("self",))
            .select_related("action", "agent")
            .filter(id=plan_id)
            .first()
        )
        if plan is None:
            raise NotFound("no such plan")
        if plan.status != PlanStatus.AWAITING_APPROVAL:
            raise InvalidTransition(f"this plan is {plan.status} and can no longer be decided")
        if plan.expires_at <= now:
            plan_expire(plan, actor=SYSTEM, now=now)
            failure = InvalidTransition("this plan expired before a decision")
        elif not plan_fingerprint_matches(plan) or fingerprint_seen != plan.fingerprint:
            audit_record(
                kind="approval.fingerprint_mismatch",
                actor=user_actor(reviewer),
                plan=plan,
                data={"decision": decision, "fingerprint_seen": str(fingerprint_seen)[:64]},
            )
            failure = FingerprintMismatch(
                "the fingerprint you saw does not match this plan; reload and review again"
            )
        elif decision == Approval.Decision.APPROVE and (
            plan.action_version != plan.action.version
            or plan.action_digest != plan.action.digest
            or not plan.action.enabled
            or not plan.action.definition_intact()
        ):
            audit_record(
                kind="approval.action_changed",
                actor=user_actor(reviewer),
                plan=plan,
                data={"plan_version": plan.action_version, "action_version": plan.action.version},
            )
            failure = ActionChanged(
                "the action changed since this preview; the agent must propose again"
            )
        elif plan.approvals.filter(reviewer=reviewer).exists():
            raise AlreadyDecided("you have already decided on this plan")
        elif decision == Approval.Decision.APPROVE and is_requester(plan.requester, reviewer):
            audit_record(
                kind="approval.requester_refused",
                actor=user_actor(reviewer),
                plan=plan,
                data={"reason": "the reviewer is the person the plan was requested for"},
            )
            failure = RequesterMayNotApprove(REQUESTER_REFUSAL)
        elif break_glass and (
            not plan_policy_requirement(plan) or reviewer_groups(plan, reviewer, at=now)
        ):
            # Break-glass is the way past a plan's groups, not a second way to decide.
            raise InvalidInput(
                "you may decide this plan without breaking glass",
                errors=[{"pointer": "/break_glass", "message": "decide it the ordinary way"}],
            )
        elif (
            refusal := decision_refusal(
                plan,
                reviewer,
                approving=decision == Approval.Decision.APPROVE,
                break_glass=break_glass,
            )
        ) is not None:
            # Who may decide (approvals/decisions): outside the plan's groups, or the
            # rules changed since it was proposed. Audited; nothing is decided.
            error, why, kind = refusal
            audit_record(
                kind=kind,
                actor=user_actor(reviewer),
                plan=plan,
                data={"decision": decision, "reason": why},
            )
            failure = error(why)
        elif decision == Approval.Decision.APPROVE and _creator_would_approve_alone(
            plan, reviewer, break_glass=break_glass
        ):
            audit_record(
                kind="approval.separation_of_duties",
                actor=user_actor(reviewer),
                plan=plan,
                data={"agent": plan.agent.name},
            )
            failure = NotAllowed(
                "you registered this agent: another reviewer must approve its irreversible plans"
            )
        elif decision == Approval.Decision.APPROVE and isinstance(
            signed := _signature_or_refusal(plan, reviewer, assertion, nonce, issued), Exception
        ):
            failure = signed
        else:
            ttl = plan.policy.get("approval_ttl_seconds", 900)
            Approval.objects.create(
                plan=plan,
                reviewer=reviewer,
                decision=decision,
                fingerprint=plan.fingerprint,
                comment=comment,
                expires_at=now + timedelta(seconds=ttl),
                groups=[] if break_glass else reviewer_groups(plan, reviewer, at=now),
                break_glass=break_glass,
                **(signed if isinstance(signed, dict) else {}),
            )
            actor = user_actor(reviewer)
            if break_glass:
                _break_glass_record(plan, reviewer, decision, comment)
            if decision == Approval.Decision.DENY:
                plan_transition(
                    plan,
                    to=PlanStatus.DENIED,
                    actor=actor,
                    event="plan.denied",
                    data={
                        "comment": comment,
                        **({"shadow_disagreed": True} if shadow_disagrees(plan, "deny") else {}),
                    },
                    decided_at=now,
                    finished_at=now,
                    outcome_detail="denied by a reviewer",
                )
            else:
                rows = approvals_read(
                    plan,
                    plan.approvals.filter(
                        decision=Approval.Decision.APPROVE, fingerprint=plan.fingerprint
                    ),
                )
                # Only approvals whose makers may still give them count: one by someone
                # deactivated, no longer allowed to review or out of the group it was
                # for since is void, and audited as such (approvals/decisions).
                standing = approvals_standing(plan, rows)
                approvals_void_record(plan, rows, standing, actor=SYSTEM)
                data = {
                    "approvals": len(rows) - len(standing.void),
                    "required": plan.required_approvals,
                    "comment": comment,
                }
                if standing.void:
                    data["void"] = len(standing.void)
                if plan_policy_requirement(plan):
                    assessment = approvals_count(plan, rows, standing)
                    met = assessment.met
                    data["groups"] = [] if break_glass else reviewer_groups(plan, reviewer, at=now)
                    data["requirement_met"] = met
                else:
                    met = approvals_standing_meet(plan, rows, standing)
                if break_glass:
                    data["break_glass"] = True
                audit_record(kind="approval.recorded", actor=actor, plan=plan, data=data)
                if met:
                    # Registered first, so the worker's wake-up leaves at commit ahead of
                    # the long-polls' (both run on commit, in this order; neither if the
                    # transition below fails and the transaction rolls back).
                    dispatch.on_commit(dispatch.EXECUTE_PLAN, plan.id)
                    plan_transition(
                        plan,
                        to=PlanStatus.APPROVED,
                        actor=actor,
                        event="plan.approved",
                        data={"shadow_disagreed": True}
                        if shadow_disagrees(plan, "approve")
                        else None,
                        decided_at=now,
                        enqueued_at=now,
                    )
    if failure is not None:
        raise failure
    return plan


def _signature_or_refusal(plan: Plan, reviewer, assertion, nonce, issued) -> dict | Exception:
    """For a plan whose approvals must be signed: the verified signature to store with
    the approval, or the refusal (audited); an empty dict when none is needed."""
    if not plan_needs_signature(plan):
        return {}
    try:
        return approval_signature_verify(
            plan=plan, reviewer=reviewer, assertion=assertion, nonce=nonce, issued=issued
        )
    except SignatureRefused as exc:
        audit_record(
            kind="approval.signature_refused",
            actor=user_actor(reviewer),
            plan=plan,
            data={"reason": str(exc)[:200]},
        )
        return exc


def _break_glass_check(plan_id, reviewer, decision: str, reason: str) -> None:
    """A break-glass decision needs a superuser and a typed reason; a refusal is audited
    like the decision would have been."""
    why = None
    if not (reviewer.is_active and reviewer.is_superuser):
        why = NotAllowed("only a superuser may decide by break-glass")
    elif not reason.strip():
        why = InvalidInput(
            "a break-glass decision needs a reason",
            errors=[{"pointer": "/comment", "message": "give the reason for breaking glass"}],
        )
    if why is None:
        return
    plan = Plan.objects.filter(id=plan_id).first()
    if plan is None:
        raise NotFound("no such plan")
    with transaction.atomic():
        audit_record(
            kind="approval.break_glass_refused",
            actor=user_actor(reviewer),
            plan=plan,
            data={"decision": decision, "reason": why.detail},
        )
    raise why


def _break_glass_record(plan: Plan, reviewer, decision: str, reason: str) -> None:
    """Audited as such, counted, and told to every group of the plan (on commit)."""
    audit_record(
        kind="approval.break_glass",
        actor=user_actor(reviewer),
        plan=plan,
        data={
            "decision": decision,
            "reason": reason,
            "requirement": requirement_text(plan_policy_requirement(plan)) or "class default",
        },
    )
    counted_on_commit(BREAK_GLASS.labels(decision=decision).inc)
    notify_event(plan.id, NoticeEvent.BREAK_GLASS)


def _creator_would_approve_alone(plan: Plan, reviewer, *, break_glass: bool = False) -> bool:
    """Separation of duties: the person who registered an agent may not be the only one
    approving its irreversible plans (COUNTERSIGN_CREATOR_MAY_APPROVE_IRREVERSIBLE).
    Where two approvers are required the distinct-approver rule already brings in a
    second person, so this bites only when one approval would be enough."""
    if getattr(settings, "COUNTERSIGN_CREATOR_MAY_APPROVE_IRREVERSIBLE", False):
        return False
    if plan.consequence_class != "irreversible" or plan.agent.created_by_id is None:
        return False
    if plan.agent.created_by_id != reviewer.pk:
        return False
    rows = list(
        plan.approvals.filter(
            decision=Approval.Decision.APPROVE, fingerprint=plan.fingerprint
        ).exclude(reviewer=reviewer)
    )
    # Someone else's approval that no longer counts is no one else's approval.
    others = len(rows) - len(approvals_standing(plan, rows).void)
    if plan_policy_requirement(plan):
        # Decision rules: refused when this approval alone would meet the requirement.
        return others == 0 and approval_alone_meets(plan, reviewer, break_glass=break_glass)
    return others + 1 >= plan.required_approvals and others == 0


# --- unsettled outcomes: a person looks, or says what they found -----------------------


def plan_check_request(*, plan_id, reviewer) -> Plan:
    """ "Check now": a reviewer asks a worker to look at an unsettled outcome at once (the
    status request of accepted work, or the reconciliation of an unknown outcome).

    The look runs in a worker, never in the web process: repeating a keyed request
    needs the write credential, which only workers can open. It is due now in the
    database, so the sweeper publishes it again if this message is lost."""
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    if not plan_visible_to(reviewer, plan_id):
        raise NotFound("no such plan")
    with transaction.atomic():
        plan = Plan.objects.select_for_update(of=("self",)).filter(id=plan_id).first()
        if plan is None:
            raise NotFound("no such plan")
        if plan.status not in PlanStatus.unsettled():
            raise InvalidTransition(
                f"only an unknown or pending outcome can be checked; this one is {plan.status}"
            )
        actor = user_actor(reviewer)
        Plan.objects.filter(pk=plan.pk).update(next_check_at=timezone.now())
        audit_record(kind="reconcile.requested", actor=actor, plan=plan)
        dispatch.on_commit(dispatch.RECONCILE, plan.id, actor)
    return plan


def plan_resolve(*, plan_id, reviewer, state: str, note: str) -> Plan:
    """A person records what they found for an unknown outcome."""
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    allowed = (PlanStatus.COMPLETED, PlanStatus.REJECTED, PlanStatus.ALREADY_IN_DESIRED_STATE)
    if state not in allowed:
        raise InvalidInput(
            errors=[{"pointer": "/state", "message": f"one of {', '.join(allowed)}"}]
        )
    note = (note or "").strip()[:2000]
    if not note:
        raise InvalidInput(errors=[{"pointer": "/note", "message": "say what you found"}])
    if not plan_visible_to(reviewer, plan_id):
        raise NotFound("no such plan")
    with transaction.atomic():
        plan = (
            Plan.objects.select_for_update(of=("self",))
            .select_related("action")
            .filter(id=plan_id)
            .first()
        )
        if plan is None:
            raise NotFound("no such plan")
        if plan.status != PlanStatus.UNKNOWN:
            raise InvalidTransition(
                f"only an unknown outcome can be resolved; this one is {plan.status}"
            )
        plan_transition(
            plan,
            to=state,
            actor=user_actor(reviewer),
            event="reconcile.resolved_by_person",
            data={"note": note},
            finished_at=timezone.now(),
            outcome_detail=f"resolved by a reviewer: {state}",
            next_check_at=None,
        )
    return plan


# --- revisions: a reviewer previews again or edits ------------------------------------


def _plan_revise(*, original: Plan, reviewer, input: dict[str, Any], why: str) -> Plan:
    """Propose ``input`` again for the original's agent and action, then link it.

    The new plan goes through plan_submit exactly as if the agent had sent it (schema,
    allow-lists, scope rules, a fresh read-only preview and its own fingerprint). The
    preview reads the upstream, so no lock is held while it runs.
    """
    plan, replayed = plan_submit(
        agent=original.agent,
        action_name=original.action.name,
        input=input,
        reason=original.reason,
        # A reviewer is looking at this plan: it goes to a person, not to a grant or a
        # policy's approval.
        use_grants=False,
        # Still for the same person (and so never theirs to approve).
        requester=original.requester,
    )
    if replayed is not None:
        # The agent already proposed exactly this and it awaits a decision: that plan is
        # in the queue, and it is not this plan's revision.
        raise InvalidTransition(f"the same plan already awaits a decision: {plan.id}")
    with transaction.atomic():
        Plan.objects.filter(id=plan.id).update(revision_of=original)
        plan.revision_of = original
        audit_record(
            kind="plan.revised",
            actor=user_actor(reviewer),
            plan=plan,
            data={"revision_of": str(original.id), "why": why},
        )
    return plan


def plan_preview_again(*, plan_id, reviewer) -> Plan:
    """Propose a plan again with the same agent, action, input and reason: a stale plan,
    or one still awaiting a decision whose target changed since its preview (then the
    original is cancelled as superseded, as an edit does). The target is read first,
    outside any transaction: an awaiting plan whose preview still holds stays as it is.
    """
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    original = Plan.objects.select_related("action", "agent").filter(id=plan_id).first()
    if original is None:
        raise NotFound("no such plan")
    if original.status not in (PlanStatus.STALE, PlanStatus.AWAITING_APPROVAL):
        raise InvalidTransition(
            "only a stale plan, or one whose target changed since its preview, can be "
            f"previewed again; this one is {original.status}"
        )
    if original.revisions.exists():
        raise InvalidTransition("this plan was already previewed again")
    _may_revise(original, reviewer)
    if original.status == PlanStatus.STALE:
        return _plan_revise(original=original, reviewer=reviewer, input=original.input, why="stale")
    if not plan_freshness(original).obsolete:
        raise InvalidTransition("the target has not changed since this preview")
    revision = _plan_revise(original=original, reviewer=reviewer, input=original.input, why="moved")
    _supersede(
        original,
        revision,
        actor=user_actor(reviewer),
        detail="superseded: the target changed since the preview and a reviewer previewed it again",
    )
    return revision


def _may_revise(original: Plan, reviewer) -> None:
    """Editing or previewing a plan again replaces it: only someone who may decide it does
    (its groups, under decision rules; a break-glass is a decision, not an edit)."""
    refusal = decision_refusal(original, reviewer, approving=False)
    if refusal is None:
        return
    error, why, kind = refusal
    with transaction.atomic():
        audit_record(
            kind=kind,
            actor=user_actor(reviewer),
            plan=original,
            data={"decision": "revise", "reason": why},
        )
    raise error(why)


def _supersede(original: Plan, revision: Plan, *, actor: str, detail: str) -> None:
    """Cancel ``original`` for ``revision``; if it was decided meanwhile, cancel the
    revision instead, so exactly one of the two stays decidable."""
    now = timezone.now()
    try:
        plan_transition(
            original,
            to=PlanStatus.CANCELLED,
            actor=actor,
            event="plan.superseded",
            data={"superseded_by": str(revision.id)},
            finished_at=now,
            outcome_detail=detail,
        )
    except InvalidTransition:
        Plan.objects.filter(id=revision.id).update(revision_of=None)
        plan_transition(
            revision,
            to=PlanStatus.CANCELLED,
            actor=actor,
            event="plan.cancelled",
            finished_at=now,
            outcome_detail="the original plan was decided before the edit was saved",
        )
        raise InvalidTransition(
            "the plan was decided while you edited it; nothing was replaced"
        ) from None


def plan_edit(*, plan_id, reviewer, input: Any) -> Plan:
    """A reviewer changes the input of an awaiting plan: a new revision replaces it.

    The original is cancelled ("superseded by a reviewer's edit") in the same
    transaction that links the revision; if it was decided meanwhile, the revision is
    cancelled instead, so exactly one of the two stays decidable.
    """
    if not can_review(reviewer):
        raise NotAllowed("you are not a reviewer")
    original = Plan.objects.select_related("action", "agent").filter(id=plan_id).first()
    if original is None:
        raise NotFound("no such plan")
    if original.status != PlanStatus.AWAITING_APPROVAL:
        raise InvalidTransition(
            f"only a plan awaiting approval can be edited; this one is {original.status}"
        )
    _may_revise(original, reviewer)
    if isinstance(input, dict) and normalize(input) == original.input:
        raise InvalidInput(errors=[{"pointer": "/input", "message": "nothing was changed"}])
    revision = _plan_revise(original=original, reviewer=reviewer, input=input, why="edit")
    _supersede(
        original, revision, actor=user_actor(reviewer), detail="superseded by a reviewer's edit"
    )
    return revision
