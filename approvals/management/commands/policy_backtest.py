"""``manage.py policy_backtest DRAFT --since 30d``: replay a draft policy set over the
stored plans and list where it disagrees with what happened (approvals/decisions/
backtest.py; docs/policy.md, Backtesting).

DRAFT is one or more ``.cedar`` files or directories of them (the enforce part), or one
catalog file (its ``policies:`` section, checked with the whole file). A draft that does
not hold is refused with each problem's file and line, and nothing is read. The report
goes to standard output (``--json FILE`` writes it for machines too); progress goes to
standard error every few pages. Audited as ``policy.backtest``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from actions.policy.drafts import DraftRefused, draft_read
from approvals.decisions.backtest import (
    MAX_LISTED,
    PAGE_SIZE,
    PROGRESS_PAGES,
    BacktestRefused,
    backtest_audit,
    backtest_run,
    backtest_window,
    report_text,
)


class Command(BaseCommand):
    help = (
        "Replay a draft policy set (.cedar files, directories of them, or a catalog file's "
        "policies: section) over the stored plans, and list where it disagrees with what "
        "people decided and what happened."
    )

    def add_arguments(self, parser):
        parser.add_argument("draft", nargs="+", help=".cedar files or directories, or a catalog")
        parser.add_argument(
            "--since",
            default="30d",
            help="from when: 7d, 12h, 90m, 2w before now, a date (2026-11-01) or a date "
            "and time with its offset (default 30d)",
        )
        parser.add_argument("--until", default="", help="until when, in the same forms (now)")
        parser.add_argument("--json", metavar="FILE", help="write the report as JSON here too")
        parser.add_argument(
            "--page-size", type=int, default=PAGE_SIZE, help=f"plans per page ({PAGE_SIZE})"
        )
        parser.add_argument(
            "--listed",
            type=int,
            default=MAX_LISTED,
            help=f"plans listed at most in each list, the most recent ({MAX_LISTED})",
        )
        parser.add_argument(
            "--progress-pages",
            type=int,
            default=PROGRESS_PAGES,
            help=f"say how far it got every N pages on standard error ({PROGRESS_PAGES})",
        )
        parser.add_argument("--actor", default="", help="who runs it, for the audit trail")

    def handle(self, *args, draft: list[str], since: str, until: str, **options):
        try:
            found = draft_read(draft, check_groups=True)
        except DraftRefused as exc:
            raise CommandError(str(exc)) from None
        try:
            start, end = backtest_window(since, until)
        except BacktestRefused as exc:
            raise CommandError(str(exc)) from None
        if not 1 <= options["listed"] <= 10_000:
            raise CommandError("--listed: 1 to 10000")
        if options["progress_pages"] < 1:
            raise CommandError("--progress-pages: 1 or more")
        began = time.monotonic()

        def progress(pages: int, plans: int, seconds: float) -> None:
            sys.stderr.write(
                f"  {_count(plans, 'plan')} read in {_count(pages, 'page')}, {seconds:.1f} s\n"
            )
            sys.stderr.flush()

        try:
            report = backtest_run(
                policies=found.compiled,
                since=start,
                until=end,
                page_size=options["page_size"],
                listed=options["listed"],
                progress=progress,
                progress_pages=options["progress_pages"],
                source=found.source,
                parts=found.parts,
            )
        except BacktestRefused as exc:
            raise CommandError(str(exc)) from None
        actor = f"cli:{options['actor']}" if options["actor"] else "cli"
        backtest_audit(actor=actor, report=report)
        self.stdout.write(report_text(report), ending="")
        if options["json"]:
            path = Path(options["json"])
            try:
                path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"cannot write {path}: {exc.strerror}") from None
        sys.stderr.write(f"done in {time.monotonic() - began:.1f} s\n")


def _count(n: int, word: str) -> str:
    """``1 page``, ``2 pages``: the progress line's counts."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"
