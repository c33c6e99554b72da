from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from actions.lib.exceptions import CountersignError
from approvals.roles import ROLES, role_grant, roles_ensure


class Command(BaseCommand):
    help = (
        "Make the four roles' groups (reviewers, policy-authors, catalog-admins, "
        "vault-admins) and keep their permissions exactly as Countersign defines them; "
        "with --grant USERNAME ROLE, also give a person a role (an admin role makes them "
        "staff). Safe to run again: it changes only what differs."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--grant",
            nargs=2,
            metavar=("USERNAME", "ROLE"),
            help=f"give USERNAME the ROLE ({', '.join(ROLES)})",
        )

    def handle(self, *args, grant: list[str] | None, **options):
        try:
            changes = roles_ensure(actor="cli")
            for group, said in changes.items():
                self.stdout.write(f"group {group}: {', '.join(said)}")
            if grant:
                username, role = grant
                if role_grant(username=username, role=role, actor="cli"):
                    self.stdout.write(f"{username} is now a {role}")
                else:
                    self.stdout.write(f"{username} was already a {role}")
        except CountersignError as exc:
            raise CommandError(exc.detail) from None
        if not changes and not grant:
            self.stdout.write("the roles' groups are in step")
