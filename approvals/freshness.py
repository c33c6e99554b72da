"""Is a plan's preview still what the target looks like? Asked by the plan page before
it offers Approve, so a reviewer never approves a preview another change has already
made obsolete (the worker would only find it stale after the approval).

This reads the upstream with the read-only client and its read credential, exactly as
the preview did (``actions.preview.read_target``), so it changes nothing and answers
within the connector's timeouts. It runs outside any transaction and holds no lock. An
upstream's answer is hostile: whatever goes wrong, the page is told only that freshness
could not be checked, never what the upstream said. The worker re-reads the target
right before writing in any case (guarantee 3); this only spares the reviewer an
approval that cannot succeed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from actions.connectors.registry import kind_of
from actions.preview import read_target

from .models import Plan

log = logging.getLogger(__name__)

# What the page says (approvals/views/plan.py words each in the reader's language).
FRESH = "fresh"  # the target is at the version the preview read (or still absent)
MOVED = "moved"  # its version moved on: preview again instead of approving
GONE = "gone"  # it no longer exists
APPEARED = "appeared"  # it was absent for a create, and now exists
UNCHECKED = "unchecked"  # the upstream could not be read: say so, offer Approve
NOTHING = "nothing"  # no readable state (an invoke): nothing to compare


@dataclass(frozen=True)
class Freshness:
    state: str

    @property
    def obsolete(self) -> bool:
        """The preview no longer matches: approving could only end stale."""
        return self.state in (MOVED, GONE, APPEARED)


def plan_freshness(plan: Plan) -> Freshness:
    """Re-read ``plan``'s target and compare it with the precondition it was previewed
    under."""
    precondition = plan.precondition or {}
    kind = precondition.get("kind")
    if kind not in ("version", "absent"):
        return Freshness(NOTHING)
    action = plan.action
    try:
        spec = action.spec
        if spec.read is None:
            return Freshness(NOTHING)
        with kind_of(action.connector).reader(action.connector) as client:
            read = read_target(client, spec, plan.input)
    except Exception as exc:  # noqa: BLE001 - any failure is "could not check", not a 500
        # The type only: an upstream's words (which may echo what it was sent) stay out
        # of the logs as well as the page.
        log.warning("freshness of plan %s not checked: %s", plan.id, type(exc).__name__)
        return Freshness(UNCHECKED)
    if kind == "absent":
        return Freshness(APPEARED if read.exists else FRESH)
    if not read.exists:
        return Freshness(GONE)
    return Freshness(FRESH if read.version == precondition.get("expected") else MOVED)
