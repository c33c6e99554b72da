from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from actions.catalog import CatalogError, load_catalog


class Command(BaseCommand):
    help = "Load connectors and actions from a catalog YAML file (all or nothing)."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument(
            "--base-url",
            action="append",
            default=[],
            metavar="CONNECTOR=URL",
            help="override a connector's base URL (repeatable)",
        )

    def handle(self, *args, file: str, base_url: list[str], **options):
        overrides = {}
        for item in base_url:
            name, sep, url = item.partition("=")
            if not sep or not name or not url:
                raise CommandError(f"--base-url expects CONNECTOR=URL, got {item!r}")
            overrides[name] = url
        path = Path(file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror}") from None
        try:
            report = load_catalog(text, source=str(path), base_urls=overrides, base_dir=path.parent)
        except CatalogError as exc:
            lines = [f"{exc.source}: the catalog was not loaded:"]
            lines += [f"  {problem}" for problem in exc.problems]
            raise CommandError("\n".join(lines)) from None
        self.stdout.write(
            f"catalog loaded: {len(report.connectors)} connectors; "
            f"actions created {len(report.created)}, updated {len(report.updated)}, "
            f"unchanged {len(report.unchanged)}"
        )
        for name in report.updated:
            self.stdout.write(f"  {name}: new version (pending plans of the old one cannot run)")
        if report.policies is not None:
            state = "new" if report.policies_changed else "unchanged"
            self.stdout.write(f"  policies: version {report.policies} in force ({state})")
