from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from approvals.ops.health import readiness


class Command(BaseCommand):
    help = (
        "The readiness checks of GET /readyz, run here (database, broker, migrations, the "
        "sweeper's and the workers' heartbeats), for process supervisors: exit status 0 "
        "when ready, 1 otherwise. Prints one line per check, or the /readyz JSON with --json."
    )

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the /readyz document")

    def handle(self, *args, **options):
        ready, body = readiness()
        if options["json"]:
            self.stdout.write(json.dumps(body))
        else:
            for check in body["checks"]:
                mark = "ok  " if check["ok"] else "FAIL"
                value = f" ({check['value']})" if "value" in check else ""
                self.stdout.write(f"{mark} {check['name']}: {check['detail']}{value}")
            self.stdout.write(body["status"])
        if not ready:
            raise SystemExit(1)
