from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from actions.lib.exceptions import NotFound
from actions.services import agent_revoke


class Command(BaseCommand):
    help = "Revoke an agent's token for good; it never authenticates again."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name: str, **options):
        try:
            agent = agent_revoke(name=name, actor="cli")
        except NotFound as exc:
            raise CommandError(exc.detail) from None
        self.stdout.write(f"agent {agent.name} revoked at {agent.revoked_at:%Y-%m-%d %H:%M:%S %Z}")
