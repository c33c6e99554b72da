"""What an HTTP upstream's answer to a write means: the plan's state, a short reason an
agent may read (never the upstream's own words), and whether it may be sent again."""

from __future__ import annotations

from email.utils import parsedate_to_datetime
from typing import Any

from django.utils import timezone

from actions.lib.canonical import resolve_pointer

from ..base import Outcome, Resend, Verdict


def classify(status: int, *, on_conflict: str = "rejected") -> tuple[str, str]:
    """Map an upstream status to (outcome state, short reason an agent may see)."""
    if status == 202:
        return Outcome.PENDING, "accepted by the upstream; the work is not finished yet"
    if 200 <= status < 300:
        return Outcome.COMPLETED, "applied"
    if status == 412:
        # Refined by a re-read: "changed" only if the target did (Verdict.fence_refused).
        return Outcome.STALE, "the upstream's precondition failed: the target changed"
    if status == 428:
        return (
            Outcome.REJECTED,
            "the upstream requires a precondition this request could not carry; "
            "nothing was written",
        )
    if status in (401, 403):
        return Outcome.REJECTED, "the upstream refused the write credential"
    if status == 409:
        if on_conflict == Outcome.ALREADY_IN_DESIRED_STATE:
            return Outcome.ALREADY_IN_DESIRED_STATE, "the target was already as requested"
        return Outcome.REJECTED, "the upstream reported a conflict"
    if status == 429:
        return Outcome.REJECTED, "the upstream is rate limiting; nothing was applied"
    if 400 <= status < 500:
        return Outcome.REJECTED, f"the upstream refused the request ({status})"
    return (
        Outcome.UNKNOWN,
        f"the upstream failed ({status}); the change may or may not have applied",
    )


def verdict(spec, response, precondition: dict[str, Any], *, repeat: bool = False) -> Verdict:
    """The whole reading of an answer to a write (see ``ConnectorKind.classify``). The
    answer to a repeated keyed request (``repeat``) is read by its status alone: it is
    the upstream's record of the key's first answer."""
    status = response.status
    state, detail = classify(status, on_conflict=spec.write.on_conflict)
    if repeat:
        return Verdict(state, detail)
    if 200 <= status < 300 and refused_in_body(spec.write.rejected_when, response):
        state = Outcome.REJECTED
        detail = "the upstream refused the change in its answer; nothing was applied"
    resend = None
    if status == 429:
        wait = retry_after_seconds(response.header("retry-after"))
        if wait is not None:
            resend = Resend(after=wait, note=f"429, waited {wait:.1f}s as Retry-After asked")
    elif status >= 500:
        resend = Resend(after=None, note=f"{status}; re-sent with the same key")
    if status == 412 and precondition["kind"] == "none":
        return Verdict(
            Outcome.REJECTED, "the upstream answered 412 to a request that carried no precondition"
        )
    return Verdict(
        state,
        detail,
        resend=resend,
        fence_refused=status == 412,
        credential_refused=status in (401, 403),
    )


def refused_in_body(rule: dict[str, Any] | None, response) -> bool:
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
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - timezone.now()).total_seconds())
