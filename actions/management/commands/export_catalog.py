from __future__ import annotations

import os
import tempfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from actions.export import ExportError, export_catalog


class Command(BaseCommand):
    help = "Write the catalog (connectors and actions, never credentials) as a catalog file."

    def add_arguments(self, parser):
        parser.add_argument("--output", "-o", metavar="FILE", help="write here, not to stdout")
        parser.add_argument(
            "--connector",
            action="append",
            default=None,
            metavar="NAME",
            help="only this connector and its actions (repeatable)",
        )

    def handle(self, *args, output: str | None, connector: list[str] | None, **options):
        try:
            text = export_catalog(connectors=connector)
        except ExportError as exc:
            raise CommandError(str(exc)) from None
        if not output:
            self.stdout.write(text, ending="")
            return
        path = Path(output)
        # Write beside the target and rename: an interrupted export never leaves half a
        # catalog where a later load_catalog would find it.
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, path)
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise CommandError(f"cannot write {output}: {exc.strerror}") from None
        self.stderr.write(f"catalog written to {output}")
