from __future__ import annotations

from pathlib import Path

import yaml
from django.core.management.base import BaseCommand, CommandError

from actions.catalog import (
    CatalogError,
    CatalogProblem,
    catalog_apply,
    catalog_document,
    parse_catalog_text,
)

# What a policies file may hold: the rest of the catalog stays as it is in force.
KEYS = {"version", "policies"}


class Command(BaseCommand):
    help = (
        "Replace the policy set with a file's policies: section (version: 1 and policies: "
        "only), validated against the catalog in force as a full catalog load validates "
        "it. Connectors, actions and decision rules are left as they are."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")

    def handle(self, *args, file: str, **options):
        path = Path(file)
        if path.suffix == ".cedar":
            raise CommandError(
                f"{file} is one policy text: name it in a policies file "
                "(version: 1, then policies: enforce: - file: NAME.cedar), so that every "
                "policy in force is said each time"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise CommandError(f"cannot read {file}: not UTF-8 text") from None
        source = str(path)
        try:
            document = parse_catalog_text(text, source)
            problems = self._shape_problems(document, text)
            if problems:
                raise CatalogError(source, problems)
            # The same checks as a full load, against the catalog in force (this file
            # has no actions of its own), and the same versioning and audit.
            document = catalog_document(text, source=source, base_dir=path.parent)
            report = catalog_apply(document)
        except CatalogError as exc:
            lines = [f"{exc.source}: the policies were not loaded:"]
            lines += [f"  {problem}" for problem in exc.problems]
            raise CommandError("\n".join(lines)) from None
        state = "new" if report.policies_changed else "unchanged"
        self.stdout.write(f"policies: version {report.policies} in force ({state})")
        for name in report.groups_created:
            self.stdout.write(f"  group {name} created (empty, without permissions)")

    @staticmethod
    def _shape_problems(document, text: str) -> list[CatalogProblem]:
        if not isinstance(document, dict):
            return []  # the catalog's own checks say what is wrong
        problems = [
            CatalogProblem(
                "/" + str(key).replace("~", "~0").replace("/", "~1"),
                f"a policies file holds only version and policies: load {key} with the "
                "whole catalog (manage.py load_catalog)",
                _key_line(text, key),
            )
            for key in set(document) - KEYS
        ]
        problems.sort(key=lambda p: p.line or 0)
        if "policies" not in document:
            problems.append(
                CatalogProblem("", "no policies: section (an empty set is policies: {})", 1)
            )
        return problems


def _key_line(text: str, key) -> int | None:
    """The line a top-level key is written on (its value may start on the next)."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)  # parsed once already: it is YAML
    for key_node, _ in getattr(node, "value", []):
        if key_node.value == str(key):
            return key_node.start_mark.line + 1
    return None
