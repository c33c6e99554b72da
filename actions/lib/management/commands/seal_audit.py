from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from actions.lib.checkpoints import SealerError, SealingKeyUnavailable, audit_seal


class Command(BaseCommand):
    help = (
        "Integrate the committed audit events into the tree and sign checkpoints (what the workers "
        "holding the key do every COUNTERSIGN_SEAL_SECONDS). Needs COUNTERSIGN_AUDIT_KEY_FILE."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--loop", type=float, metavar="SECONDS", help="keep sealing, this often"
        )

    def handle(self, *args, loop: float | None, **options):
        while True:
            try:
                report = audit_seal()
            except (SealingKeyUnavailable, SealerError) as exc:
                raise CommandError(str(exc)) from None
            if report["idle"]:
                if not loop:
                    self.stdout.write("nothing to seal")
            elif not report["leased"]:
                self.stdout.write("another sealer holds the lease")
            elif report["checkpoints"] or not loop:
                self.stdout.write(
                    f"sealed {report['events']} events in {report['checkpoints']} checkpoints"
                    + (" (waiting for open transactions)" if report["waiting"] else "")
                )
            if not loop:
                return
            time.sleep(loop)
