from __future__ import annotations

import getpass
import secrets
import sys

from django.core.management.base import BaseCommand, CommandError

from actions.lib.exceptions import CountersignError
from approvals.services import REVIEWERS_GROUP, reviewer_create


class Command(BaseCommand):
    help = (
        "Create a reviewer: a user in a group that may approve or deny plans (the group is "
        "created with that permission if missing). The password is generated and printed "
        "once, or read from standard input with --password-stdin (never from the command "
        "line, where it would land in shell history and ps output)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--group",
            default=REVIEWERS_GROUP,
            help=f"the reviewers' group (default {REVIEWERS_GROUP!r}); an existing group "
            "must already carry the permission to review plans",
        )
        parser.add_argument(
            "--password-stdin",
            action="store_true",
            help="read the password from standard input (one line; asked twice, hidden, "
            "on a terminal) instead of generating one; it must pass the password validators",
        )

    def handle(self, *args, username: str, email: str, group: str, password_stdin: bool, **opts):
        password = self._read_password() if password_stdin else secrets.token_urlsafe(18)
        try:
            user, group_created = reviewer_create(
                username=username, password=password, email=email, group=group, actor="cli"
            )
        except CountersignError as exc:
            reasons = [f"{e['pointer'].lstrip('/')}: {e['message']}" for e in exc.errors]
            raise CommandError("; ".join(reasons) or exc.detail) from None
        if group_created:
            self.stdout.write(f"group {group} created with the permission to review plans")
        self.stdout.write(f"reviewer {user.get_username()} created in group {group}")
        if not password_stdin:
            self.stdout.write("password (store it now; only its hash is kept):")
            self.stdout.write(password)

    def _read_password(self) -> str:
        if sys.stdin.isatty():
            password = getpass.getpass("password: ")
            if getpass.getpass("password (again): ") != password:
                raise CommandError("the two passwords differ")
        else:
            # Only the line ending is removed: spaces may be part of a password.
            password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise CommandError("empty password on standard input")
        return password
