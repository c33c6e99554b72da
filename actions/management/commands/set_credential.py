from __future__ import annotations

import getpass
import sys

from django.core.management.base import BaseCommand, CommandError

from actions.models import Connector, Credential
from actions.services import credential_set
from actions.vault import VaultError


class Command(BaseCommand):
    help = (
        "Store a connector credential. The secret is read from standard input (never "
        "from the command line, where it would land in shell history and ps output)."
    )

    def add_arguments(self, parser):
        parser.add_argument("connector")
        parser.add_argument("role", choices=["read", "write"])
        parser.add_argument("--scheme", choices=["bearer", "header"], default="bearer")
        parser.add_argument("--header-name", default="")

    def handle(self, *args, connector: str, role: str, scheme: str, header_name: str, **options):
        conn = Connector.objects.filter(name=connector).first()
        if conn is None:
            raise CommandError(f"no connector named {connector!r}")
        if scheme == "header" and not header_name:
            raise CommandError("--scheme header needs --header-name")
        token = getpass.getpass("secret: ") if sys.stdin.isatty() else sys.stdin.readline().strip()
        if not token:
            raise CommandError("empty secret")
        try:
            credential = credential_set(
                connector=conn,
                role=role,
                secret={"token": token},
                scheme=scheme,
                header_name=header_name,
                actor="cli",
            )
        except VaultError as exc:
            raise CommandError(str(exc)) from None
        sealed = "sealed to the worker's key" if role == Credential.Role.WRITE else "encrypted"
        self.stdout.write(
            f"{role} credential for {connector} stored ({sealed}); id {credential.id}"
        )
