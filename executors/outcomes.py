"""What an upstream's answer to a write means: the plan's state, and a short reason an
agent may read (never the upstream's own words)."""

from __future__ import annotations

from email.utils import parsedate_to_datetime
from typing import Any

from django.utils import timezone

from actions.lib.canonical import resolve_pointer
from approvals.models import PlanStatus


def classify(status: int, *, on_conflict: str = "rejected") -> tuple[str, str]:
    """Map an upstream status to (plan state, short reason an agent may see)."""
    if status == 202:
        return PlanStatus.PENDING, "accepted by the upstream; the work is not finished yet"
    if 200 <= status < 300:
        return PlanStatus.COMPLETED, "applied"
    if status == 412:
        # Refined by a re-read: "changed" only if the target did
        # (executors/services.py: _precondition_failed).
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
