"""``manage.py confirm_class ACTION``: a person confirms an imported action's class.

For an action imported from an MCP server this also pins the tools it uses to the
definitions the import saw (actions.toolpins.confirm_action_tools), as the admin's
"Confirm class and enable" does. It does not enable the action: that stays a decision
made in the admin, with the card complete."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from actions.catalog import action_confirm_class
from actions.models import Action, ToolPin


class Command(BaseCommand):
    help = (
        "Confirm an imported action's consequence class (an MCP action's tools are pinned "
        "to what the import saw). The action stays disabled until enabled in the admin."
    )

    def add_arguments(self, parser):
        parser.add_argument("action")
        parser.add_argument("--actor", default="confirm_class", help="recorded as who confirmed")

    def handle(self, *args, action: str, actor: str, **options):
        try:
            confirmed = action_confirm_class(name=action, actor=actor)
        except Action.DoesNotExist:
            raise CommandError(f"no action named {action!r}") from None
        self.stdout.write(f"{confirmed.name}: class {confirmed.consequence_class} confirmed")
        mcp = confirmed.spec.mcp
        if mcp is not None:
            pins = ToolPin.objects.filter(connector_id=confirmed.connector_id, tool__in=mcp.tools)
            for pin in pins:
                state = f"pinned {pin.digest[:12]}" if pin.digest else "NOT pinned (never seen)"
                self.stdout.write(f"  tool {pin.tool}: {state}")
