"""A draft policy set replayed over the stored plans, and compared with what happened
(``manage.py policy_backtest``, the admin's backtest page; docs/policy.md, Backtesting).

Each plan of the window is put to the draft as its policies saw it at submission: its
input, the target as read (``before``), ``after`` and the changes, its agent (as it is
now: name, registrar, attributes) and the person it was for. The time and the agent's
rate are the ones recorded in the plan's policy part when it has one; a plan stored
before any policy was in force has none, so its time is its ``created_at`` and its rate
is counted here, in the same pass, from the plans before it (``RateWindows``).

The report opens with what the draft changes against the set in force: the policies it
adds, removes and changes, by id, in each part it gives (``policy_set_changes``). Then
what it loosens, each a list with links:

* plans the draft would **approve with no person** that went to people (any status: the
  policies then sent them to review, or there were none) — a security lead reads these
  first;
* submissions the policies in force **refused** then (``RefusedSubmission``, recorded at
  submission: approvals/decisions/refusals.py) that the draft would let through, to
  review or to an automatic yes, with the forbids that refused them then;

then where it disagrees with people:

* plans the draft would **approve** that people said no to, or that went wrong: denied;
  cancelled by a reviewer (an approval revoked, or the plan replaced by a reviewer's
  edit or by a fresh preview because its target moved); or ended ``stale``,
  ``refused``, ``unknown``, ``rejected`` or ``not_applied``. Expired plans do not count
  (nobody looked at them: no one said yes or no) nor do plans the agent cancelled; the
  totals count both;
* plans the draft would **refuse** that a person approved (themselves, or by their
  session grant) and that ended ``completed`` or ``already_in_desired_state``;
* **requirement changes**: plans the draft sends to people with a different
  requirement from the one stored, its ``@require`` clauses taking the place of those
  the policies of the time added (``policy:<id>``), beside the decision rules' own;

then the totals (plans read by status, by who approved them, by what the draft says,
and the two crossed), and the policies that failed to evaluate, with how many plans.

History is read in pages, keyset-paginated on (``created_at``, ``id``) over the index
that serves it, ``PAGE_SIZE`` plans at a time (then the refused submissions of the
window, the same way), and evaluated a page at a time with ``policy_evaluate_batch``.
Nothing grows with the history's length: the totals are counters, each list keeps its
``MAX_LISTED`` most recent plans, and the rate windows hold one day of plans, at most
``RATE_CAP`` per agent and action (docs/policy.md says so). Refused submissions are
put to the draft with the time and rate they recorded, and never count in a plan's
rate (the submission counts stored plans only).

The package by concern: ``history.py`` (the window, the agent's rate counted from history,
history read in pages), ``replay.py`` (a run: the draft over each plan and refused
submission, compared with what happened, into the report), ``runs.py`` (the admin's runs,
requested on the page and run by a worker), ``text.py`` (the report, for people).
"""

from .history import (
    MAX_LISTED,
    MAX_PAGE_SIZE,
    PAGE_SIZE,
    PROGRESS_PAGES,
    STALLED_AFTER,
    BacktestRefused,
    RateWindows,
    backtest_moment,
    backtest_window,
)
from .replay import backtest_audit, backtest_run, backtest_summary
from .runs import policy_backtest_execute, policy_backtest_request
from .text import changes_text, report_text

__all__ = [
    "MAX_LISTED",
    "MAX_PAGE_SIZE",
    "PAGE_SIZE",
    "PROGRESS_PAGES",
    "STALLED_AFTER",
    "BacktestRefused",
    "RateWindows",
    "backtest_audit",
    "backtest_moment",
    "backtest_run",
    "backtest_summary",
    "backtest_window",
    "changes_text",
    "policy_backtest_execute",
    "policy_backtest_request",
    "report_text",
]
