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
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from actions.exceptions import InvalidTransition
from actions.fingerprint import plan_fingerprint_matches
from actions.models import Credential
from actions.preview import PreviewError, read_target, resolve_pointer
from actions.vault import VaultError, auth_headers, secret_values
from approvals.models import Approval, Plan, PlanStatus
from approvals.services import plan_transition, plans_expire

from .http import UpstreamError, WriteClient, read_client
from .models import Attempt
from .vault import open_write_secret

log = logging.getLogger(__name__)

ACTOR = "system:executor"
# Tries to reach the upstream before sending anything, before giving up honestly.
MAX_UNSENT_TRIES = 3
MAX_STORED_BODY = 4096
REDACTED = "[redacted]"
_SENSITIVE_HEADERS = {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}


@dataclass
class Claim:
    plan: Plan
    attempt: Attempt
    credential: Credential


def redact_headers(
    headers: dict[str, str], extra_sensitive: set[str] | None = None
) -> dict[str, str]:
    sensitive = _SENSITIVE_HEADERS | {h.lower() for h in (extra_sensitive or set())}
    return {k: (REDACTED if k.lower() in sensitive else v) for k, v in headers.items()}


def redact_text(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if value:
            text = text.replace(value, REDACTED)
    return text


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_STORED_BODY else text[:MAX_STORED_BODY] + "…[truncated]"


# --- 1. claim -------------------------------------------------------------------------


def _refusal_reason(plan: Plan, now) -> str | None:
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
    valid = plan.approvals.filter(
        decision=Approval.Decision.APPROVE,
        fingerprint=plan.fingerprint,
        used_at__isnull=True,
        expires_at__gt=now,
    ).count()
    if valid < plan.required_approvals:
        return "no valid approval: missing, expired or already used"
    if action.connector.credential(Credential.Role.WRITE) is None:
        return "no usable write credential (missing, revoked or expired)"
    return None


def _claim(plan_id) -> Claim | None:
    now = timezone.now()
    with transaction.atomic():
        plan = (
            Plan.objects.select_for_update()
            .select_related("action", "action__connector", "agent")
            .filter(id=plan_id)
            .first()
        )
        if plan is None or plan.status != PlanStatus.APPROVED:
            # A duplicate delivery, or work already done: nothing to do.
            return None
        reason = _refusal_reason(plan, now)
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
        plan.approvals.filter(
            decision=Approval.Decision.APPROVE, fingerprint=plan.fingerprint, used_at__isnull=True
        ).update(used_at=now)
        attempt, created = Attempt.objects.get_or_create(
            plan=plan, defaults={"idempotency_key": uuid.uuid4().hex}
        )
        if not created and attempt.state != Attempt.State.NOT_SENT:
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
        credential = plan.action.connector.credential(Credential.Role.WRITE)
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
    **attempt_fields: Any,
) -> Plan:
    now = timezone.now()
    attempt = claim.attempt
    with transaction.atomic():
        attempt.state = attempt_state
        attempt.finished_at = now
        for key, value in attempt_fields.items():
            setattr(attempt, key, value)
        attempt.save()
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
        )
    return claim.plan


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


def classify(status: int) -> tuple[str, str]:
    """Map an upstream status to (plan state, short reason an agent may see)."""
    if status == 202:
        return PlanStatus.PENDING, "accepted by the upstream; the work is not finished yet"
    if 200 <= status < 300:
        return PlanStatus.COMPLETED, "applied"
    if status in (412, 428):
        return PlanStatus.STALE, "the upstream's precondition failed: the target changed"
    if status in (401, 403):
        return PlanStatus.REJECTED, "the upstream refused the write credential"
    if status == 409:
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


def execution_run(*, plan_id) -> str:
    """Execute one approved plan at most once. Returns the outcome (or why nothing ran)."""
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

    try:
        unchanged, found = _revalidate(claim)
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
    credential_headers = auth_headers(claim.credential, secret)
    secrets = secret_values(secret)
    recorded = {
        "method": request["method"],
        "url": plan.action.connector.base_url + request["path"],
        "headers": redact_headers({**headers, **credential_headers}, set(credential_headers)),
        "body": request.get("body"),
    }
    # Fencing: commit "sending" only if this worker still holds the claim. If the sweeper
    # presumed us dead and another worker re-claimed the plan, ``tries`` moved on and
    # this update matches nothing: we must not send.
    sent_at = timezone.now()
    with transaction.atomic():
        still_ours = Plan.objects.filter(
            id=plan.id, status=PlanStatus.EXECUTING, claimed_at=plan.claimed_at
        ).exists() and Attempt.objects.filter(
            id=attempt.id, state=Attempt.State.PREPARED, tries=attempt.tries
        ).update(state=Attempt.State.SENDING, sent_at=sent_at, request=recorded, revalidation=found)
    if not still_ours:
        log.warning("plan %s: claim lost before sending; not sending", plan.id)
        return "skipped:claim-lost"
    attempt.state, attempt.sent_at = Attempt.State.SENDING, sent_at
    attempt.request, attempt.revalidation = recorded, found

    try:
        with WriteClient(plan.action.connector, credential_headers) as client:
            response = client.request(
                request["method"],
                request["path"],
                headers=headers,
                body=request.get("body"),
                content_type=request.get("content_type") or "application/json",
            )
    except UpstreamError as exc:
        if not exc.sent:
            return _release_unsent(claim, str(exc))
        _finish(
            claim,
            to=PlanStatus.UNKNOWN,
            detail="no answer after the request was sent; the change may or may not have applied",
            attempt_state=Attempt.State.LOST,
            error=str(exc),
        )
        return PlanStatus.UNKNOWN

    state, detail = classify(response.status)
    if 200 <= response.status < 300 and _refused_in_body(spec.write.rejected_when, response):
        state = PlanStatus.REJECTED
        detail = "the upstream refused the change in its answer; nothing was applied"
    body_text = redact_text(response.body.decode("utf-8", "replace"), secrets)
    _finish(
        claim,
        to=state,
        detail=detail,
        attempt_state=Attempt.State.ANSWERED,
        upstream_status=response.status,
        response_status=response.status,
        response_headers=redact_headers(response.headers),
        response_body=_bounded(body_text),
        duration_ms=response.elapsed_ms,
    )
    log.info("plan %s executed: %s (%s)", plan.id, state, response.status)
    return state


# --- the sweeper ------------------------------------------------------------------------


def sweep(*, now=None) -> dict[str, int]:
    """Recover from lost messages and dead workers; expire what waited too long.

    * approved plans whose wake-up was published long ago and never acted on are
      published again (a duplicate is harmless: the claim is a row lock);
    * executing plans past their lease: if the attempt provably sent nothing, the plan
      goes back to approved; if the request may have left, the plan is ``unknown``
      and is never sent again.
    """
    from .tasks import enqueue_execution

    now = now or timezone.now()
    report = {"expired": plans_expire(now=now), "requeued": 0, "recovered": 0, "unknown": 0}
    requeue_before = now - timedelta(seconds=settings.COUNTERSIGN_REQUEUE_AFTER_SECONDS)
    for plan_id in Plan.objects.filter(
        status=PlanStatus.APPROVED, enqueued_at__lte=requeue_before
    ).values_list("id", flat=True)[:500]:
        with transaction.atomic():
            if Plan.objects.filter(id=plan_id, status=PlanStatus.APPROVED).update(enqueued_at=now):
                enqueue_execution(plan_id)
                report["requeued"] += 1
    lease_before = now - timedelta(seconds=settings.COUNTERSIGN_EXECUTION_LEASE_SECONDS)
    for plan in Plan.objects.filter(
        status=PlanStatus.EXECUTING, claimed_at__lte=lease_before
    ).select_related("action")[:500]:
        attempt = Attempt.objects.filter(plan=plan).first()
        try:
            with transaction.atomic():
                if attempt is None or attempt.state in (
                    Attempt.State.PREPARED,
                    Attempt.State.NOT_SENT,
                ):
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
                    )
                    report["unknown"] += 1
        except InvalidTransition:
            pass  # the worker finished meanwhile
    return report
