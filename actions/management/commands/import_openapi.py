from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from actions.openapi import (
    MAX_DOCUMENT_BYTES,
    ImportReport,
    OpenAPIImportError,
    import_openapi,
)


class Command(BaseCommand):
    help = (
        "Propose actions from an OpenAPI 3.0/3.1 document. Every proposal is stored "
        "disabled, its consequence class unconfirmed, until an admin reviews it."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--connector", required=True, help="the connector the actions use")
        parser.add_argument(
            "--dry-run", action="store_true", help="show what would be proposed; store nothing"
        )
        parser.add_argument(
            "--create-connector",
            action="store_true",
            help="create the connector from the document's servers[0].url if it does not exist",
        )
        parser.add_argument(
            "--prefix",
            default="",
            help="put before every proposed name (names are unique in the catalog): stripe_",
        )
        parser.add_argument(
            "--only",
            default="",
            help="import only these operations: operationIds, comma-separated",
        )
        parser.add_argument(
            "--tag",
            default="",
            help="import only operations with one of these tags, comma-separated",
        )
        parser.add_argument(
            "--header",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a documented header every action of the import sends with this value "
            "(e.g. From=ops@example.com); repeatable; never a credential",
        )
        parser.add_argument("--actor", default="import_openapi", help="recorded as the author")

    def handle(self, *args, file: str, connector: str, dry_run: bool, **options):
        headers = {}
        for item in options["header"]:
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise CommandError(f"--header {item!r}: write NAME=VALUE")
            headers[name.strip()] = value.strip()
        path = Path(file)
        try:
            # At most the limit and one byte is read: a larger file is refused unread.
            with path.open("rb") as handle:
                raw = handle.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror}") from None
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise CommandError(
                f"{file}: the document is larger than {MAX_DOCUMENT_BYTES // 2**20} MiB; "
                "nothing was imported"
            )
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise CommandError(f"{file}: not UTF-8 text") from None
        del raw
        try:
            report = import_openapi(
                text,
                connector=connector,
                actor=options["actor"],
                source_name=str(path),
                dry_run=dry_run,
                create_connector=options["create_connector"],
                prefix=options["prefix"],
                only=_csv(options["only"]),
                tags=_csv(options["tag"]),
                headers=headers,
            )
        except OpenAPIImportError as exc:
            lines = [f"{exc.source}: the document was not imported:"]
            lines += [f"  {problem}" for problem in exc.problems]
            raise CommandError("\n".join(lines)) from None
        except Exception as exc:  # noqa: BLE001 - an admin command reports, never a traceback
            raise CommandError(f"{file}: import failed: {type(exc).__name__}: {exc}") from None
        self.stdout.write(render_report(report))


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def render_report(report: ImportReport) -> str:
    stored = [p for p in report.proposed if p.stored in ("created", "updated")]
    head = f"{report.source_name} -> connector {report.connector}"
    if report.connector_created:
        head += " (created)"
    reads = sum(1 for p in report.proposed if p.kind == "read")
    head += (
        f": {len(report.proposed)} actions proposed ({reads} reads), "
        f"{len(report.refused)} operations refused, {len(report.reads)} read operations "
        "not proposed"
    )
    lines = [head + (" [dry run: nothing stored]" if report.dry_run else "")]
    width = max([len(p.name) for p in report.proposed] + [4])
    for p in report.proposed:
        review = "needs review" if p.class_source == "method" else "class declared, confirm it"
        if p.class_lowered_from:
            review = f"class LOWERED by the document from {p.class_lowered_from}, confirm it"
        state = f"  [{p.stored}]" if p.stored else ""
        lines.append(
            f"  {p.name:<{width}}  {p.kind:<7}  {p.consequence_class:<12}  {review}  "
            f"{p.operation}{state}"
        )
        if p.result_fields:
            lines.append(f"      returns: {', '.join(p.result_fields)}")
        if p.check_with:
            lines.append(f"      checked with: {p.check_with}")
        if p.status_operation:
            lines.append(f"      status operation: {p.status_operation}")
        if p.status_follow:
            lines.append(f"      status followed at: {p.status_follow}")
        for warning in p.warnings:
            lines.append(f"      ! {warning['pointer']}: {warning['message']}")
    if report.refused:
        lines.append("refused:")
        for r in report.refused:
            lines.append(f"  {r.name or '-'}  {r.operation}")
            for reason in r.reasons:
                lines.append(f"      x {reason['pointer']}: {reason['message']}")
    if report.reads:
        lines.append("read operations not proposed (lists, searches, no JSON answer):")
        lines += [f"  {read.operation}: {read.reason}" for read in report.reads]
    for warning in report.warnings:
        lines.append(f"! {warning['pointer']}: {warning['message']}")
    if stored:
        lines.append(
            f"{len(stored)} actions stored disabled: an admin completes each card and "
            "confirms its class before enabling it."
        )
    return "\n".join(lines)
