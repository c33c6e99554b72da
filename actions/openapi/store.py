"""Checking and storing: every draft through the catalog's own checks, a connector
created from the document when asked, and what passes stored disabled, all or none."""

from __future__ import annotations

import re
from typing import Any

from actions.catalog import CatalogProblem, action_define, validate_action_definition
from actions.lib.audit import audit_record
from actions.lib.canonical import CanonicalJSONError, digest, normalize
from actions.models import Action, Connector

from .document import Budget, as_dict, problem_at
from .operations import Document
from .proposal import Draft
from .report import ImportReport, ProposedAction, RefusedOperation
from .text import result_sentence


def ensure_connector(doc: Document, name: str, create: bool) -> bool:
    if Connector.objects.filter(name=name).exists():
        return False
    if not create:
        doc.refuse("", f"unknown connector {name!r}: create it first (or pass --create-connector)")
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", name):
        doc.refuse("", f"{name!r} is not a connector name (lowercase slug)")
    servers = doc.root.get("servers") or []
    server = servers[0] if isinstance(servers, list) and servers else {}
    url = server.get("url", "") if isinstance(server, dict) else ""
    for var, spec in as_dict(as_dict(server).get("variables")).items():
        if isinstance(spec, dict) and isinstance(spec.get("default"), str):
            url = url.replace("{" + var + "}", spec["default"])
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^/?#@{}]+(/[^?#{}]*)?", url):
        doc.refuse(
            "/servers/0/url",
            f"cannot create connector {name!r}: servers[0].url ({url!r}) is not an absolute "
            "http(s) URL",
        )
    Connector.objects.create(name=name, base_url=url.rstrip("/"))
    return True


def check_drafts(
    drafts: list[Draft], report: ImportReport, budget: Budget
) -> list[tuple[Draft, ProposedAction]]:
    """Validate every proposal with the catalog's own checks; refuse what fails."""
    accepted = []
    existing = {
        a.name: a
        for a in Action.objects.filter(name__in=[d.name for d in drafts]).select_related(
            "connector"
        )
    }
    for draft in drafts:
        budget.check_time(draft.op.pointer)
        draft.outcome = "refused"
        current = existing.get(draft.name)
        if current is not None and current.source != Action.Source.OPENAPI:
            refuse_draft(
                report,
                draft,
                f"an action named {draft.name!r} already exists (from "
                f"{current.get_source_display().lower()}): rename it with "
                "x-countersign: {name: ...}",
            )
            continue
        if current is not None and current.connector.name != report.connector:
            # Names are unique in the catalog. Another API's action of the same name is
            # never re-pointed here: that would be a new action wearing a reviewed name.
            refuse_draft(
                report,
                draft,
                f"an action named {draft.name!r} already exists for connector "
                f"{current.connector.name!r}: names are unique in the catalog; "
                f"import with a prefix (--prefix {report.connector}_)",
            )
            continue
        # After the name: a definition checked against the catalog under a name that is
        # not its own (the policies in force read that name's plans) says nothing useful.
        problems = _follow_up_checked(draft)
        if problems:
            refuse_draft(report, draft, *(f"proposed definition {p}" for p in problems))
            continue
        proposed = ProposedAction(
            name=draft.name,
            operation=draft.op.label,
            kind=draft.kind,
            consequence_class=draft.consequence_class,
            warnings=draft.warnings,
            class_source=draft.class_source,
            class_lowered_from=draft.class_lowered_from,
            status_operation=draft.status_operation,
            definition=draft.definition,
            pointer=draft.op.pointer,
        )
        report.proposed.append(proposed)
        draft.outcome = "accepted"
        if current is not None and (current.enabled or current.class_confirmed):
            draft.outcome = "kept"
            try:
                same = digest(normalize(draft.definition)) == current.digest
            except CanonicalJSONError:
                same = False
            if same:
                proposed.stored = "unchanged"
            else:
                proposed.warnings.append(
                    problem_at(
                        draft.op.pointer,
                        "not stored: an admin has reviewed this action; apply changes from "
                        "the document by hand",
                    )
                )
            continue
        accepted.append((draft, proposed))
    return accepted


def _follow_up_checked(draft: Draft) -> list[CatalogProblem]:
    """The catalog's problems with a draft. Its check_with names a read proposed with it
    (checked against that proposal), or one an admin keeps in the catalog; when that read
    is not proposed after all, or does not take the input, the check is dropped and said."""
    read = draft.check_read
    targets: dict[str, dict[str, Any]] = {}
    if read is not None and "check_with" in draft.definition:
        if read.outcome == "accepted":
            targets = {read.name: read.definition}
        elif read.outcome != "kept":
            _drop_check_with(draft, f"the read {read.name} is not proposed")
    problems = validate_action_definition(draft.name, draft.definition, follow_up_targets=targets)
    wrong = [p for p in problems if p.pointer.startswith("/check_with")]
    if wrong:
        _drop_check_with(draft, "; ".join(f"{p.pointer}: {p.message}" for p in wrong))
        problems = validate_action_definition(draft.name, draft.definition)
    return problems


def _drop_check_with(draft: Draft, why: str) -> None:
    definition = draft.definition
    check = definition.pop("check_with", None) or {}
    result = definition.get("result") or {}
    for name in draft.link_fields:
        result.pop(name, None)
    if not result:
        definition.pop("result", None)
    if draft.card_result_drafted:
        definition["card"]["result"] = result_sentence(result) if result else ""
    draft.check_read, draft.link_fields = None, ()
    draft.warn(draft.op.pointer, f"check_with {check.get('action', '')} not wired: {why}")


def store(accepted: list[tuple[Draft, ProposedAction]], *, actor: str) -> None:
    for draft, proposed in accepted:
        _, change = action_define(
            name=draft.name,
            definition=draft.definition,
            actor=actor,
            source=Action.Source.OPENAPI,
            # The document's author may declare a class, but only a person here confirms it.
            class_confirmed=False,
            lint=draft.warnings,
        )
        proposed.stored = change


def refuse_draft(report: ImportReport, draft: Draft, *messages: str) -> None:
    report.refused.append(
        RefusedOperation(
            draft.op.label, draft.name, [problem_at(draft.op.pointer, m) for m in messages]
        )
    )


def record_import(report: ImportReport, *, actor: str) -> None:
    """The audit record of an import that stored something (or created the connector)."""
    stored_names = {p.name for p in report.proposed if p.stored in ("created", "updated")}
    if stored_names or report.connector_created:
        audit_record(
            kind="openapi.imported",
            actor=actor,
            data={
                "source": report.source_name,
                "connector": report.connector,
                "connector_created": report.connector_created,
                "stored": sorted(stored_names),
                "refused": sorted(r.operation for r in report.refused),
            },
        )
