"""The import: one document in, one report out, stages in order.

The text is parsed within its limits (``document``), converted from Swagger 2.0 if it
is one (``swagger``), its references checked (``refs``) and its operations read
(``operations``); the GETs are proposed as reads first (``reads``), so that a write
(``writes``) can name the read that checks it (``followups``); every draft then passes
the catalog's own checks and is stored disabled, all or none (``store``).
"""

from __future__ import annotations

import re
from functools import partial

from django.db import transaction

from actions.catalog import CatalogProblem

from .document import (
    Budget,
    Exhausted,
    OpenAPIImportError,
    Refused,
    as_names,
    parse_document,
    problem_at,
)
from .naming import action_name
from .operations import Document, Operation
from .proposal import Draft, Setting
from .reads import propose_read
from .report import ImportReport, ListedRead, RefusedOperation
from .store import check_drafts, ensure_connector, record_import, refuse_draft, store
from .swagger import swagger_to_openapi
from .writes import WRITE_METHODS, propose_write


def import_openapi(
    text: str,
    *,
    connector: str,
    actor: str,
    source_name: str = "<upload>",
    dry_run: bool = False,
    create_connector: bool = False,
    prefix: str = "",
    only: list[str] | None = None,
    tags: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> ImportReport:
    """Propose one disabled action per write operation and per GET of one resource;
    store them all or none.

    ``prefix`` is put before every proposed name (names are unique in the catalog, and
    two APIs often use the same ones); ``only`` (operationIds) and ``tags`` select the
    operations considered; ``headers`` gives the values of documented headers an action
    always sends (a ``From`` the upstream requires).

    Raises OpenAPIImportError when the document as a whole is refused (not OpenAPI 3,
    references outside the document, unknown connector). Single operations that cannot
    become a narrow action are listed in ``report.refused`` and not stored.
    """
    budget = Budget()
    try:
        return _import(
            text,
            budget,
            connector=connector,
            actor=actor,
            source_name=source_name,
            dry_run=dry_run,
            create_connector=create_connector,
            prefix=prefix,
            only=only,
            tags=tags,
            headers=headers or {},
        )
    except Exhausted as exc:
        raise OpenAPIImportError([CatalogProblem(exc.pointer, exc.message)], source_name) from None
    except RecursionError:
        # Every walk is bounded in depth; this is the backstop, never a traceback.
        raise OpenAPIImportError(
            [CatalogProblem("", "the document is nested too deeply to import")], source_name
        ) from None


def _import(
    text: str,
    budget: Budget,
    *,
    connector: str,
    actor: str,
    source_name: str,
    dry_run: bool,
    create_connector: bool,
    prefix: str,
    only: list[str] | None,
    tags: list[str] | None,
    headers: dict[str, str],
) -> ImportReport:
    _check_options(headers, prefix, source_name)
    root = parse_document(text, source_name, budget)
    notes: list[str] = []
    if root.get("swagger") == "2.0":
        root, notes = swagger_to_openapi(root)
        notes.insert(0, "converted from Swagger 2.0 to OpenAPI 3.0 before importing")
    doc = Document(root, source_name, budget)
    report = ImportReport(connector=connector, source_name=source_name, dry_run=dry_run)
    report.warnings.extend(problem_at("/swagger", note) for note in notes)
    for key in ("webhooks", "x-countersign"):
        if key in doc.root:
            report.warnings.append(problem_at(f"/{key}", f"{key} at the top level is not imported"))
    operations = doc.operations()
    setting = Setting.of(doc, operations, connector=connector, prefix=prefix, headers=headers)
    selected = _selected(doc, operations, only=only, tags=tags)
    order = {op.pointer: i for i, op in enumerate(selected)}
    drafts = _propose(setting, selected, report, budget)
    drafts.sort(key=lambda d: order[d.op.pointer])
    drafts = _unique(drafts, report)

    with transaction.atomic():
        report.connector_created = ensure_connector(doc, connector, create_connector)
        # The reads are checked first: a write names only a read that is proposed.
        accepted = check_drafts([d for d in drafts if d.kind == "read"], report, budget)
        accepted += check_drafts([d for d in drafts if d.kind != "read"], report, budget)
        report.proposed.sort(key=lambda p: order[p.pointer])
        if not dry_run:
            store(accepted, actor=actor)
            record_import(report, actor=actor)
        if dry_run:
            transaction.set_rollback(True)
    return report


def _check_options(headers: dict[str, str], prefix: str, source_name: str) -> None:
    for name, value in headers.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,63}", name) or not re.fullmatch(
            r"[\x20-\x7E]{0,200}", value
        ):
            raise OpenAPIImportError(
                [CatalogProblem("", f"header {name!r}: a token name and printable ASCII value")],
                source_name,
            )
    if prefix and not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", prefix):
        raise OpenAPIImportError(
            [CatalogProblem("", f"prefix {prefix!r}: lowercase letters, digits and _ only")],
            source_name,
        )


def _propose(
    setting: Setting, selected: list[Operation], report: ImportReport, budget: Budget
) -> list[Draft]:
    """A draft for every operation that can be proposed; the others are refused or
    listed in the report. Reads first, so that a write can name the read that checks it."""
    # The reads proposed from this document's GETs, by path.
    reads: dict[str, Draft] = {}

    def attempt(op: Operation, make) -> Draft | str | None:
        try:
            return make(op)
        except Refused as exc:
            reasons = [problem_at(exc.pointer, exc.message)]
        except (TypeError, AttributeError, ValueError, KeyError) as exc:
            # A part of the operation that is not shaped as OpenAPI says (a list where a
            # mapping belongs, ...): refuse the operation rather than guess.
            reasons = [problem_at(op.pointer, f"the operation is malformed ({type(exc).__name__})")]
        report.refused.append(RefusedOperation(op.label, action_name(op)[0], reasons))
        return None

    drafts: list[Draft] = []
    for op in selected:
        budget.check_time(op.pointer)
        if op.method == "head":
            report.reads.append(
                ListedRead(op.describe(), "a HEAD answers without a body: not proposed")
            )
        elif op.method == "get":
            made = attempt(op, partial(propose_read, setting))
            if isinstance(made, str):
                report.reads.append(ListedRead(op.describe(), made))
            elif made is not None:
                drafts.append(made)
                reads[op.path] = made
    for op in selected:
        budget.check_time(op.pointer)
        if op.method in ("get", "head"):
            continue
        if op.method not in WRITE_METHODS:
            report.refused.append(
                RefusedOperation(
                    op.label,
                    op.operation_id,
                    [problem_at(op.pointer, f"{op.method.upper()} is not an action")],
                )
            )
            continue
        made = attempt(op, partial(propose_write, setting, reads))
        if isinstance(made, Draft):
            drafts.append(made)
    return drafts


def _unique(drafts: list[Draft], report: ImportReport) -> list[Draft]:
    """The drafts in the document's order, each name once: a second operation that
    would take a name already proposed is refused."""
    names: dict[str, str] = {}
    unique: list[Draft] = []
    for draft in drafts:
        if draft.name in names:
            refuse_draft(report, draft, f"the name {draft.name!r} is already {names[draft.name]}")
            draft.outcome = "refused"
            continue
        names[draft.name] = f"proposed for {draft.op.label}"
        unique.append(draft)
    return unique


def _selected(
    doc: Document, operations: list[Operation], *, only: list[str] | None, tags: list[str] | None
) -> list[Operation]:
    """The operations an import considers: all, or those named (operationIds) or tagged.
    A name that matches nothing refuses the import: a typo must not import nothing."""
    if not only and not tags:
        return operations
    wanted_ids = set(only or [])
    wanted_tags = set(tags or [])
    unknown = sorted(wanted_ids - {op.operation_id for op in operations})
    if unknown:
        doc.refuse("/paths", f"--only names no operation of this document: {', '.join(unknown)}")
    known_tags = {t for op in operations for t in as_names(op.node.get("tags"))}
    missing_tags = sorted(wanted_tags - known_tags)
    if missing_tags:
        doc.refuse("/paths", f"--tag names no tag of this document: {', '.join(missing_tags)}")
    return [
        op
        for op in operations
        if op.operation_id in wanted_ids or wanted_tags & set(as_names(op.node.get("tags")))
    ]
