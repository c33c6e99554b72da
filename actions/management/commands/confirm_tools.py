"""``manage.py confirm_tools CONNECTOR``: review and confirm the MCP server's tools.

The server's current tools/list is read; every tool whose definition differs from the
confirmed one is shown as a unified diff (pretty-printed JSON of its description,
schemas and annotations), then confirmed with --yes or after a y/N answer."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from actions.connectors.mcp.pins import ToolChanged, tools_confirm
from actions.connectors.mcp.reading import McpReader
from actions.mcp_import.proposal import UNPRINTABLE
from actions.models import Action, Connector, ToolPin
from actions.toolpins import definition_diff, tool_definition, tool_digest


class Command(BaseCommand):
    help = (
        "Show each MCP tool whose served definition differs from the confirmed one as a "
        "unified diff, and confirm it (--yes, or answer y)."
    )

    def add_arguments(self, parser):
        parser.add_argument("connector")
        parser.add_argument(
            "--tool", action="append", default=[], help="only this tool; repeatable"
        )
        parser.add_argument("--yes", action="store_true", help="confirm without asking")
        parser.add_argument("--actor", default="confirm_tools", help="recorded as who confirmed")

    def handle(self, *args, connector: str, tool: list[str], yes: bool, actor: str, **opts):
        conn = Connector.objects.filter(name=connector, kind="mcp").first()
        if conn is None:
            raise CommandError(f"no MCP connector named {connector!r}")
        try:
            served = McpReader(conn).tools()
        except Exception as exc:  # noqa: BLE001 - said, never a traceback
            raise CommandError(f"the server's tools could not be listed: {exc}") from None
        names = tool or _used_tools(conn)
        by_name = {t.get("name"): t for t in served}
        pins = {p.tool: p for p in ToolPin.objects.filter(connector=conn)}
        changed = []
        for name in names:
            if name not in by_name:
                raise CommandError(f"the server of {connector} offers no tool {name}")
            pin = pins.get(name)
            shown = UNPRINTABLE.sub("?", name)
            if pin is not None and pin.digest == tool_digest(by_name[name]):
                self.stdout.write(f"{shown}: unchanged")
                continue
            changed.append(name)
            self.stdout.write(f"{shown}: {'changed' if pin and pin.digest else 'not confirmed'}")
            diff = definition_diff(pin.definition if pin else None, tool_definition(by_name[name]))
            self.stdout.write(diff)
        if not changed:
            self.stdout.write("nothing to confirm")
            return
        if not yes and not _ask(f"confirm {len(changed)} tool definition(s)? [y/N] "):
            self.stdout.write("nothing confirmed")
            return
        try:
            done = tools_confirm(conn, served, names=changed, actor=actor)
        except ToolChanged as exc:
            raise CommandError(exc.detail) from None
        self.stdout.write(UNPRINTABLE.sub("?", f"confirmed: {', '.join(done) or 'nothing'}"))


def _used_tools(connector) -> list[str]:
    """Every tool the connector's actions call, and every tool already pinned."""
    names = {
        name
        for action in Action.objects.filter(connector=connector)
        if action.spec.mcp is not None
        for name in action.spec.mcp.tools
    }
    names |= set(ToolPin.objects.filter(connector=connector).values_list("tool", flat=True))
    return sorted(names)


def _ask(prompt: str) -> bool:
    if not sys.stdin.isatty():
        answer = sys.stdin.readline()
    else:
        answer = input(prompt)
    return answer.strip().lower() in ("y", "yes")
