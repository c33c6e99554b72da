"""``manage.py policy_test CASES.yaml``: run policy test cases (actions/policy/cases.py)
against the policies in force, a catalog file's ``policies:`` section (``--catalog``) or
Cedar files (``--policies``). One line per case, a summary, and a non-zero exit when a
case fails; a malformed cases file or policy is refused with where and why."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from actions.catalog import CatalogError, parse_catalog_text
from actions.policy.cases import CaseError, case_mismatches, cases_read
from actions.policy.drafts import (
    Draft,
    DraftRefused,
    draft_from_catalog,
    draft_read,
    stored_actions,
)
from actions.policy.engine import policy_evaluate
from actions.policy.sources import ENFORCE, SHADOW
from actions.policy.versions import policies_in_force


class Command(BaseCommand):
    help = (
        "Run policy test cases: each a plan's input and the target as read, with the "
        "outcome expected (refuse, approve or review)."
    )

    def add_arguments(self, parser):
        parser.add_argument("cases", help="the cases file (YAML)")
        source = parser.add_mutually_exclusive_group()
        source.add_argument(
            "--catalog",
            metavar="FILE",
            help="the policies: section of this catalog file, with its actions (nothing is loaded)",
        )
        source.add_argument(
            "--policies",
            nargs="+",
            metavar="FILE",
            help="these .cedar files, as the enforce part",
        )
        parser.add_argument(
            "--shadow", action="store_true", help="evaluate the shadow part instead"
        )

    def handle(
        self,
        *args,
        cases: str,
        catalog: str | None,
        policies: list[str] | None,
        shadow: bool,
        **options,
    ):
        if catalog or policies:
            draft = _draft(catalog=catalog, policies=policies)
            compiled, actions = draft.compiled, draft.actions
        else:
            actions = stored_actions()
            compiled = policies_in_force()
            if compiled.problem:
                raise CommandError(compiled.problem)
        path = Path(cases)
        try:
            document = parse_catalog_text(_read(path), str(path))
            loaded = cases_read(document, actions=actions)
        except CatalogError as exc:
            raise CommandError("\n".join(f"{exc.source}: {p}" for p in exc.problems)) from None
        except CaseError as exc:
            raise CommandError(f"{path}: {exc}") from None
        part = SHADOW if shadow else ENFORCE
        failed = 0
        for case in loaded:
            result = policy_evaluate(case.facts, compiled, part=part)
            decided = f" ({', '.join(result.policies)})" if result.policies else ""
            notes = [
                e.message if not e.policy else f"{e.policy}: {e.message}" for e in result.errors
            ]
            if result.floor:
                notes.append(result.floor)
            tail = f" [{'; '.join(notes)}]" if notes else ""
            mismatches = case_mismatches(case, result)
            if mismatches:
                failed += 1
                self.stdout.write(
                    f"FAIL {case.number:>3} {case.name}: {'; '.join(mismatches)}{tail}"
                )
            else:
                self.stdout.write(
                    f"ok   {case.number:>3} {case.name}: {result.outcome}{decided}{tail}"
                )
        total = len(loaded)
        summary = (
            f"{total} case{'s' if total != 1 else ''}: {total - failed} passed, {failed} failed"
        )
        if failed:
            raise CommandError(summary)
        self.stdout.write(summary)


def _draft(*, catalog: str | None, policies: list[str] | None) -> Draft:
    try:
        return draft_from_catalog(catalog) if catalog else draft_read(policies or [])
    except DraftRefused as exc:
        raise CommandError(str(exc)) from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise CommandError(f"cannot read {path}: {why}") from None
