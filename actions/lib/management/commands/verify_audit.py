from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from actions.lib.audit import audit_verify


class Command(BaseCommand):
    help = "Verify the audit trail's hash chain; report the first broken link."

    def handle(self, *args, **options):
        checked, broken = audit_verify()
        if broken is not None:
            raise CommandError(
                f"audit chain broken at event {broken.id} "
                f"({broken.kind} at {broken.at.isoformat()}); "
                f"{checked} events before it are intact"
            )
        self.stdout.write(f"audit chain intact: {checked} events")
