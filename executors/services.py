"""Executing approved plans: claim, check, revalidate, send once, classify, record.

The order is the guarantee:

1. **Claim** under a row lock, in one transaction: the plan must be ``approved``; its
   approvals must match the recomputed fingerprint, be unexpired and unused; the
   action must not have changed; a write credential must exist. The approvals are
   spent and an Attempt with a fresh idempotency key is committed.
2. **Revalidate** (no lock held, no transaction open): re-read the target with the
   read-only client; a version other than the one previewed ends the plan ``stale``
   and nothing is written.
3. **Commit "sending"** before the request leaves, so a crash from here on is seen
   as "the request may have left" and never sent again.
4. **Send** the conditional write once; **classify** the answer; record it.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from actions.cache import snapshot as catalog_snapshot
from actions.clients import credential_auth, read_client
from actions.fingerprint import plan_fingerprint_matches
from actions.lib.audit import audit_record
from actions.lib.exceptions import InvalidTransition
from actions.lib.http import UpstreamError, WriteClient, connector_url
from actions.lib.redaction import filter_text, redact_headers
from actions.models import Credential, VaultState, action_by_id
from actions.oauth import TokenError
from actions.preview import PreviewError, UpstreamEchoesSecrets, read_target, resolve_pointer
from actions.vault import VaultError
from approvals.heartbeats import heartbeat_record
from approvals.models import Approval, Heartbeat, Plan, PlanStatus
from approvals.services import plan_transition, plans_expire

from .models import Attempt
from .vault import open_write_secret

log = logging.getLogger(__name__)

ACTOR = "system:executor"
# Tries to reach the upstream before sending anything, before giving up honestly.
MAX_UNSENT_TRIES = 3
# Longest wait honoured for a 429's Retry-After before giving up (seconds).
MAX_RETRY_WAIT_SECONDS = 30.0
# Seconds before each automatic reconciliation of an unknown outcome; after the last one
# comes up inconclusive, the plan waits for a person ("check now" or resolve).
RECONCILE_DELAYS = (2.0, 10.0, 60.0, 300.0, 1800.0)


@dataclass
class Claim:
    plan: Plan
    attempt: Attempt
    credential: Credential


def redact_text(text: str, secrets: list[str]) -> str:
    """Filter an upstream's text for people (see actions.lib.redaction)."""
    return filter_text(text, secrets=secrets)


# --- 1. claim -------------------------------------------------------------------------


VAULT_LOCKED = "the vault is locked"


def _refusal_reason(plan: Plan, now) -> str | None:
    """Why this plan must not be sent, from what the claim already read; the approvals
    are checked last, by spending them (``_spend_approvals``)."""
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
    if plan.policy.get("mode") == "session_grant":
        # Revoking or outliving the grant stops every plan not claimed yet.
        from approvals.grants import grant_refusal_reason

        grant_reason = grant_refusal_reason(plan, now)
        if grant_reason is not None:
            return grant_reason
    return None


NO_VALID_APPROVAL = "no valid approval: missing, expired or already used"
NO_WRITE_CREDENTIAL = "no usable write credential (missing, revoked or expired)"


def _spend_approvals(plan: Plan, now) -> bool:
    """Mark the plan's valid approvals used, if there are enough of them; one UPDATE
    (and one more to undo it when there are too few). Runs under the plan's row lock."""
    valid = plan.approvals.filter(
        decision=Approval.Decision.APPROVE,
        fingerprint=plan.fingerprint,
        used_at__isnull=True,
        expires_at__gt=now,
    )
    spent = valid.update(used_at=now)
    if spent >= plan.required_approvals:
        return True
    if spent:
        plan.approvals.filter(used_at=now).update(used_at=None)
    return False


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
            if reason is None:
                credential = plan.action.connector.credential(Credential.Role.WRITE)
                if credential is None:
                    reason = NO_WRITE_CREDENTIAL
        if reason is None and not _spend_approvals(plan, now):
            reason = NO_VALID_APPROVAL
        if reason is not None:
            plan_transition(
                plan,
                to=PlanStatus.REFUSED,
                actor=ACTOR,
                event="execution.refused",
                data={"reason": reason},
                finished_at=now,
                outcome_detail=f"refused before sending: {reason}",
            )
            return None
        try:
            attempt = plan.attempt
        except Attempt.DoesNotExist:
            attempt = Attempt.objects.create(
                plan=plan,
                idempotency_key=uuid.uuid4().hex,
                state=Attempt.State.PREPARED,
                tries=1,
            )
        else:
            if attempt.state != Attempt.State.NOT_SENT:
                # Only an attempt that provably sent nothing may be picked up again.
                raise RuntimeError(f"plan {plan.id} is approved but has a {attempt.state} attempt")
            attempt.state = Attempt.State.PREPARED
            attempt.tries += 1
            attempt.save(update_fields=["state", "tries"])
        plan_transition(
            plan,
            to=PlanStatus.EXECUTING,
            actor=ACTOR,
            event="execution.claimed",
            data={"attempt": str(attempt.id), "try": attempt.tries},
            claimed_at=now,
        )
    return Claim(plan=plan, attempt=attempt, credential=credential)


# --- outcomes -------------------------------------------------------------------------


def _finish(
    claim: Claim,
    *,
    to: str,
    detail: str,
    attempt_state: str,
    upstream_status: int | None = None,
    event_data: dict[str, Any] | None = None,
    look_in: float | None = None,
    **attempt_fields: Any,
) -> Plan:
    """Record the attempt's end and the plan's outcome in one transaction. ``look_in``
    schedules the first automatic look at an unsettled outcome (a status request for
    ``pending``, a reconciliation for ``unknown``) in the same commit."""
    now = timezone.now()
    attempt = claim.attempt
    with transaction.atomic():
        attempt.state = attempt_state
        attempt.finished_at = now
        for key, value in attempt_fields.items():
            setattr(attempt, key, value)
        attempt.save(update_fields=["state", "finished_at", *attempt_fields])
        plan_transition(
            claim.plan,
            to=to,
            actor=ACTOR,
            event=f"execution.{to}",
            data={
                "attempt": str(attempt.id),
                "upstream_status": upstream_status,
                **(event_data or {}),
            },
            finished_at=now,
            outcome_detail=detail,
            upstream_status=upstream_status,
            next_check_at=_due(now, look_in),
        )
        if look_in is not None:
            wake_look(claim.plan.id, to, countdown=look_in)
    return claim.plan


def _due(now, seconds: float | None):
    return None if seconds is None else now + timedelta(seconds=seconds)


def wake_look(plan_id, status: str, *, countdown: float | None) -> None:
    """Publish the wake-up for a scheduled look once the transaction commits: the status
    request of accepted work, or the reconciliation of an unknown outcome."""
    if status == PlanStatus.PENDING:
        enqueue_follow(plan_id, countdown=countdown)
    else:
        enqueue_reconcile(plan_id, countdown=countdown)


def _release_unsent(claim: Claim, reason: str) -> str:
    """Nothing left the gateway: give the approvals back and try again later, or stop."""
    plan, attempt = claim.plan, claim.attempt
    if attempt.tries >= MAX_UNSENT_TRIES:
        _finish(
            claim,
            to=PlanStatus.REFUSED,
            detail=f"nothing was written: {reason} (gave up after {attempt.tries} tries)",
            attempt_state=Attempt.State.NOT_SENT,
            error=reason,
        )
        return PlanStatus.REFUSED
    with transaction.atomic():
        attempt.state = Attempt.State.NOT_SENT
        attempt.error = reason
        attempt.save(update_fields=["state", "error"])
        plan.approvals.filter(used_at=plan.claimed_at).update(used_at=None)
        plan_transition(
            plan,
            to=PlanStatus.APPROVED,
            actor=ACTOR,
            event="execution.deferred",
            data={"reason": reason, "try": attempt.tries},
            enqueued_at=timezone.now(),
        )
        from .tasks import enqueue_execution

        enqueue_execution(plan.id, countdown=2**attempt.tries)
    return "deferred"


# --- 2-4. revalidate, send, classify -----------------------------------------------------


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


def classify(status: int, *, on_conflict: str = "rejected") -> tuple[str, str]:
    """Map an upstream status to (plan state, short reason an agent may see)."""
    if status == 202:
        return PlanStatus.PENDING, "accepted by the upstream; the work is not finished yet"
    if 200 <= status < 300:
        return PlanStatus.COMPLETED, "applied"
    if status == 412:
        return PlanStatus.STALE, "the upstream's precondition failed: the target changed"
    if status == 428:
        return (
            PlanStatus.REJECTED,
            "the upstream requires a precondition this request could not carry; "
            "nothing was written",
        )
    if status in (401, 403):
        return PlanStatus.REJECTED, "the upstream refused the write credential"
    if status == 409:
        if on_conflict == PlanStatus.ALREADY_IN_DESIRED_STATE:
            return PlanStatus.ALREADY_IN_DESIRED_STATE, "the target was already as requested"
        return PlanStatus.REJECTED, "the upstream reported a conflict"
    if status == 429:
        return PlanStatus.REJECTED, "the upstream is rate limiting; nothing was applied"
    if 400 <= status < 500:
        return PlanStatus.REJECTED, f"the upstream refused the request ({status})"
    return (
        PlanStatus.UNKNOWN,
        f"the upstream failed ({status}); the change may or may not have applied",
    )


def _refused_in_body(rule: dict[str, Any] | None, response) -> bool:
    """The action's ``rejected_when`` rule: a 2xx whose body says nothing happened."""
    if not rule:
        return False
    try:
        return resolve_pointer(response.json(), rule["pointer"]) == rule["equals"]
    except (KeyError, ValueError):  # no such field, or not JSON: not a refusal
        return False


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), or None if unusable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - timezone.now()).total_seconds())


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


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


def execution_run(*, plan_id) -> str:
    """Execute one approved plan at most once. Returns the outcome (or why nothing ran).

    One execution sees the catalog as of one moment, its claim (actions/cache.py): the
    action, the write credential and the read credential of the re-read."""
    with catalog_snapshot():
        return _execute(plan_id)


def _fence_sending(claim: Claim, *, sent_at, request: dict, revalidation: dict) -> bool:
    """Commit "sending" (and the first send) if and only if the attempt is still this
    worker's and prepared, its plan still claimed by this worker, and the vault unlocked.

    One statement (its own transaction outside a caller's), in plain SQL: the ORM's
    version of this UPDATE (two EXISTS filters) took three times as long to build as to
    run, on the path between a decision and its effect."""
    plan, attempt = claim.plan, claim.attempt
    qn = connection.ops.quote_name
    field = Attempt._meta.get_field
    sql = (
        f"UPDATE {qn(Attempt._meta.db_table)} SET {qn('state')} = %s, {qn('sent_at')} = %s, "
        f"{qn('request')} = %s, {qn('revalidation')} = %s, {qn('sends')} = 1 "
        f"WHERE {qn('id')} = %s AND {qn('state')} = %s AND {qn('tries')} = %s "
        f"AND EXISTS (SELECT 1 FROM {qn(Plan._meta.db_table)} WHERE {qn('id')} = %s "
        f"AND {qn('status')} = %s AND {qn('claimed_at')} = %s) "
        f"AND NOT EXISTS (SELECT 1 FROM {qn(VaultState._meta.db_table)} "
        f"WHERE {qn('id')} = %s AND {qn('locked')})"
    )
    params = [
        Attempt.State.SENDING,
        field("sent_at").get_db_prep_save(sent_at, connection),
        field("request").get_db_prep_save(request, connection),
        field("revalidation").get_db_prep_save(revalidation, connection),
        field("id").get_db_prep_save(attempt.id, connection),
        Attempt.State.PREPARED,
        attempt.tries,
        Plan._meta.get_field("id").get_db_prep_save(plan.id, connection),
        PlanStatus.EXECUTING,
        Plan._meta.get_field("claimed_at").get_db_prep_save(plan.claimed_at, connection),
        VaultState.SINGLETON_ID,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount == 1


def _execute(plan_id) -> str:
    claim = _claim(plan_id)
    if claim is None:
        plan = Plan.objects.filter(id=plan_id).only("status").first()
        return f"skipped:{plan.status if plan else 'missing'}"
    plan, attempt = claim.plan, claim.attempt

    try:
        secret = open_write_secret(claim.credential)
    except VaultError as exc:
        _finish(
            claim,
            to=PlanStatus.REFUSED,
            detail="refused before sending: the write credential cannot be opened",
            attempt_state=Attempt.State.NOT_SENT,
            error=str(exc),
        )
        return PlanStatus.REFUSED

    auth = credential_auth(claim.credential, secret)
    try:
        # An OAuth2 credential gets its access token now (or reuses the cached one), so a
        # token endpoint that refuses the client refuses the plan before anything is sent.
        auth.headers()
    except TokenError as exc:
        if not exc.permanent:
            return _release_unsent(claim, str(exc))
        _finish(
            claim,
            to=PlanStatus.REFUSED,
            detail=f"refused before sending: no access token for the write credential: {exc}",
            attempt_state=Attempt.State.NOT_SENT,
            error=str(exc),
        )
        return PlanStatus.REFUSED

    try:
        unchanged, found = _revalidate(claim)
    except UpstreamEchoesSecrets:
        _finish(
            claim,
            to=PlanStatus.REFUSED,
            detail="refused before sending: the upstream's answer to the re-read repeated "
            "a credential it was sent",
            attempt_state=Attempt.State.NOT_SENT,
            error="the re-read repeated a credential",
        )
        return PlanStatus.REFUSED
    except PreviewError as exc:
        return _release_unsent(claim, f"re-reading the target failed: {exc.detail}")
    if not unchanged:
        _finish(
            claim,
            to=PlanStatus.STALE,
            detail="the target changed after the preview; nothing was written; propose again",
            attempt_state=Attempt.State.NOT_SENT,
            event_data={"expected": plan.precondition.get("expected"), "found": found},
            revalidation=found,
        )
        return PlanStatus.STALE

    spec = plan.action.spec
    request = plan.write_request
    headers = dict(request.get("headers") or {})
    if spec.write.idempotency_header:
        headers[spec.write.idempotency_header] = attempt.idempotency_key
    # The credential's own headers are recorded by name only, never by value.
    recorded = {
        "method": request["method"],
        "url": plan.action.connector.base_url + request["path"],
        "headers": redact_headers(
            {**headers, **dict.fromkeys(auth.header_names, "")}, set(auth.header_names)
        ),
        "body": request.get("body"),
    }
    # The fence, in one UPDATE and its own transaction, as late as it can be (the client
    # is built before it, and it also records the first send). It commits "sending" only
    # if this worker still holds the claim (if the sweeper presumed us dead and another
    # worker re-claimed the plan, ``tries`` moved on and nothing matches) and only if the
    # vault is not locked: the lock is read once more here, in the same statement, so a
    # lock committed after it is a lock engaged after the send began.
    client = WriteClient(plan.action.connector, auth)
    sent_at = timezone.now()
    fenced = _fence_sending(claim, sent_at=sent_at, request=recorded, revalidation=found)
    if not fenced:
        client.close()
        if VaultState.is_locked():
            try:
                _finish(
                    claim,
                    to=PlanStatus.REFUSED,
                    detail=f"refused before sending: {VAULT_LOCKED}",
                    attempt_state=Attempt.State.NOT_SENT,
                    event_data={"reason": VAULT_LOCKED},
                    error=VAULT_LOCKED,
                )
            except InvalidTransition:  # the sweeper took the plan back meanwhile
                return "skipped:claim-lost"
            return PlanStatus.REFUSED
        log.warning("plan %s: claim lost before sending; not sending", plan.id)
        return "skipped:claim-lost"
    attempt.state, attempt.sent_at = Attempt.State.SENDING, sent_at
    attempt.request, attempt.revalidation = recorded, found

    # Re-sending is allowed only with the same idempotency key, and only where the action
    # declares that the upstream honours it (max_retries is 0 otherwise).
    retries_left = spec.write.max_retries
    sends = 0
    notes: list[str] = []
    with client:
        while True:
            sends += 1
            # Fenced like the "sending" commit (which counted the first send): if the
            # sweeper settled this attempt meanwhile (we were presumed dead), the row
            # moved on and we must not send.
            if sends > 1 and not Attempt.objects.filter(
                pk=attempt.pk, state=Attempt.State.SENDING, tries=attempt.tries
            ).update(sends=sends):
                log.warning(
                    "plan %s: attempt taken over before send %s; not sending", plan.id, sends
                )
                return "skipped:claim-lost"
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
                    attempt.sends = 0
                    Attempt.objects.filter(pk=attempt.pk).update(
                        sends=0, state=Attempt.State.PREPARED
                    )
                    return _release_unsent(claim, str(exc))
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
                return PlanStatus.UNKNOWN
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

    state, detail = classify(response.status, on_conflict=spec.write.on_conflict)
    if 200 <= response.status < 300 and _refused_in_body(spec.write.rejected_when, response):
        state = PlanStatus.REJECTED
        detail = "the upstream refused the change in its answer; nothing was applied"
    if response.status == 412:
        state, detail = _precondition_failed(claim)
    if response.secret_echoed:
        notes.append("the upstream's answer repeated a credential; it was removed")
    if response.status in (401, 403):
        _flag_credential(claim.credential, response.status)
    status_path = ""
    if state == PlanStatus.PENDING:
        status_path = _status_path(plan, response)
    body_text = filter_text(response.body.decode("utf-8", "replace"), secrets=auth.secret_values())
    look_in = None
    if state == PlanStatus.PENDING and status_path:
        look_in = 1.0
    elif state == PlanStatus.UNKNOWN:
        look_in = RECONCILE_DELAYS[0]
    _finish(
        claim,
        to=state,
        look_in=look_in,
        detail=detail,
        attempt_state=Attempt.State.ANSWERED,
        upstream_status=response.status,
        event_data={"sends": sends},
        response_status=response.status,
        response_headers=redact_headers(response.headers),
        response_body=body_text,
        duration_ms=response.elapsed_ms,
        sends=sends,
        status_path=status_path,
        error="; ".join(notes),
    )
    log.info("plan %s executed: %s (%s)", plan.id, state, response.status)
    return state


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


# --- following accepted work and reconciling unknown outcomes ------------------------------


def enqueue_follow(plan_id, *, countdown: float | None = None) -> None:
    from .tasks import follow_pending_task

    transaction.on_commit(lambda: _publish(follow_pending_task, plan_id, countdown))


def enqueue_reconcile(plan_id, *, countdown: float | None = 2) -> None:
    from .tasks import reconcile_task

    transaction.on_commit(lambda: _publish(reconcile_task, plan_id, countdown))


def _publish(task, plan_id, countdown) -> None:
    try:
        task.apply_async((str(plan_id),), countdown=countdown)
    except Exception:  # noqa: BLE001 - broker down; the sweeper picks the plan up again
        log.warning("could not publish %s for plan %s", task.name, plan_id)


def pending_follow(*, plan_id) -> str:
    """Ask the upstream about accepted work once; settle the plan or schedule the next ask."""
    from actions.rules import rule_holds

    plan = Plan.objects.select_related("action", "action__connector").filter(id=plan_id).first()
    if plan is None or plan.status != PlanStatus.PENDING:
        return f"skipped:{plan.status if plan else 'missing'}"
    attempt = Attempt.objects.get(plan=plan)
    status = plan.action.spec.status
    if status is None or not attempt.status_path:
        return "skipped:no-status-request"
    try:
        with read_client(plan.action.connector) as client:
            response = client.get(attempt.status_path)
        body = response.json() if response.status == 200 else None
    except (UpstreamError, ValueError):
        body = None
    checks = attempt.status_checks + 1
    now = timezone.now()
    outcomes = [
        (status.done_when, PlanStatus.COMPLETED, "the accepted work finished"),
        (status.failed_when, PlanStatus.REJECTED, "the accepted work failed upstream"),
    ]
    with transaction.atomic():
        Attempt.objects.filter(pk=attempt.pk).update(status_checks=checks)
        for rule, state, detail in outcomes:
            if body is not None and rule and rule_holds(rule, body, {}):
                plan_transition(
                    plan,
                    to=state,
                    actor=ACTOR,
                    event=f"execution.{state}",
                    data={"via": "status request", "checks": checks},
                    finished_at=now,
                    outcome_detail=detail,
                    next_check_at=None,
                )
                return state
        if checks >= status.max_checks:
            Plan.objects.filter(pk=plan.pk, status=PlanStatus.PENDING).update(
                outcome_detail=f"accepted by the upstream; still not finished after {checks} "
                "checks",
                next_check_at=None,
            )
            return "still-pending"
        countdown = min(2.0**checks * 0.5, 60.0)
        Plan.objects.filter(pk=plan.pk, status=PlanStatus.PENDING).update(
            next_check_at=_due(now, countdown)
        )
        enqueue_follow(plan.id, countdown=countdown)
    return "following"


def _reconcile_read(plan: Plan) -> tuple[str | None, dict[str, Any]]:
    """Re-read the target and decide: applied, not applied, or changed by someone else."""
    spec = plan.action.spec
    with read_client(plan.action.connector) as client:
        result = read_target(client, spec, plan.input)
    kind = plan.kind
    finding: dict[str, Any] = {"exists": result.exists, "version": result.version}
    if kind == "delete":
        if not result.exists:
            return PlanStatus.COMPLETED, {**finding, "verdict": "applied"}
        if result.version == plan.precondition.get("expected"):
            return PlanStatus.REJECTED, {**finding, "verdict": "not applied"}
        return None, {**finding, "verdict": "changed by someone else"}
    if kind == "create":
        if not result.exists:
            return PlanStatus.REJECTED, {**finding, "verdict": "not applied"}
        current = result.body
    else:
        if not result.exists:
            return None, {**finding, "verdict": "the target is gone"}
        current = result.body
    # Compare only what the plan changes: the upstream moves versions and timestamps.
    paths = [c["path"] for c in plan.changes] or ["/"]
    matches_after = all(_at(current, p) == _at(plan.after, p) for p in paths)
    if matches_after:
        return PlanStatus.COMPLETED, {**finding, "verdict": "applied"}
    if kind != "create" and all(_at(current, p) == _at(plan.before, p) for p in paths):
        return PlanStatus.REJECTED, {**finding, "verdict": "not applied"}
    return None, {**finding, "verdict": "changed by someone else"}


def _at(document: Any, pointer: str) -> Any:
    if pointer in ("", "/"):
        return document
    try:
        return resolve_pointer(document, pointer)
    except KeyError:
        return None


def reconcile(*, plan_id, actor: str = ACTOR) -> str:
    """Find out what happened to a plan whose outcome is unknown (or accepted work).

    update/replace/create/delete: re-read the target and compare it with the plan's
    ``after`` and ``before`` on the changed fields. invoke: the action's status request,
    or — where the upstream honours idempotency keys — the same request with the same
    key, which the upstream answers without doing the work twice. Anything else stays
    ``unknown`` for a person, with what was found recorded.
    """
    plan = Plan.objects.select_related("action", "action__connector").filter(id=plan_id).first()
    if plan is None or plan.status not in (PlanStatus.UNKNOWN, PlanStatus.PENDING):
        return f"skipped:{plan.status if plan else 'missing'}"
    if plan.status == PlanStatus.PENDING:
        return pending_follow(plan_id=plan_id)
    attempt = Attempt.objects.filter(plan=plan).first()
    try:
        if plan.kind == "invoke":
            state, finding = _reconcile_invoke(plan, attempt)
        else:
            state, finding = _reconcile_read(plan)
    except (PreviewError, UpstreamError) as exc:
        state, finding = None, {"verdict": f"could not read the upstream: {exc}"}
    except VaultError:
        # Repeating a keyed request needs the write credential, which only workers can
        # open: a check started from a web page hands the work to a worker (due now, so
        # the sweeper publishes it again if this message is lost).
        with transaction.atomic():
            Plan.objects.filter(pk=plan.pk, status=PlanStatus.UNKNOWN).update(
                next_check_at=timezone.now()
            )
            enqueue_reconcile(plan.id, countdown=None)
        return "queued"
    now = timezone.now()
    with transaction.atomic():
        checks = 1
        if attempt is not None:
            checks = attempt.reconcile_checks + 1
            Attempt.objects.filter(pk=attempt.pk).update(
                reconciliation={**finding, "at": now.isoformat(), "by": actor},
                reconcile_checks=checks,
            )
        if state is None:
            audit_record(kind="reconcile.inconclusive", actor=actor, plan=plan, data=finding)
            # Look again later, a few times, then leave it to a person.
            delay = RECONCILE_DELAYS[checks] if checks < len(RECONCILE_DELAYS) else None
            Plan.objects.filter(pk=plan.pk, status=PlanStatus.UNKNOWN).update(
                next_check_at=_due(now, delay)
            )
            if delay is not None:
                enqueue_reconcile(plan.id, countdown=delay)
            return "unknown"
        # What the agent is told about the write comes from the attempt: the status of
        # the answer it got, or of the same key's answer when the request was repeated.
        status = finding.pop("upstream_status", None)
        if status is None and attempt is not None:
            status = attempt.response_status
        plan_transition(
            plan,
            to=state,
            actor=actor,
            event="reconcile.settled",
            data=finding,
            finished_at=now,
            outcome_detail=f"reconciled: {finding['verdict']}",
            upstream_status=status if status is not None else plan.upstream_status,
            next_check_at=None,
        )
    return state


def _reconcile_invoke(plan: Plan, attempt: Attempt | None) -> tuple[str | None, dict[str, Any]]:
    from actions.rules import rule_holds

    spec = plan.action.spec
    if spec.status is not None and spec.status.path:
        with read_client(plan.action.connector) as client:
            response = client.get(spec.render_path(spec.status.path, plan.input))
        if response.status == 200:
            body = response.json()
            if rule_holds(spec.status.done_when, body, {}):
                return PlanStatus.COMPLETED, {"verdict": "applied (status request)"}
            if spec.status.failed_when and rule_holds(spec.status.failed_when, body, {}):
                return PlanStatus.REJECTED, {"verdict": "failed upstream (status request)"}
        return None, {"verdict": f"status request answered {response.status}"}
    if spec.write.idempotency_header and attempt is not None and attempt.sends:
        credential = plan.action.connector.credential(Credential.Role.WRITE)
        if credential is None:
            return None, {"verdict": "no write credential to repeat the keyed request"}
        secret = open_write_secret(credential)
        request = plan.write_request
        headers = {
            **(request.get("headers") or {}),
            spec.write.idempotency_header: attempt.idempotency_key,
        }
        with WriteClient(plan.action.connector, credential_auth(credential, secret)) as client:
            response = client.request(
                request["method"],
                request["path"],
                headers=headers,
                body=request.get("body"),
                content_type=request.get("content_type") or "application/json",
            )
        Attempt.objects.filter(pk=attempt.pk).update(sends=attempt.sends + 1)
        state, _ = classify(response.status, on_conflict=spec.write.on_conflict)
        if state in (
            PlanStatus.COMPLETED,
            PlanStatus.REJECTED,
            PlanStatus.ALREADY_IN_DESIRED_STATE,
        ):
            return state, {
                "verdict": f"the upstream answered the same key with {response.status}",
                "upstream_status": response.status,
            }
        return None, {"verdict": f"the same key was answered {response.status}"}
    return None, {"verdict": "no way to look the outcome up: a person must check"}


def plan_resolve(*, plan_id, reviewer, state: str, note: str) -> Plan:
    """A person records what they found for an unknown outcome."""
    from actions.lib.exceptions import InvalidInput, NotAllowed, NotFound
    from approvals.services import can_review, user_actor

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


# --- the sweeper ------------------------------------------------------------------------


def _lost_wakeups(now, report: dict[str, int]) -> list:
    """Approved plans to publish again: idle past COUNTERSIGN_REQUEUE_AFTER_SECONDS, and
    no more than the broker queue can be missing.

    Under a backlog, approved plans wait longer than the requeue delay with their
    message still queued; publishing them all again would multiply the deliveries each
    sweep. So if the queue holds ``d`` messages and ``n`` plans are overdue, at most
    ``n - d`` messages can have been lost, and only that many (oldest first, at most
    COUNTERSIGN_REQUEUE_BATCH per sweep) are published again. The others keep their
    ``enqueued_at`` and are looked at again next sweep, once the queue has moved. When
    the queue depth cannot be read, every overdue plan counts (up to the batch).
    """
    from .tasks import queued_messages

    requeue_before = now - timedelta(seconds=settings.COUNTERSIGN_REQUEUE_AFTER_SECONDS)
    overdue = Plan.objects.filter(status=PlanStatus.APPROVED, enqueued_at__lte=requeue_before)
    ids = list(
        overdue.order_by("enqueued_at").values_list("id", flat=True)[
            : settings.COUNTERSIGN_REQUEUE_BATCH
        ]
    )
    if not ids:
        return ids
    depth = queued_messages()
    if depth:
        missing = max(0, overdue.count() - depth)
        report["still_queued"] = len(ids) - min(len(ids), missing)
        ids = ids[:missing]
    return ids


def _overdue_looks(now) -> int:
    """Publish again the looks at unsettled outcomes (status requests of accepted work,
    reconciliations of unknown outcomes) whose time came and went with no worker acting
    on them: the message was lost, or the worker holding it died (with Redis, a message a
    dead worker held comes back only after the visibility timeout, an hour).

    Each is marked due now before it is published, so the next sweep leaves it alone for
    COUNTERSIGN_REQUEUE_AFTER_SECONDS; the look itself reschedules or clears it. A
    duplicate delivery is harmless: a look at a settled plan does nothing."""
    grace = timedelta(seconds=settings.COUNTERSIGN_REQUEUE_AFTER_SECONDS)
    overdue = (
        Plan.objects.filter(
            status__in=(PlanStatus.PENDING, PlanStatus.UNKNOWN), next_check_at__lte=now - grace
        )
        .order_by("next_check_at")
        .values_list("id", "status", "next_check_at")[: settings.COUNTERSIGN_REQUEUE_BATCH]
    )
    published = 0
    for plan_id, status, due in overdue:
        with transaction.atomic():
            if Plan.objects.filter(id=plan_id, status=status, next_check_at=due).update(
                next_check_at=now
            ):
                wake_look(plan_id, status, countdown=None)
                published += 1
    return published


def sweep(*, now=None) -> dict[str, int]:
    """Recover from lost messages and dead workers; expire what waited too long.

    * approved plans whose wake-up was published long ago and never acted on are
      published again (a duplicate is harmless: the claim is a row lock);
    * executing plans past their lease: if the attempt provably sent nothing, the plan
      goes back to approved; if the request may have left, the plan is ``unknown``
      and is never sent again;
    * looks at unsettled outcomes (pending, unknown) that are overdue are published
      again (``_overdue_looks``).

    Each run records the sweeper's heartbeat first, so a sweeper that stops running is
    seen on the dashboard and by the readiness check.
    """
    from .tasks import enqueue_execution

    now = now or timezone.now()
    heartbeat_record(name="sweeper", kind=Heartbeat.Kind.SWEEPER)
    report = {
        "expired": plans_expire(now=now),
        "requeued": 0,
        "still_queued": 0,
        "recovered": 0,
        "unknown": 0,
        "looks": 0,
    }
    for plan_id in _lost_wakeups(now, report):
        with transaction.atomic():
            if Plan.objects.filter(id=plan_id, status=PlanStatus.APPROVED).update(enqueued_at=now):
                enqueue_execution(plan_id)
                report["requeued"] += 1
    lease_before = now - timedelta(seconds=settings.COUNTERSIGN_EXECUTION_LEASE_SECONDS)
    for plan in Plan.objects.filter(
        status=PlanStatus.EXECUTING, claimed_at__lte=lease_before
    ).select_related("action")[:500]:
        try:
            with transaction.atomic():
                # Lock the attempt and decide on the state *under the lock*: a slow (not
                # dead) worker commits "sending" with a conditional update on this row, so
                # either it got there first (and we see sending) or it will find the row
                # moved on and not send.
                attempt = Attempt.objects.select_for_update().filter(plan=plan).first()
                if (
                    attempt is None
                    or attempt.state
                    in (
                        Attempt.State.PREPARED,
                        Attempt.State.NOT_SENT,
                    )
                    or (attempt.state == Attempt.State.SENDING and attempt.sends == 0)
                ):
                    # sends == 0: "sending" was committed but the request never left.
                    # The fence now records the first send in the same statement, so a
                    # worker killed after it is read as "may have left" (unknown, then
                    # reconciled); this branch keeps attempts fenced the older way.
                    if attempt is not None:
                        attempt.state = Attempt.State.NOT_SENT
                        attempt.error = "the worker stopped before sending"
                        attempt.save(update_fields=["state", "error"])
                    plan.approvals.filter(used_at=plan.claimed_at).update(used_at=None)
                    plan_transition(
                        plan,
                        to=PlanStatus.APPROVED,
                        actor="system:sweeper",
                        event="execution.recovered",
                        data={"reason": "the worker stopped before sending"},
                        enqueued_at=now,
                    )
                    enqueue_execution(plan.id)
                    report["recovered"] += 1
                else:
                    attempt.state = Attempt.State.LOST
                    attempt.finished_at = now
                    attempt.error = "the worker stopped after the request may have left"
                    attempt.save(update_fields=["state", "finished_at", "error"])
                    plan_transition(
                        plan,
                        to=PlanStatus.UNKNOWN,
                        actor="system:sweeper",
                        event="execution.unknown",
                        data={"reason": "worker lost after sending"},
                        finished_at=now,
                        outcome_detail="the worker stopped after the request may have left; "
                        "the change may or may not have applied",
                        next_check_at=_due(now, RECONCILE_DELAYS[0]),
                    )
                    report["unknown"] += 1
                    enqueue_reconcile(plan.id, countdown=RECONCILE_DELAYS[0])
        except InvalidTransition:
            pass  # the worker finished meanwhile
    report["looks"] = _overdue_looks(now)
    return report
