from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from actions.lib.exceptions import NotFound
from actions.services import credential_revoke


class Command(BaseCommand):
    help = (
        "Revoke the live credentials of a connector for one role (read or write). "
        "Takes effect for the next execution; store a new one with set_credential."
    )

    def add_arguments(self, parser):
        parser.add_argument("connector")
        parser.add_argument("role", choices=["read", "write"])

    def handle(self, *args, connector: str, role: str, **options):
        try:
            count = credential_revoke(connector_name=connector, role=role, actor="cli")
        except NotFound as exc:
            raise CommandError(exc.detail) from None
        self.stdout.write(f"{connector} {role}: {count} credential(s) revoked")
