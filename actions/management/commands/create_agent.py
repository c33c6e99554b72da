from __future__ import annotations

import getpass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError
from django.utils import timezone

from actions.lib.exceptions import NotFound
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
        parser.add_argument(
            "--created-by",
            default=None,
            metavar="USERNAME",
            help="the person registering the agent (a Countersign user); defaults to the "
            "user running this command if an account of that name exists. The registrar "
            "cannot be the only approver of the agent's irreversible plans.",
        )

    def handle(
        self,
        *args,
        name: str,
        actions: str,
        activate: bool,
        expires_in_days,
        created_by: str | None,
        **options,
    ):
        names = [a.strip() for a in actions.split(",") if a.strip()]
        expires_at = None
        if expires_in_days is not None:
            if expires_in_days < 1:
                raise CommandError("--expires-in-days must be at least 1")
            expires_at = timezone.now() + timedelta(days=expires_in_days)
        registrar = self._registrar(created_by)
        try:
            agent, token = agent_create(
                name=name,
                action_names=names,
                created_by=registrar,
                actor=f"cli:{registrar.get_username()}" if registrar else "cli",
                active=activate,
                expires_at=expires_at,
            )
        except NotFound as exc:
            raise CommandError(exc.detail) from None
        except IntegrityError:
            raise CommandError(f"an agent named {name!r} already exists") from None
        self.stdout.write(f"agent {agent.name} created with {len(names)} actions")
        if registrar is None:
            self.stdout.write(
                "no registrar recorded (pass --created-by USERNAME): separation of duties "
                "cannot tell who registered this agent"
            )
        else:
            self.stdout.write(f"registered by {registrar.get_username()}")
        if not activate:
            self.stdout.write("the agent is INACTIVE until an admin activates it")
        self.stdout.write("token (store it now; it is not kept and will not be shown again):")
        self.stdout.write(token)

    def _registrar(self, username: str | None):
        """The person registering the agent: named explicitly, or the account matching
        the operating-system user who runs the command. Someone always creates an agent;
        recording who lets the separation-of-duties rule apply to it."""
        users = get_user_model().objects
        if username is not None:
            user = users.filter(**{users.model.USERNAME_FIELD: username}).first()
            if user is None:
                raise CommandError(f"no user named {username!r} (--created-by)")
            return user
        try:
            running = getpass.getuser()
        except (KeyError, OSError):
            return None
        return users.filter(**{users.model.USERNAME_FIELD: running}).first()
