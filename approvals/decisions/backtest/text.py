"""The report, for people: what ``manage.py policy_backtest`` prints."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from actions.policy.engine import (
    APPROVE,
)

# --- the report, for people --------------------------------------------------------------------


def _counted(n: int, word: str) -> str:
    """``1 page``, ``2 pages``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def report_text(report: Mapping[str, Any]) -> str:
    """The report as the command prints it: what matters first, with links."""
    totals = report["totals"]
    lines = [
        f"Draft {report['draft']['hash'][:12]} ({report['draft']['source'] or 'text'}): "
        f"{', '.join(report['draft']['policies']) or 'no policy'}",
        *changes_text(report.get("changes")),
        f"Window: {report['window']['since']} to {report['window']['until']}; "
        f"{_counted(totals['plans'], 'plan')} read in "
        f"{_counted(report['read']['pages'], 'page')} "
        f"of {report['read']['page_size']} ({report['read']['seconds']:.1f} s); "
        f"{_counted(report['refused_let_through']['read'], 'refused submission')}",
        "",
    ]

    def section(title: str, key: str, describe: Callable[[dict], str]) -> None:
        found = report[key]
        lines.append(f"{title}: {found['count']:,}")
        shown = found["plans"]
        if found["count"] > len(shown):
            lines.append(f"  (the {len(shown)} most recent)")
        for plan in shown:
            lines.append(
                f"  {plan['created_at'][:19]}  {plan['action']}  {plan['target']}  {describe(plan)}"
            )
            lines.append(f"    {plan['url']}")
        lines.append("")

    def policies(plan: dict) -> str:
        return ", ".join(plan["draft"]["policies"]) or "-"

    section(
        "Would approve with no person what went to people",
        "new_approvals",
        lambda p: f"{p['status']} (approved by {p['by'] or 'nobody'}); approved by {policies(p)}",
    )
    refused = report["refused_let_through"]
    lines.append(
        f"Refused then, let through by the draft: {refused['count']:,} "
        f"of {refused['read']:,} refused submissions"
    )
    if refused["count"] > len(refused["submissions"]):
        lines.append(f"  (the {len(refused['submissions'])} most recent)")
    for sub in refused["submissions"]:
        draft = sub["draft"]
        would = (
            f"approve by {', '.join(draft['policies']) or '-'}"
            if draft["outcome"] == APPROVE
            else f"review ({sub['requirement'] or 'the class default'})"
        )
        lines.append(
            f"  {sub['created_at'][:19]}  {sub['action']}  {sub['target']}  "
            f"refused by {', '.join(sub['refused_by']) or '-'} (v{sub['set_version']}): "
            f"{sub['refusal']}; now {would}"
        )
        lines.append(f"    refused submission {sub['id']}, input {sub['input']}")
        for change in sub["changes"]:
            lines.append(f"    {change['path']}: {change['before']} -> {change['after']}")
    lines.append("")
    section(
        "Would approve what people said no to, or what went wrong",
        "approve_disagreements",
        lambda p: f"{p['why']}; approved by {policies(p)}",
    )
    section(
        "Would refuse what a person approved and was done",
        "refuse_disagreements",
        lambda p: f"{p['status']} (approved by {p['by']}); refused by {policies(p)}",
    )
    section(
        "Would change who must approve",
        "requirement_changes",
        lambda p: f"{p['before']} -> {p['after']}",
    )
    lines.append("Totals")
    lines.append(f"  plans by status: {_pairs(totals['by_status'])}")
    lines.append(f"  approved by: {_pairs(totals['approved_by'])}")
    lines.append(f"  the draft would: {_pairs(totals['draft'])}")
    for outcome, statuses in totals["draft_by_status"].items():
        lines.append(f"    {outcome}: {_pairs(statuses)}")
    lines.append(f"  recorded outcome -> draft: {_pairs(totals['recorded_to_draft'])}")
    lines.append(
        f"  cancelled by a reviewer: {totals['cancelled_by_reviewer']:,}; rates counted "
        f"from history (none recorded): {totals['rate_counted']:,}"
    )
    errors = report["errors"]
    lines.append(f"Errors: {errors['plans']:,} plans")
    for policy, count in errors["by_policy"].items():
        lines.append(f"  {policy}: {count:,} plans ({errors['messages'].get(policy, '')})")
    return "\n".join(lines) + "\n"


def changes_text(changes: Mapping[str, Any] | None) -> list[str]:
    """What the draft changes against the set in force, by id, a line a part."""
    if not changes:
        return []
    against = changes.get("against")
    lines = [
        f"Against the set in force (version {against['version']}, {against['hash'][:12]}):"
        if against
        else "Against the set in force: none (no policy is in force)"
    ]
    for part in ("enforce", "shadow"):
        found = changes.get(part)
        if found is None:
            lines.append(f"  {part}: not in the draft (not compared)")
            continue
        said = [
            f"{word} " + ", ".join(f"{p['id']} ({p['kind']})" for p in found[key])
            for key, word in (("added", "added"), ("removed", "removed"), ("changed", "changed"))
            if found[key]
        ]
        lines.append(
            f"  {part}: "
            + ("; ".join(said) if said else "no change")
            + f"; {found['unchanged']} unchanged"
        )
    return lines


def _pairs(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in counts.items()) or "none"
