"""State changes for plans and approvals. Views, the API, MCP and the commands call these;
nothing else writes Plan.status (the transitions themselves are approvals/lifecycle.py).

The services are grouped by concern, one module each: proposing a plan (submission, with
what checks and refuses it before it is stored in checks, the input's validation in
validation, the plans given back for a key or a repeat in replays), deciding one
(deciding: approvals, break-glass, signatures), stopping one (cancelling), unsettled
outcomes (outcomes), revisions (revisions) and the reviewers (reviewers).

Callers import from ``approvals.services`` as before: which room a service sits in is this
package's business, and one front door keeps every caller (pages, API, MCP, commands,
bench and tests) unchanged when a room is split again. The rooms import each other, never
this module.
"""

from __future__ import annotations

from .cancelling import approval_revoke, plan_cancel
from .deciding import approval_record
from .outcomes import plan_check_request, plan_resolve
from .replays import Replay
from .reviewers import REVIEWERS_GROUP, reviewer_create, reviewers_group_ensure
from .revisions import plan_edit, plan_preview_again
from .submission import plan_submit
from .validation import plan_validate_input

__all__ = [
    "REVIEWERS_GROUP",
    "Replay",
    "approval_record",
    "approval_revoke",
    "plan_cancel",
    "plan_check_request",
    "plan_edit",
    "plan_preview_again",
    "plan_resolve",
    "plan_submit",
    "plan_validate_input",
    "reviewer_create",
    "reviewers_group_ensure",
]
