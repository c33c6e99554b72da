from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError
from django.utils import timezone

from actions.exceptions import NotFound
from actions.services import agent_create


class Command(BaseCommand):
    help = "Register an agent and print its bearer token (shown this once only)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--actions", default="", help="comma-separated action names")
        parser.add_argument(
            "--activate",
            action="store_true",
            help="make the agent usable at once (otherwise an admin activates it)",
        )
        parser.add_argument(
            "--expires-in-days", type=int, default=None, help="the token stops working after"
        )

    def handle(self, *args, name: str, actions: str, activate: bool, expires_in_days, **options):
        names = [a.strip() for a in actions.split(",") if a.strip()]
        expires_at = None
        if expires_in_days is not None:
            if expires_in_days < 1:
                raise CommandError("--expires-in-days must be at least 1")
            expires_at = timezone.now() + timedelta(days=expires_in_days)
        try:
            agent, token = agent_create(
                name=name,
                action_names=names,
                actor="cli",
                active=activate,
                expires_at=expires_at,
            )
        except NotFound as exc:
            raise CommandError(exc.detail) from None
        except IntegrityError:
            raise CommandError(f"an agent named {name!r} already exists") from None
        self.stdout.write(f"agent {agent.name} created with {len(names)} actions")
        if not activate:
            self.stdout.write("the agent is INACTIVE until an admin activates it")
        self.stdout.write("token (store it now; it is not kept and will not be shown again):")
        self.stdout.write(token)
