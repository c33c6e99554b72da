"""Executing approved plans: claim, open the credential, revalidate, send once, classify,
record. Each step is a function below (the claim in executors.claims, the record in
executors.recording); the order is the guarantee:

1. **Claim** under a row lock, in one transaction: the plan must be ``approved``; its
   approvals must match the recomputed fingerprint, be unexpired and unused; the
   action must not have changed; a write credential must exist. The approvals are
   spent and an Attempt with a fresh idempotency key is committed.
2. **Open** the write credential (only a worker holds the key) and hand it to the
   connector's kind, which presents it (and fetches an access token now, if it needs one).
3. **Revalidate** (no lock held, no transaction open): re-read the target through the
   kind's reader (read credential only); a version other than the one previewed ends
   the plan ``stale`` and nothing is written.
4. **Fence, then send**: commit "sending" before the write leaves, so a crash from
   here on is seen as "the request may have left" and never sent again; send the
   fenced write once (again only with the same idempotency key, where declared).
5. **Classify** the answer (the kind says what it means) and **record** it, with the
   plan's outcome, in one commit.

The core speaks to the upstream only through the connector's kind
(actions.connectors.base), never naming one. Every change of the plan's status and of the
attempt's state goes through approvals.lifecycle; looks at unsettled outcomes are
scheduled in executors.reconciliation.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from actions.cache import snapshot as catalog_snapshot
from actions.connectors.base import Answer, Verdict
from actions.connectors.registry import kind_of
from actions.lib.audit import audit_record
from actions.lib.canonical import CanonicalJSONError
from actions.lib.exceptions import InvalidTransition, UpstreamError
from actions.lib.redaction import filter_text, redact_headers
from actions.models import Credential, VaultState
from actions.oauth import TokenError
from actions.preview import PreviewError, UpstreamEchoesSecrets
from actions.rules import first_failing, rule_text
from actions.vault import VaultError
from approvals.lifecycle import (
    attempt_count_send,
    attempt_fence,
    attempt_transition,
    plan_transition,
)
from approvals.models import Attempt, Plan, PlanStatus

from .claims import ACTOR, NO_VALID_APPROVAL, NO_WRITE_CREDENTIAL, VAULT_LOCKED, Claim
from .claims import claim_plan as _claim
from .claims import event_name as _event
from .claims import refusal_reason as _refusal_reason  # noqa: F401 - by its older name
from .reconciliation import FIRST_FOLLOW_SECONDS, RECONCILE_DELAYS, read_back
from .recording import Done as _Done
from .recording import finish as _finish
from .recording import recorded as _recorded
from .recording import refuse as _refuse
from .recording import release_unsent as _release_unsent
from .results import project
from .vault import open_write_secret

__all__ = [
    "NO_VALID_APPROVAL",
    "NO_WRITE_CREDENTIAL",
    "VAULT_LOCKED",
    "execution_run",
    "redact_text",
]

log = logging.getLogger(__name__)

# Longest wait honoured for an upstream's "retry after" before giving up (seconds).
MAX_RETRY_WAIT_SECONDS = 30.0


@dataclass
class Sent:
    """What the send step ends with: the answer, and how it was reached."""

    response: Answer
    sends: int
    notes: list[str] = field(default_factory=list)


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
            writer = _writer_or_stop(claim, auth)
            try:
                found = _revalidate_or_stop(claim)
            except BaseException:
                writer.close()
                raise
            sent = _send(claim, writer, found)
            return _record(claim, auth, sent)
        except _Done as done:
            return done.outcome


# --- 2. open the write credential ---------------------------------------------------------


def _open_credential(claim: Claim):
    """Open the write secret here, in the worker (executors.vault), and hand it to the
    connector's kind to present; the kind never opens a credential itself."""
    kind = kind_of(claim.plan.action.connector)
    if claim.credential is None:  # a kind whose upstream may take none (claims.py)
        return kind.authenticate(None, {})
    try:
        secret = open_write_secret(claim.credential)
    except VaultError as exc:
        raise _refuse(
            claim, "refused before sending: the write credential cannot be opened", error=str(exc)
        ) from None
    try:
        return kind.authenticate(claim.credential, secret)
    except TokenError as exc:
        if not exc.permanent:
            raise _release_unsent(claim, str(exc)) from None
        raise _refuse(
            claim,
            f"refused before sending: no access token for the write credential: {exc}",
            error=str(exc),
        ) from None


# --- 3. revalidate ------------------------------------------------------------------------


def _revalidate(claim: Claim) -> tuple[bool, dict[str, Any]]:
    """Re-read the target. Returns (still as previewed, what was found)."""
    plan = claim.plan
    precondition = plan.precondition
    if precondition["kind"] == "none":
        return True, {"checked": False}
    connector = plan.action.connector
    kind = kind_of(connector)
    with kind.reader(connector) as reader:
        result = kind.read(reader, plan.action.spec, plan.input)
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


def _fence(claim: Claim, recorded: dict[str, Any], found: dict[str, Any]) -> None:
    """Commit "sending" as late as it can be, or end the execution without sending.

    It commits only if this worker still holds the claim (if the sweeper presumed us dead
    and another worker re-claimed the plan, the try moved on and nothing matches) and only
    if the vault is not locked (read again in the same statement). ``recorded`` is the
    request as the kind records it: the credential's own headers by name, never by value."""
    plan = claim.plan
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


def _writer_or_stop(claim: Claim, auth):
    """The write client, built before the re-read (so the fence is as late as it can be)
    and asked first whether anything forbids the write now (an MCP tool that is no longer
    the one approved): then the plan ends refused with nothing sent, not even the
    re-read, which could call a tool that changed."""
    plan = claim.plan
    kind = kind_of(plan.action.connector)
    writer = kind.writer(plan.action.connector, plan.action.spec, auth)
    try:
        refusal = kind.refusal_before_send(writer, plan.action.spec, plan.target)
        if refusal is not None:
            raise _refuse(claim, f"refused before sending: {refusal}", error=refusal)
    except _Done:
        writer.close()
        raise
    except UpstreamError as exc:  # the kind could not check now; nothing left
        writer.close()
        raise _release_unsent(claim, str(exc)) from None
    return writer


def _send(claim: Claim, writer, found: dict[str, Any]) -> Sent:
    """Fence, then send; again only with the same idempotency key, and only where the
    action declares that the upstream honours it (max_retries is 0 otherwise). Whether an
    answer may be sent again, and after how long, is the kind's reading of it; how many
    times, and the longest wait, are the worker's."""
    plan, attempt = claim.plan, claim.attempt
    spec, request, key = plan.action.spec, plan.write_request, attempt.idempotency_key
    kind = kind_of(plan.action.connector)
    try:
        _fence(claim, writer.recorded(request, key=key), found)
    except _Done:
        writer.close()
        raise
    retries_left = spec.write.max_retries
    sends = 0
    notes: list[str] = []
    with writer:
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
                response = writer.send(request, key=key)
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
            resend = kind.classify(spec, response, plan.precondition).resend
            if resend is not None and retries_left > 0:
                wait = resend.after
                if wait is None or wait <= MAX_RETRY_WAIT_SECONDS:
                    retries_left -= 1
                    notes.append(f"send {sends}: {resend.note}")
                    _sleep(min(2.0**sends * 0.25, 5.0) if wait is None else wait)
                    continue
            break
    notes += [f"send {sends}: {note}" for note in kind.notes(response)]
    return Sent(response=response, sends=sends, notes=notes)


# --- 5. classify and record ---------------------------------------------------------------


def _classify(claim: Claim, verdict: Verdict) -> tuple[str, str]:
    """The plan's state from the kind's verdict; a refused fence is "changed" only if a
    re-read says so."""
    if verdict.fence_refused:
        return _precondition_failed(claim)
    return PlanStatus(verdict.state), verdict.detail


def _precondition_failed(claim: Claim) -> tuple[str, str]:
    """A refused fence is "the target changed" only if a re-read says so. An upstream that
    refuses a version for another reason (a weak tag, broken conditional-write support)
    while the target is as previewed has refused the write: saying "changed" would send
    the agent to preview again for nothing."""
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


def _record(claim: Claim, auth, sent: Sent) -> str:
    plan, response, notes = claim.plan, sent.response, sent.notes
    spec = plan.action.spec
    kind = kind_of(plan.action.connector)
    verdict = kind.classify(spec, response, plan.precondition)
    state, detail = _classify(claim, verdict)
    if response.secret_echoed:
        notes.append("the upstream's answer repeated a credential; it was removed")
    if verdict.credential_refused:
        _recorded(
            claim,
            lambda: _flag_credential(claim.credential, response.status),
            to=None,
            attempt_to=None,
        )
    result = None
    if state in (PlanStatus.COMPLETED, PlanStatus.PENDING):
        result, mismatched = project(spec.result, response, secrets=auth.secret_values())
        notes += mismatched
    status_path = ""
    if state == PlanStatus.PENDING:
        status_path = kind.status_path(plan.action.connector, spec, plan.input, response)
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
# --- reads --------------------------------------------------------------------------------


def _read(claim: Claim) -> str:
    """An observation: one read of the target through the kind's reader (it refuses any
    request that could change the upstream before anything leaves), with the read
    credential. The agent receives the declared fields of what was read, only if it is
    within the action's scope rules; the answer itself is not kept (only the declared
    result is)."""
    plan, attempt = claim.plan, claim.attempt
    request = plan.write_request
    kind = kind_of(plan.action.connector)
    refusal = kind.not_a_read(request)
    if refusal is not None:
        raise _refuse(claim, refusal, error="not a read request")
    reader = kind.reader(plan.action.connector)
    recorded = kind.recorded_read(reader, request)
    if not attempt_fence(
        plan, attempt, sent_at=timezone.now(), request=recorded, revalidation={"checked": False}
    ):
        if VaultState.is_locked():
            raise _refuse(claim, f"refused before reading: {VAULT_LOCKED}", error=VAULT_LOCKED)
        raise _Done("skipped:claim-lost")
    try:
        response = kind.observe(reader, request)
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
    refusal = kind_of(claim.plan.action.connector).read_refusal(spec, response)
    if refusal is not None:
        return PlanStatus.REJECTED, refusal, None, []
    scope = claim.plan.action.definition.get("scope") or []
    try:
        body = response.json()
    except (CanonicalJSONError, ValueError):
        # An answer that is text and not JSON (an MCP tool's) serves only a read that
        # declares nothing but its whole text and has no scope rule to apply to it.
        if scope or not spec.result or not all(field.text for field in spec.result):
            return PlanStatus.REJECTED, "the upstream's answer is not usable JSON", None, []
        body = None
    if scope:
        failing = first_failing(scope, body, claim.plan.agent.attributes or {})
        if failing is not None:
            return PlanStatus.REJECTED, f"out of scope: {rule_text(failing)}", None, []
    result, notes = project(spec.result, response)
    return PlanStatus.COMPLETED, "read", result, notes


def _flag_credential(credential: Credential, status: int | None) -> None:
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
