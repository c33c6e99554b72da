"""Importing an MCP server's tools as actions (``manage.py import_mcp``, the admin).

The server's tools/list is read through the connector's preview-side session; each tool
becomes a proposed action (proposal.py) checked by the catalog's own checks and stored
disabled, its class unconfirmed, until a person reviews and confirms it. What the import
saw of each tool is recorded as its pin's ``seen_definition``: confirming the action later
pins exactly that, so a server that changed in between is caught at the next plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from actions.catalog import action_define, validate_action_definition
from actions.connectors.registry import kind_of
from actions.lib.audit import audit_record
from actions.models import Action, Connector
from actions.toolpins import record_seen, tool_digest

from .proposal import UNPRINTABLE, ToolProposal, propose

__all__ = ["McpImportError", "McpImportReport", "ToolProposal", "import_mcp", "render_report"]

# A read that declares no result is refused by the catalog when enabled; stored disabled,
# it waits for a person to declare its fields.
_TOLERATED = ("/result",)


class McpImportError(Exception):
    """The import could not start (no such connector, not an MCP server, no answer)."""


@dataclass
class McpImportReport:
    connector: str
    dry_run: bool
    proposals: list[ToolProposal] = field(default_factory=list)

    @property
    def stored(self) -> list[ToolProposal]:
        return [p for p in self.proposals if p.stored in ("created", "updated")]


def import_mcp(
    connector_name: str, *, actor: str, dry_run: bool = False, only: list[str] | None = None
) -> McpImportReport:
    """Propose one action per tool of the MCP connector ``connector_name``."""
    connector = Connector.objects.filter(name=connector_name).first()
    if connector is None:
        raise McpImportError(f"no connector named {connector_name!r}")
    if connector.kind != "mcp":
        raise McpImportError(
            f"{connector_name} is not an MCP server (its kind is {connector.kind})"
        )
    try:
        served = kind_of(connector).reader(connector).tools()
    except Exception as exc:  # noqa: BLE001 - said to the person, never a traceback
        raise McpImportError(f"the server's tools could not be listed: {exc}") from None
    report = McpImportReport(connector=connector_name, dry_run=dry_run)
    names: set[str] = set()
    wanted = set(only or [])
    storing: list[tuple[dict, ToolProposal]] = []
    for tool in served:
        if wanted and tool.get("name") not in wanted:
            continue
        proposal = propose(connector_name, tool, served)
        report.proposals.append(proposal)
        if proposal.name in names:
            proposal.refused.append(f"another tool of this server is also named {proposal.name}")
            continue
        names.add(proposal.name)
        _check(proposal)
        if not proposal.refused:
            storing.append((tool, proposal))
    if dry_run or not storing:
        return report
    # Every proposal and the import's record in one transaction (the server was read
    # before it: no network inside): an import is stored whole or not at all.
    with transaction.atomic():
        for tool, proposal in storing:
            _store(connector, tool, proposal, actor=actor)
        audit_record(
            kind="mcp.imported",
            actor=actor,
            data={
                "connector": connector_name,
                "stored": sorted(p.name for p in report.stored),
                "refused": sorted(p.tool for p in report.proposals if p.refused),
            },
        )
    return report


def _check(proposal: ToolProposal) -> None:
    existing = Action.objects.filter(name=proposal.name).select_related("connector").first()
    if existing is not None and (
        existing.source != Action.Source.MCP
        or existing.connector.name != proposal.definition["connector"]
    ):
        proposal.refused.append(
            f"an action named {proposal.name} already exists (from "
            f"{existing.get_source_display().lower()}, connector {existing.connector.name})"
        )
        return
    for problem in validate_action_definition(proposal.name, proposal.definition):
        if proposal.kind == "read" and problem.pointer in _TOLERATED:
            continue
        proposal.refused.append(f"{problem.pointer or '/'}: {problem.message}")


def _store(connector: Connector, tool: dict, proposal: ToolProposal, *, actor: str) -> None:
    current = Action.objects.filter(name=proposal.name).first()
    if current is not None and (current.enabled or current.class_confirmed):
        # A person reviewed it: the import never overwrites that.
        proposal.stored = "kept"
        return
    _, change = action_define(
        name=proposal.name,
        definition=proposal.definition,
        actor=actor,
        source=Action.Source.MCP,
        class_confirmed=False,
        lint=proposal.lint,
    )
    proposal.stored = change
    record_seen(connector, tool, tool_digest(tool))


def render_report(report: McpImportReport) -> str:
    """The report as text (the command prints it; the admin shows it escaped)."""
    refused = [p for p in report.proposals if p.refused]
    head = (
        f"connector {report.connector}: {len(report.proposals)} tools, "
        f"{len(report.proposals) - len(refused)} proposed, {len(refused)} refused"
    )
    lines = [head + (" [dry run: nothing stored]" if report.dry_run else "")]
    width = max([len(p.name) for p in report.proposals] + [4])
    for p in report.proposals:
        state = f"  [{p.stored}]" if p.stored else ""
        status = "REFUSED" if p.refused else f"{p.kind:<7} {p.consequence_class:<12} {p.recipe}"
        lines.append(f"  {p.name:<{width}}  {status}  (tool {p.tool}){state}")
        lines += [f"      why: {why}" for why in p.why]
        lines += [f"      ! {n['pointer']}: {n['message']}" for n in p.lint]
        lines += [f"      x {reason}" for reason in p.refused]
    if report.stored:
        lines.append(
            f"{len(report.stored)} actions stored disabled: an admin completes each card, "
            "confirms its class (which also confirms the tool definitions seen here) and "
            "enables it."
        )
    return UNPRINTABLE.sub("?", "\n".join(lines))
