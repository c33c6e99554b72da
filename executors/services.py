"""Executing approved plans: claim, open the credential, revalidate, send once, classify,
record. Each step is a function below; the order is the guarantee:

1. **Claim** under a row lock, in one transaction: the plan must be ``approved``; its
   approvals must match the recomputed fingerprint, be unexpired and unused; the
   action must not have changed; a write credential must exist. The approvals are
   spent and an Attempt with a fresh idempotency key is committed.
2. **Open** the write credential (only a worker holds the key) and get its token.
3. **Revalidate** (no lock held, no transaction open): re-read the target with the
   read-only client; a version other than the one previewed ends the plan ``stale``
   and nothing is written.
4. **Fence, then send**: commit "sending" before the request leaves, so a crash from
   here on is seen as "the request may have left" and never sent again; send the
   conditional write once (again only with the same idempotency key, where declared).
5. **Classify** the answer and **record** it, with the plan's outcome, in one commit.

Every change of the plan's status and of the attempt's state goes through
approvals.lifecycle; looks at unsettled outcomes are scheduled in executors.reconciliation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from actions.cache import snapshot as catalog_snapshot
from actions.clients import credential_auth, read_client
from actions.fingerprint import plan_fingerprint_matches
from actions.lib import dispatch
from actions.lib.actors import EXECUTOR
from actions.lib.audit import audit_record
from actions.lib.canonical import CanonicalJSONError
from actions.lib.exceptions import InvalidTransition
from actions.lib.http import (
    READ_METHODS,
    Auth,
    UpstreamError,
    UpstreamResponse,
    WriteClient,
    connector_url,
)
from actions.lib.outage import database_unavailable, noted
from actions.lib.redaction import REDACTED, filter_text, redact_headers
from actions.models import Credential, VaultState, action_by_id
from actions.oauth import TokenError
from actions.preview import PreviewError, UpstreamEchoesSecrets, read_target
from actions.rules import first_failing, rule_text
from actions.vault import VaultError
from approvals.decisions.policies import MODE as POLICY_MODE
from approvals.decisions.policies import policy_claim_refusal
from approvals.decisions.requester import requester_approval_problem
from approvals.decisions.requirements import claim_refusal, claim_void_problem
from approvals.grants import grant_refusal_reason
from approvals.identity.passkeys import plan_signature_problem
from approvals.lifecycle import (
    approvals_spend,
    attempt_count_send,
    attempt_fence,
    attempt_open,
    attempt_transition,
    execution_end,
    plan_transition,
)
from approvals.models import Attempt, Plan, PlanStatus

from .outcomes import classify, refused_in_body, retry_after_seconds
from .reconciliation import FIRST_FOLLOW_SECONDS, RECONCILE_DELAYS, due, read_back, wake_look
from .results import project
from .vault import open_write_secret

log = logging.getLogger(__name__)

ACTOR = EXECUTOR
# Tries to reach the upstream before sending anything, before giving up honestly.
MAX_UNSENT_TRIES = 3
# Longest wait honoured for a 429's Retry-After before giving up (seconds).
MAX_RETRY_WAIT_SECONDS = 30.0

VAULT_LOCKED = "the vault is locked"
NO_VALID_APPROVAL = "no valid approval: missing, expired or already used"
NO_WRITE_CREDENTIAL = "no usable write credential (missing, revoked or expired)"


@dataclass
class Claim:
    plan: Plan
    attempt: Attempt
    credential: Credential


@dataclass
class Sent:
    """What the send step ends with: the answer, and how it was reached."""

    response: UpstreamResponse
    sends: int
    notes: list[str] = field(default_factory=list)


class _Done(Exception):
    """A step ended the execution; ``outcome`` is what execution_run returns."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


def redact_text(text: str, secrets: list[str]) -> str:
    """Filter an upstream's text for people (see actions.lib.redaction)."""
    return filter_text(text, secrets=secrets)


def execution_run(*, plan_id) -> str:
    """Execute one approved plan at most once. Returns the outcome (or why nothing ran).

    One execution sees the catalog as of one moment, its claim (actions/cache.py): the
    action, the write credential and the read credential of the re-read."""
    with catalog_snapshot():
        claim = _claim(plan_id)
        if claim is None:
            plan = Plan.objects.filter(id=plan_id).only("status").first()
            return f"skipped:{plan.status if plan else 'missing'}"
        try:
            if claim.plan.kind == "read":
                return _read(claim)
            auth = _open_credential(claim)
            found = _revalidate_or_stop(claim)
            sent = _send(claim, auth, found)
            return _record(claim, auth, sent)
        except _Done as done:
            return done.outcome


# --- 1. claim -------------------------------------------------------------------------


def _refusal_reason(plan: Plan, now) -> str | None:
    """Why this plan must not be sent, from what the claim already read; the approvals
    are checked last, by spending them (approvals.lifecycle.approvals_spend)."""
    if VaultState.is_locked():
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


def _needs_no_approval(plan: Plan) -> bool:
    """No person's approval to spend: a plain observation read its action lets run
    without a decision (the plan's fingerprinted policy says so, and the action,
    unchanged since or the claim refuses, still does), or a plan the catalog's policies
    approved (checked again above: policy_claim_refusal), never an irreversible one."""
    spec = plan.action.spec
    if plan.policy.get("mode") == POLICY_MODE:
        return plan.consequence_class != "irreversible" and not spec.approval.signed
    return (
        plan.policy.get("mode") == "none"
        and plan.kind == "read"
        and spec.approval.mode == "none"
        and not spec.sensitive
    )


def _event(plan: Plan, step: str) -> str:
    """What the audit trail calls a step: a read never appears as a write."""
    return f"{'read' if plan.kind == 'read' else 'execution'}.{step}"


def _claim(plan_id) -> Claim | None:
    now = timezone.now()
    with transaction.atomic():
        # Only the plan's row is locked (see docs/benchmarks.md: locking a joined action
        # row serialized every execution of an action and could deadlock). The action
        # and its connector come from the catalog cache, as fresh as a join would read
        # them (actions/cache.py) and without compiling a four-table join per claim.
        plan = (
            Plan.objects.select_for_update(of=("self",))
            .select_related("attempt")
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
            reason = _refusal_reason(plan, now)
            # A read uses the read credential only; there is no write to open.
            if reason is None and plan.kind != "read":
                credential = plan.action.connector.credential(Credential.Role.WRITE)
                if credential is None:
                    reason = NO_WRITE_CREDENTIAL
        if reason is None and not (_needs_no_approval(plan) or approvals_spend(plan, now)):
            reason = NO_VALID_APPROVAL
        if reason is not None:
            plan_transition(
                plan,
                to=PlanStatus.REFUSED,
                actor=ACTOR,
                event=_event(plan, "refused"),
                data={"reason": reason},
                finished_at=now,
                outcome_detail=f"refused before sending: {reason}",
            )
            return None
        attempt = attempt_open(plan)
        plan_transition(
            plan,
            to=PlanStatus.EXECUTING,
            actor=ACTOR,
            event=_event(plan, "claimed"),
            data={"attempt": str(attempt.id), "try": attempt.tries},
            claimed_at=now,
        )
    return Claim(plan=plan, attempt=attempt, credential=credential)


# --- ending an execution ------------------------------------------------------------------

# The first wait before recording again, and the longest (seconds).
RECORD_FIRST_WAIT = 0.25
RECORD_MAX_WAIT = 2.0


def _clock() -> float:
    return time.monotonic()


def _drop_connection() -> None:
    try:
        connection.close()
    except Exception:  # noqa: BLE001, S110 - a broken connection is dropped anyway
        pass


def _recorded(
    claim: Claim, write: Callable[[], Any], *, to: str | None, attempt_to: str | None
) -> None:
    """Run ``write`` (one commit of what this execution learned), and while the database
    cannot be reached, keep what it holds and run it again, backing off, for at most
    COUNTERSIGN_RECORD_RETRY_SECONDS. Nothing is ever sent again here: only the record.

    Every write is conditional on the attempt still being this worker's try
    (approvals.lifecycle), so a retry after the sweeper settled the plan (the lease ran
    out) changes nothing. A commit whose answer was lost may have applied: if a retry
    finds the plan and its attempt already where ``write`` moves them, it did. Given up,
    the exception goes on and the lease and a reconciliation settle the plan, as before.
    """
    plan, attempt = claim.plan, claim.attempt
    deadline = _clock() + settings.COUNTERSIGN_RECORD_RETRY_SECONDS
    wait, tries, started = RECORD_FIRST_WAIT, 0, _clock()
    while True:
        status, state = plan.status, attempt.state
        try:
            write()
        except InvalidTransition:
            if not tries:
                raise
            if _already_recorded(claim, to=to, attempt_to=attempt_to):
                log.warning("plan %s: the record committed before the database went away", plan.id)
                return
            # The lease ran out meanwhile and the sweeper settled the plan (unknown, then
            # a reconciliation): its record stands, this one is not made.
            log.warning("plan %s: settled by the sweeper while the database was away", plan.id)
            raise _Done("skipped:claim-lost") from None
        except Exception as exc:
            if connection.in_atomic_block or not database_unavailable(exc):
                raise
            # What a rolled-back transaction moved in memory only.
            plan.status, attempt.state = status, state
            tries += 1
            _drop_connection()
            if tries == 1:
                noted(exc, f"worker recording plan {plan.id}")
            if _clock() + wait > deadline:
                log.warning(
                    "plan %s: the upstream's answer could not be recorded in %.0f s (%d tries); "
                    "the execution lease and a reconciliation will settle it",
                    plan.id,
                    _clock() - started,
                    tries,
                )
                raise
            _sleep(wait)
            wait = min(wait * 2, RECORD_MAX_WAIT)
            continue
        if tries:
            log.warning(
                "plan %s: recorded once the database was back (%d tries, %.1f s)",
                plan.id,
                tries + 1,
                _clock() - started,
            )
        return


def _already_recorded(claim: Claim, *, to: str | None, attempt_to: str | None) -> bool:
    """Whether the plan and its attempt are where this worker's write moves them, on the
    attempt's own try: a commit whose answer was lost, not the sweeper's doing."""
    found = (
        Attempt.objects.filter(pk=claim.attempt.pk, tries=claim.attempt.tries)
        .values_list("state", "plan__status")
        .first()
    )
    if found is None:
        return False
    state, status = found
    return (attempt_to is None or state == attempt_to) and (to is None or status == to)


def _finish(
    claim: Claim,
    *,
    to: str,
    detail: str,
    attempt_state: str,
    upstream_status: int | None = None,
    event_data: dict[str, Any] | None = None,
    look_in: float | None = None,
    plan_fields: dict[str, Any] | None = None,
    **attempt_fields: Any,
) -> Plan:
    """Record the attempt's end and the plan's outcome in one transaction. ``look_in``
    schedules the first automatic look at an unsettled outcome (a status request for
    ``pending``, a reconciliation for ``unknown``) in the same commit; ``plan_fields``
    carry the result and whether the effect was verified."""
    now = timezone.now()

    def write() -> None:
        with transaction.atomic():
            execution_end(
                claim.plan,
                claim.attempt,
                to=to,
                attempt_to=attempt_state,
                actor=ACTOR,
                event=_event(claim.plan, to),
                data={
                    "attempt": str(claim.attempt.id),
                    "upstream_status": upstream_status,
                    **(event_data or {}),
                },
                attempt_fields={"finished_at": now, **attempt_fields},
                finished_at=now,
                outcome_detail=detail,
                upstream_status=upstream_status,
                next_check_at=due(now, look_in),
                **(plan_fields or {}),
            )
            if look_in is not None:
                wake_look(claim.plan.id, to, countdown=look_in)

    _recorded(claim, write, to=to, attempt_to=attempt_state)
    return claim.plan


def _refuse(claim: Claim, detail: str, *, error: str, **event: Any) -> _Done:
    """Nothing was sent, and nothing will be: the plan ends refused."""
    _finish(
        claim,
        to=PlanStatus.REFUSED,
        detail=detail,
        attempt_state=Attempt.State.NOT_SENT,
        error=error,
        event_data=event or None,
    )
    return _Done(PlanStatus.REFUSED)


def _release_unsent(claim: Claim, reason: str) -> _Done:
    """Nothing left the gateway: give the approvals back and try again later, or stop."""
    plan, attempt = claim.plan, claim.attempt
    if attempt.tries >= MAX_UNSENT_TRIES:
        return _refuse(
            claim,
            f"nothing was written: {reason} (gave up after {attempt.tries} tries)",
            error=reason,
        )
    with transaction.atomic():
        execution_end(
            plan,
            attempt,
            to=PlanStatus.APPROVED,
            attempt_to=Attempt.State.NOT_SENT,
            actor=ACTOR,
            event="execution.deferred",
            data={"reason": reason, "try": attempt.tries},
            attempt_fields={"error": reason, "sends": 0},
            give_back_approvals=True,
            enqueued_at=timezone.now(),
        )
        dispatch.on_commit(dispatch.EXECUTE_PLAN, plan.id, countdown=2**attempt.tries)
    return _Done("deferred")


# --- 2. open the write credential ---------------------------------------------------------


def _open_credential(claim: Claim) -> Auth:
    try:
        secret = open_write_secret(claim.credential)
    except VaultError as exc:
        raise _refuse(
            claim, "refused before sending: the write credential cannot be opened", error=str(exc)
        ) from None
    auth = credential_auth(claim.credential, secret)
    try:
        # An OAuth2 credential gets its access token now (or reuses the cached one), so a
        # token endpoint that refuses the client refuses the plan before anything is sent.
        auth.headers()
    except TokenError as exc:
        if not exc.permanent:
            raise _release_unsent(claim, str(exc)) from None
        raise _refuse(
            claim,
            f"refused before sending: no access token for the write credential: {exc}",
            error=str(exc),
        ) from None
    return auth


# --- 3. revalidate ------------------------------------------------------------------------


def _revalidate(claim: Claim) -> tuple[bool, dict[str, Any]]:
    """Re-read the target. Returns (still as previewed, what was found)."""
    plan = claim.plan
    precondition = plan.precondition
    if precondition["kind"] == "none":
        return True, {"checked": False}
    spec = plan.action.spec
    with read_client(plan.action.connector) as client:
        result = read_target(client, spec, plan.input)
    if precondition["kind"] == "absent":
        return (not result.exists), {"checked": True, "exists": result.exists}
    found = {"checked": True, "exists": result.exists, "version": result.version}
    return (result.exists and result.version == precondition["expected"]), found


def _revalidate_or_stop(claim: Claim) -> dict[str, Any]:
    """What the re-read found, if the target is still as previewed; else the plan ends."""
    try:
        unchanged, found = _revalidate(claim)
    except UpstreamEchoesSecrets:
        raise _refuse(
            claim,
            "refused before sending: the upstream's answer to the re-read repeated "
            "a credential it was sent",
            error="the re-read repeated a credential",
        ) from None
    except PreviewError as exc:
        raise _release_unsent(claim, f"re-reading the target failed: {exc.detail}") from None
    if not unchanged:
        _finish(
            claim,
            to=PlanStatus.STALE,
            detail="the target changed after the preview; nothing was written; propose again",
            attempt_state=Attempt.State.NOT_SENT,
            event_data={"expected": claim.plan.precondition.get("expected"), "found": found},
            revalidation=found,
        )
        raise _Done(PlanStatus.STALE)
    return found


# --- 4. fence, then send ------------------------------------------------------------------


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _request_headers(claim: Claim) -> dict[str, str]:
    spec = claim.plan.action.spec
    headers = dict(claim.plan.write_request.get("headers") or {})
    if spec.write.idempotency_header:
        headers[spec.write.idempotency_header] = claim.attempt.idempotency_key
    return headers


def _fence(claim: Claim, auth: Auth, found: dict[str, Any], headers: dict[str, str]) -> None:
    """Commit "sending" as late as it can be, or end the execution without sending.

    It commits only if this worker still holds the claim (if the sweeper presumed us dead
    and another worker re-claimed the plan, the try moved on and nothing matches) and only
    if the vault is not locked (read again in the same statement)."""
    plan, request = claim.plan, claim.plan.write_request
    # The credential's own headers are recorded by name only, never by value.
    recorded = {
        "method": request["method"],
        "url": plan.action.connector.base_url + request["path"],
        "headers": redact_headers(
            {**headers, **dict.fromkeys(auth.header_names, "")}, set(auth.header_names)
        ),
        "body": request.get("body"),
    }
    if attempt_fence(
        plan, claim.attempt, sent_at=timezone.now(), request=recorded, revalidation=found
    ):
        return
    if VaultState.is_locked():
        try:
            raise _refuse(
                claim,
                f"refused before sending: {VAULT_LOCKED}",
                error=VAULT_LOCKED,
                reason=VAULT_LOCKED,
            )
        except InvalidTransition:  # the sweeper took the plan back meanwhile
            raise _Done("skipped:claim-lost") from None
    log.warning("plan %s: claim lost before sending; not sending", plan.id)
    raise _Done("skipped:claim-lost")


def _send(claim: Claim, auth: Auth, found: dict[str, Any]) -> Sent:
    """Fence, then send; again only with the same idempotency key, and only where the
    action declares that the upstream honours it (max_retries is 0 otherwise)."""
    plan, attempt = claim.plan, claim.attempt
    spec, request = plan.action.spec, plan.write_request
    headers = _request_headers(claim)
    # The client is built before the fence, so the fence is as late as it can be.
    client = WriteClient(plan.action.connector, auth)
    try:
        _fence(claim, auth, found, headers)
    except _Done:
        client.close()
        raise
    retries_left = spec.write.max_retries
    sends = 0
    notes: list[str] = []
    with client:
        while True:
            sends += 1
            # Counted before it leaves, fenced like the first send: if the sweeper
            # settled this attempt meanwhile (we were presumed dead), we must not send.
            if sends > 1 and not attempt_count_send(attempt, sends):
                log.warning(
                    "plan %s: attempt taken over before send %s; not sending", plan.id, sends
                )
                raise _Done("skipped:claim-lost")
            try:
                response = client.request(
                    request["method"],
                    request["path"],
                    headers=headers,
                    body=request.get("body"),
                    content_type=request.get("content_type") or "application/json",
                )
            except UpstreamError as exc:
                if not exc.sent and sends == 1:
                    # Nothing ever left the gateway: safe to try again later.
                    raise _release_unsent(claim, str(exc)) from None
                if retries_left > 0:
                    retries_left -= 1
                    notes.append(f"send {sends}: {exc}; re-sent with the same key")
                    _sleep(min(2.0**sends * 0.25, 5.0))
                    continue
                _finish(
                    claim,
                    to=PlanStatus.UNKNOWN,
                    detail="no answer after the request was sent; "
                    "the change may or may not have applied",
                    attempt_state=Attempt.State.LOST,
                    error="; ".join([*notes, str(exc)]),
                    sends=sends,
                    look_in=RECONCILE_DELAYS[0],
                )
                raise _Done(PlanStatus.UNKNOWN) from None
            if response.status == 429:
                wait = retry_after_seconds(response.header("retry-after"))
                if retries_left > 0 and wait is not None and wait <= MAX_RETRY_WAIT_SECONDS:
                    retries_left -= 1
                    notes.append(f"send {sends}: 429, waited {wait:.1f}s as Retry-After asked")
                    _sleep(wait)
                    continue
            elif response.status >= 500 and retries_left > 0:
                retries_left -= 1
                notes.append(f"send {sends}: {response.status}; re-sent with the same key")
                _sleep(min(2.0**sends * 0.25, 5.0))
                continue
            break
    if response.reauthenticated:
        notes.append(f"send {sends}: 401, sent again once with a renewed access token")
    return Sent(response=response, sends=sends, notes=notes)


# --- 5. classify and record ---------------------------------------------------------------


def _classify(claim: Claim, sent: Sent) -> tuple[str, str]:
    """The plan's state from the answer; a 412 is "changed" only if a re-read says so."""
    response, spec = sent.response, claim.plan.action.spec
    state, detail = classify(response.status, on_conflict=spec.write.on_conflict)
    if 200 <= response.status < 300 and refused_in_body(spec.write.rejected_when, response):
        state = PlanStatus.REJECTED
        detail = "the upstream refused the change in its answer; nothing was applied"
    if response.status == 412:
        state, detail = _precondition_failed(claim)
    return state, detail


def _precondition_failed(claim: Claim) -> tuple[str, str]:
    """A 412 is "the target changed" only if a re-read says so. An upstream that refuses
    a validator for another reason (a weak tag, broken If-Match support) while the target
    is as previewed has refused the write: saying "changed" would send the agent to
    preview again for nothing."""
    if claim.plan.precondition["kind"] == "none":
        return (
            PlanStatus.REJECTED,
            "the upstream answered 412 to a request that carried no precondition",
        )
    try:
        unchanged, _ = _revalidate(claim)
    except PreviewError:
        return PlanStatus.STALE, "the upstream's precondition failed; nothing was written"
    if unchanged:
        return (
            PlanStatus.REJECTED,
            "the upstream refused the precondition although the target is unchanged; "
            "nothing was written",
        )
    return PlanStatus.STALE, "the upstream's precondition failed: the target changed"


def _record(claim: Claim, auth: Auth, sent: Sent) -> str:
    plan, response, notes = claim.plan, sent.response, sent.notes
    spec = plan.action.spec
    state, detail = _classify(claim, sent)
    if response.secret_echoed:
        notes.append("the upstream's answer repeated a credential; it was removed")
    if response.status in (401, 403):
        _recorded(
            claim,
            lambda: _flag_credential(claim.credential, response.status),
            to=None,
            attempt_to=None,
        )
    result = None
    if 200 <= response.status < 300 and state in (PlanStatus.COMPLETED, PlanStatus.PENDING):
        result, mismatched = project(spec.result, response, secrets=auth.secret_values())
        notes += mismatched
    status_path = _status_path(plan, response) if state == PlanStatus.PENDING else ""
    look_in = None
    if state == PlanStatus.PENDING and status_path:
        look_in = FIRST_FOLLOW_SECONDS
    elif state == PlanStatus.UNKNOWN:
        look_in = RECONCILE_DELAYS[0]
    answer = {
        "response_status": response.status,
        "response_headers": redact_headers(response.headers),
        "response_body": filter_text(
            response.body.decode("utf-8", "replace"), secrets=auth.secret_values()
        ),
        "duration_ms": response.elapsed_ms,
        "sends": sent.sends,
        "status_path": status_path,
    }
    if state == PlanStatus.COMPLETED and spec.verify:
        return _verify(claim, answer=answer, notes=notes, result=result)
    _finish(
        claim,
        to=state,
        look_in=look_in,
        detail=detail,
        attempt_state=Attempt.State.ANSWERED,
        upstream_status=response.status,
        event_data={"sends": sent.sends},
        plan_fields={"result": result, "verified": False},
        error="; ".join(notes),
        **answer,
    )
    log.info("plan %s executed: %s (%s)", plan.id, state, response.status)
    return state


# --- 6. verify the effect -----------------------------------------------------------------


def _verify(claim: Claim, *, answer: dict[str, Any], notes: list[str], result) -> str:
    """A 2xx is not proof: read the target back (read credential, no transaction open)
    and compare the fields the plan sets with their planned values (``judge``).

    The answer is committed first, so it is never lost: if this worker dies during the
    read-back, the sweeper finds the attempt answered and the plan executing, and has it
    reconciled (the same read-back). Nothing is ever sent again."""
    plan, status = claim.plan, answer["response_status"]
    now = timezone.now()
    _recorded(
        claim,
        lambda: attempt_transition(
            claim.attempt,
            to=Attempt.State.ANSWERED,
            finished_at=now,
            error="; ".join(notes),
            **answer,
        ),
        to=None,
        attempt_to=Attempt.State.ANSWERED,
    )
    try:
        verdict, finding = read_back(plan)
    except (PreviewError, UpstreamError) as exc:
        verdict, finding = None, {"verdict": f"could not read the target back: {exc}"}
    if verdict == PlanStatus.COMPLETED:
        state, verified = PlanStatus.COMPLETED, True
        detail = "applied, and reading the target back shows the change"
    elif verdict == PlanStatus.REJECTED:
        state, verified = PlanStatus.NOT_APPLIED, False
        detail = (
            f"the upstream answered {status}, but reading the target back shows the change "
            "was not applied; nothing was sent again"
        )
    elif finding.get("differs"):
        state, verified = PlanStatus.COMPLETED, False
        fields = ", ".join(finding["differs"])
        verb = "differs" if len(finding["differs"]) == 1 else "differ"
        detail = (
            f"applied ({status}), but not verified: reading the target back, {fields} "
            f"{verb} from the plan (the upstream may store values differently, or someone "
            "else changed the target since)"
        )
    else:
        state, verified = PlanStatus.COMPLETED, False
        detail = f"applied ({status}), but not verified: {finding['verdict']}"
    _recorded(
        claim,
        lambda: plan_transition(
            plan,
            to=state,
            actor=ACTOR,
            event=_event(plan, state),
            data={
                "attempt": str(claim.attempt.id),
                "upstream_status": status,
                "read_back": finding,
            },
            finished_at=now,
            outcome_detail=detail,
            upstream_status=status,
            result=result,
            verified=verified,
            next_check_at=None,
        ),
        to=state,
        attempt_to=None,
    )
    log.info("plan %s executed: %s (%s, verified %s)", plan.id, state, status, verified)
    return state


# --- reads --------------------------------------------------------------------------------


def _read(claim: Claim) -> str:
    """An observation: one GET of the target through the read-only client (it refuses any
    other method before anything leaves), with the read credential. The agent receives
    the declared fields of what was read, only if it is within the action's scope rules;
    the answer itself is not kept (only the declared result is)."""
    plan, attempt = claim.plan, claim.attempt
    request = plan.write_request
    if request.get("method") not in READ_METHODS:
        raise _refuse(claim, "refused: a read sends only GET", error="not a read request")
    client = read_client(plan.action.connector)
    recorded = {
        "method": request["method"],
        "url": plan.action.connector.base_url + request["path"],
        "headers": dict.fromkeys(client.credential_header_names, REDACTED),
        "body": None,
    }
    if not attempt_fence(
        plan, attempt, sent_at=timezone.now(), request=recorded, revalidation={"checked": False}
    ):
        if VaultState.is_locked():
            raise _refuse(claim, f"refused before reading: {VAULT_LOCKED}", error=VAULT_LOCKED)
        raise _Done("skipped:claim-lost")
    try:
        response = client.request(request["method"], request["path"])
    except UpstreamError as exc:
        if not exc.sent:
            raise _release_unsent(claim, str(exc)) from None
        _finish(
            claim,
            to=PlanStatus.REJECTED,
            detail="the upstream did not answer the read; nothing changed (propose it again)",
            attempt_state=Attempt.State.LOST,
            plan_fields={"verified": False},
            error=str(exc),
            sends=1,
        )
        return PlanStatus.REJECTED
    state, detail, result, notes = _read_outcome(claim, response)
    _finish(
        claim,
        to=state,
        detail=detail,
        attempt_state=Attempt.State.ANSWERED,
        upstream_status=response.status,
        plan_fields={"result": result, "verified": False},
        response_status=response.status,
        response_headers=redact_headers(response.headers),
        duration_ms=response.elapsed_ms,
        sends=1,
        error="; ".join(notes),
    )
    log.info("plan %s read: %s (%s)", plan.id, state, response.status)
    return state


def _read_outcome(claim: Claim, response) -> tuple[str, str, dict | None, list[str]]:
    spec = claim.plan.action.spec
    if response.secret_echoed:
        detail = "the upstream's answer repeated a credential; nothing is returned"
        return PlanStatus.REJECTED, detail, None, []
    if response.status in spec.read.not_found:
        return PlanStatus.REJECTED, "the target was not found upstream", None, []
    if response.status != 200:
        if response.status >= 500:
            detail = f"the upstream failed the read ({response.status}); nothing changed"
        else:
            detail = f"the upstream refused the read ({response.status})"
        return PlanStatus.REJECTED, detail, None, []
    try:
        body = response.json()
    except CanonicalJSONError:
        return PlanStatus.REJECTED, "the upstream's answer is not usable JSON", None, []
    scope = claim.plan.action.definition.get("scope") or []
    failing = first_failing(scope, body, claim.plan.agent.attributes or {})
    if failing is not None:
        return PlanStatus.REJECTED, f"out of scope: {rule_text(failing)}", None, []
    result, notes = project(spec.result, response)
    return PlanStatus.COMPLETED, "read", result, notes


def _flag_credential(credential: Credential, status: int) -> None:
    with transaction.atomic():
        Credential.objects.filter(pk=credential.pk).update(
            flagged_at=timezone.now(), flag_reason=f"the upstream answered {status} to a write"
        )
        audit_record(
            kind="credential.flagged",
            actor=ACTOR,
            data={
                "credential": str(credential.pk),
                "connector": credential.connector_id,
                "status": status,
            },
        )


def _status_path(plan: Plan, response) -> str:
    """Where to ask about accepted work: the action's status path or the Location header."""
    status = plan.action.spec.status
    if status is None:
        return ""
    if status.path:
        return plan.action.spec.render_path(status.path, plan.input)
    location = response.header("location") or ""
    base = plan.action.connector.base_url.rstrip("/")
    if location.startswith(base + "/"):
        location = location[len(base) :]
    try:
        connector_url(plan.action.connector, location)  # refuses other hosts and odd paths
    except ValueError:
        return ""
    return location
