from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from actions.exceptions import NotFound
from actions.services import agent_create


class Command(BaseCommand):
    help = "Register an agent and print its bearer token (shown this once only)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--actions", default="", help="comma-separated action names")

    def handle(self, *args, name: str, actions: str, **options):
        names = [a.strip() for a in actions.split(",") if a.strip()]
        try:
            agent, token = agent_create(name=name, action_names=names, actor="cli")
        except NotFound as exc:
            raise CommandError(exc.detail) from None
        except IntegrityError:
            raise CommandError(f"an agent named {name!r} already exists") from None
        self.stdout.write(f"agent {agent.name} created with {len(names)} actions")
        self.stdout.write("token (store it now; it is not kept and will not be shown again):")
        self.stdout.write(token)
