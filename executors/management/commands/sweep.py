from __future__ import annotations

from django.core.management.base import BaseCommand

from executors.sweeper import sweep


class Command(BaseCommand):
    help = "Run the sweeper once: requeue lost work, settle dead executions, expire plans."

    def handle(self, *args, **options):
        report = sweep()
        self.stdout.write(" ".join(f"{k}={v}" for k, v in report.items()))
