"""``manage.py import_mcp CONNECTOR``: propose an action per tool of an MCP server."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from actions.mcp_import import McpImportError, import_mcp, render_report


class Command(BaseCommand):
    help = (
        "Propose one action per tool of an MCP connector's server, classified from the "
        "tools' annotations. Every proposal is stored disabled, its class unconfirmed, "
        "until an admin reviews it; confirming it pins the tool definitions seen here."
    )

    def add_arguments(self, parser):
        parser.add_argument("connector")
        parser.add_argument(
            "--dry-run", action="store_true", help="show what would be proposed; store nothing"
        )
        parser.add_argument(
            "--tool", action="append", default=[], help="import only this tool; repeatable"
        )
        parser.add_argument("--actor", default="import_mcp", help="recorded as the author")

    def handle(self, *args, connector: str, dry_run: bool, tool: list[str], actor: str, **opts):
        try:
            report = import_mcp(connector, actor=actor, dry_run=dry_run, only=tool or None)
        except McpImportError as exc:
            raise CommandError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - an admin command reports, never a traceback
            raise CommandError(f"import failed: {type(exc).__name__}") from None
        self.stdout.write(render_report(report))
