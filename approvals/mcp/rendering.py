"""What an MCP client shows: a plan, a refusal and an action card as markdown a model
and a person read, with the plan and the problem as structured content (the JSON API's
documents, exactly)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import mcp.types as types
from django.conf import settings
from django.utils import formats, timezone, translation
from django.utils.dateparse import parse_datetime
from ninja.responses import NinjaJSONEncoder

from actions.lib.exceptions import CountersignError
from actions.lib.problems import problem_body_from
from actions.models import Action
from actions.spec import VERIFIABLE_KINDS, markdown_block, markdown_code

from ..api.schemas import PlanOut
from ..api.shapes import action_out, plan_out
from ..models import Plan, PlanStatus

CARD_URI = "countersign://actions/{name}/card"
PLAN_URI = "countersign://plans/{plan_id}"
CLASS_MEANING = {
    "observation": "it reads data; nothing changes upstream",
    "reversible": "a change that can be undone",
    "external": "an external commitment (a message sent, an invoice issued); it cannot be recalled",
    "irreversible": "a change that cannot be undone, or a broad one",
}


def status_meaning(plan: Plan, doc: dict[str, Any] | None = None) -> str:
    """What the plan's status means, worded for its kind: a change is applied (and, once
    completed, says whether reading the target back confirmed it), a read is done."""
    status = doc["status"] if doc is not None else plan.status
    if status not in PlanStatus.values:
        return status
    meaning = PlanStatus(status).meaning_for(plan.kind)
    outcome = (doc or {}).get("outcome") or {}
    if plan.kind != "read" and status == PlanStatus.COMPLETED and outcome:
        meaning += (
            "; reading the target back confirmed the change"
            if outcome.get("verified")
            else "; not read back (the upstream's yes is taken at its word)"
        )
    return meaning


def _json(value: Any) -> Any:
    """The plan exactly as the JSON API renders it (same encoder, same precision)."""
    return json.loads(json.dumps(value, cls=NinjaJSONEncoder))


def plan_document(plan: Plan) -> dict[str, Any]:
    return _json(PlanOut.model_validate(plan_out(plan)).model_dump())


def local_datetime(value: datetime | str | None) -> str:
    """A moment in the configured language and time zone (LANGUAGE_CODE, TIME_ZONE)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is None:
        return "—"
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    with translation.override(settings.LANGUAGE_CODE):
        text = formats.date_format(value, "DATETIME_FORMAT", use_l10n=True)
    zone = value.tzname() if timezone.is_aware(value) else None
    return f"{text} ({zone})" if zone else text


def error_result(
    exc: CountersignError, *, consequence: str, correlation_id: str | None = None
) -> types.CallToolResult:
    """A refused call as the model and a person see it, with the problem as data."""
    problem = problem_body_from(exc, correlation_id=correlation_id)
    slug = problem["type"].rsplit(":", 1)[-1]
    lines = [f"**Refused: {problem['title']}** ({markdown_code(slug)}, {problem['status']})"]
    if problem["detail"] != problem["title"]:
        lines += ["", problem["detail"]]
    errors = problem.get("errors") or []
    if errors:
        lines.append("")
        lines += [f"- {markdown_code(e['pointer'] or '/')}: {e['message']}" for e in errors]
    lines += ["", f"{consequence} Correlation id: {markdown_code(problem['correlation_id'])}."]
    return types.CallToolResult(
        content=[types.TextContent(text="\n".join(lines))],
        structured_content=problem,
        is_error=True,
    )


def _input_lines(action: Action, values: dict[str, Any]) -> list[str]:
    """The exact input, field by field: dates also in the configured locale, free text
    (a message, a memo) in a code block so it reads as it will be sent."""
    properties = (action.spec.input_schema or {}).get("properties", {})
    lines: list[str] = []
    for name, value in values.items():
        schema = properties.get(name) or {}
        label = markdown_code(name)
        if isinstance(value, str) and schema.get("format") == "date-time":
            moment = parse_datetime(value)
            shown = markdown_code(value)
            if moment is not None:
                shown += f" — {local_datetime(moment)}"
            lines.append(f"- {label}: {shown}")
        elif isinstance(value, str) and _is_free_text(schema, value):
            lines += [f"- {label}:", "", _indent(markdown_block(value)), ""]
        else:
            lines.append(f"- {label}: {markdown_code(value)}")
    return lines


def _is_free_text(schema: dict[str, Any], value: str) -> bool:
    if "\n" in value:
        return True
    constrained = any(key in schema for key in ("pattern", "format", "enum", "const"))
    return not constrained and schema.get("maxLength", 10_000) > 200


def _approvals(count: int) -> str:
    return "1 approval" if count == 1 else f"{count} approvals from different people"


def people(count: int) -> str:
    return "a person" if count == 1 else f"{count} different people"


def people_approve(count: int) -> str:
    """Who must approve, with the verb: a person approves, 2 different people approve."""
    return f"{people(count)} {'approves' if count == 1 else 'approve'}"


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" if line else "" for line in text.split("\n"))


def plan_markdown(plan: Plan, doc: dict[str, Any], *, proposed: bool) -> str:
    """The plan as a person checks it in seconds: what changes, the exact input, who
    must approve, and where."""
    status = doc["status"]
    is_read = plan.kind == "read"
    if proposed and is_read and status != PlanStatus.AWAITING_APPROVAL:
        head = (
            "**Read proposed and approved** — a worker reads the target once with the read "
            "credential; you receive only the declared fields. Follow it with get_plan; "
            f"status {markdown_code(status)}."
        )
    elif proposed and is_read:
        private = " (the data is private)" if plan.action.spec.sensitive else ""
        head = (
            f"**Read proposed — a person must approve it**{private}. You will receive "
            f"only the declared fields; status {markdown_code(status)}."
        )
    elif proposed and doc.get("approved_by") == "session_grant":
        head = (
            "**Proposed and approved by a session grant — nothing has been written yet.** "
            "A reviewer's grant for this agent covers this exact plan; a worker applies it "
            f"once; status {markdown_code(status)}."
        )
    elif proposed and doc.get("approved_by") == "policy":
        names = ", ".join(markdown_code(p) for p in doc["decided_by"]["policies"])
        head = (
            "**Proposed and approved by policy — nothing has been written yet.** "
            f"The catalog's policy {names} lets this exact plan run with no person; a "
            f"worker checks the policies again and applies it once; status "
            f"{markdown_code(status)}."
        )
    elif proposed:
        head = (
            "**Proposed — nothing has been written.** "
            f"A person must approve this exact plan; status {markdown_code(status)}."
        )
    else:
        head = f"**Plan {markdown_code(status)}** — {status_meaning(plan, doc)}."
    lines = [head, "", doc["preview"]["summary_markdown"], "", "**Input**", ""]
    lines += _input_lines(plan.action, doc["input"])
    approvals = doc["approvals_required"]
    rows = [
        ("Plan", markdown_code(doc["id"])),
        ("Short code", markdown_code(doc["short_code"])),
        ("Action", markdown_code(doc["action"])),
        ("Consequence", f"{doc['consequence_class']}, {_approvals(approvals)} needed"),
        ("Proposed", local_datetime(doc["created_at"])),
        ("Expires", local_datetime(doc["expires_at"])),
        ("Review", f"<{doc['review_url']}>"),
    ]
    requirement = doc.get("requirement")
    if requirement:
        rows.insert(4, ("Who decides", _requirement_cell(requirement)))
    decided_by = doc.get("decided_by")
    if decided_by:
        rows.insert(4, ("Decided by", _decided_by_cell(decided_by)))
    held = (doc.get("policy") or {}).get("held")
    if held:
        rows.insert(4, ("Policies", held_text(held, code=markdown_code)))
    lines += ["", "| | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows]
    outcome = doc.get("outcome")
    if outcome:
        sent = {True: "yes", False: "no", None: "unknown"}[outcome.get("request_sent")]
        lines += [
            "",
            f"**Outcome** {markdown_code(outcome['state'])}: {outcome['detail'] or '—'}",
            "",
            f"- Request sent upstream: {sent}",
            f"- Upstream status: {markdown_code(outcome['upstream_status'] or '—')}",
            f"- Finished: {local_datetime(outcome.get('finished_at'))}",
            f"- Correlation id: {markdown_code(outcome['correlation_id'])}",
        ]
        if not is_read and outcome["state"] in (PlanStatus.COMPLETED, PlanStatus.NOT_APPLIED):
            checked = "yes" if outcome.get("verified") else "no"
            lines.append(f"- Effect verified by reading the target back: {checked}")
        if outcome.get("result"):
            lines += ["", "**Result**", ""]
            lines += [
                f"- {markdown_code(name)}: {markdown_code(value) if value is not None else '—'}"
                for name, value in outcome["result"].items()
            ]
        check = outcome.get("check_with")
        if check:
            lines += [
                "",
                f"To check on it, propose {markdown_code(check['action'])} with "
                f"{markdown_code(check['input'])}.",
            ]
    if doc.get("superseded_by"):
        lines += [
            "",
            "A reviewer made a newer revision of this plan: follow "
            f"{markdown_code(doc['superseded_by'])}.",
        ]
    if doc["reason"]:
        lines += ["", "Reason given by the agent (unverified):", "", markdown_block(doc["reason"])]
    return "\n".join(lines)


def plan_result(plan: Plan, *, proposed: bool, note: str | None = None) -> types.CallToolResult:
    """The plan as a tool result: markdown (after ``note``, when there is one), links to
    the plan's resource (subscribe to it to hear of changes) and the action's card, and
    the plan document as structured content."""
    doc = plan_document(plan)
    text = plan_markdown(plan, doc, proposed=proposed)
    return types.CallToolResult(
        content=[
            types.TextContent(text=f"{note}\n\n{text}" if note else text),
            types.ResourceLink(
                uri=PLAN_URI.format(plan_id=plan.id),
                name=f"plan {plan.short_code}",
                title=f"Plan {plan.short_code}",
                mime_type="application/json",
            ),
            types.ResourceLink(
                uri=CARD_URI.format(name=plan.action.name),
                name=f"{plan.action.name} card",
                title=plan.action.title,
                mime_type="text/markdown",
            ),
        ],
        structured_content=doc,
    )


def card_markdown(action: Action) -> str:
    out = action_out(action)
    card = out["card"]
    approvals = out["approval"]["approvers_required"]
    klass = out["consequence_class"]
    lines = [
        f"# {out['title']}",
        "",
        f"Tool {markdown_code(out['name'])} · consequence class **{klass}** "
        f"({CLASS_MEANING.get(klass, klass)}) · {out['kind']} · "
        f"{_approvals(approvals)} per call",
    ]
    if out["description"]:
        lines += ["", out["description"]]
    for key in ("effect", "scope", "result", "consent", "retry"):
        lines += ["", f"**{key.capitalize()}.** {card[key]}"]
    if out["kind"] in VERIFIABLE_KINDS:
        checked = (
            "After the upstream says yes, the worker reads the target back and compares it "
            "with the plan (outcome.verified)."
            if out["verify"]
            else "Not read back: the upstream's yes is taken at its word (verified: false)."
        )
        lines += ["", f"**Checked.** {checked}"]
    lines += [
        "",
        "Calling the tool only proposes: a person approves the exact plan before anything "
        "is written upstream.",
        "",
        "**Input schema**",
        "",
        markdown_block(json.dumps(out["input_schema"], indent=2, sort_keys=True)),
    ]
    return "\n".join(lines)


def _decided_by_cell(decided_by: dict[str, Any]) -> str:
    """``policy routine-email (set 3f2a…, version 4)``, ``a person``, ``a session grant``."""
    if decided_by["by"] == "policy":
        names = ", ".join(markdown_code(p) for p in decided_by.get("policies") or [])
        return (
            f"policy {names} (set {markdown_code(str(decided_by.get('set'))[:12])}, "
            f"version {decided_by.get('version')})"
        )
    return {"person": "a person", "grant": "a session grant"}.get(decided_by["by"], "—")


def _requirement_cell(requirement: dict[str, Any]) -> str:
    """``1 of billing-approvers: 0 of 1 · rules invoices`` (groups and counts only)."""

    def threshold(t: dict[str, Any]) -> str:
        text = f"{markdown_code(t['group'])}: {t['approved']} of {t['count']}"
        if t.get("after"):
            text += " (escalated)" if t.get("escalated") else f" (after {t['after']} s)"
        return text

    rules = ", ".join(markdown_code(r) for r in requirement["rules"])
    met_by = requirement.get("met_by")
    if met_by:
        names = ", ".join(markdown_code(p) for p in met_by.get("policies") or [])
        return f"met by policy {names}: rules {rules} let policies decide"
    clauses = [" or ".join(threshold(t) for t in c["any_of"]) for c in requirement["all_of"]]
    met = "met" if requirement["met"] else "not met yet"
    return f"{'; '.join(clauses)} ({met}; rules {rules})"


HELD_WORDS = {
    "irreversible": "an irreversible plan always has a person",
    "evaluation_error": "a policy failed to evaluate, so no policy approves it",
    "signed_action": "the action needs passkey-signed approvals",
    "no_preview": "the action has no preview, so a person reads the exact call",
    "revision": "a reviewer's revision goes to a person",
}


def held_text(held: dict[str, Any], *, code=str) -> str:
    """Why no policy approved a plan an @approve held for: ``policy routine-email would
    approve this; the rule invoices keeps it for billing-approvers`` (the API's English;
    the page says it in the reader's language)."""
    names = ", ".join(code(p) for p in held.get("policies") or [])
    why = []
    for reason in held.get("reasons") or []:
        if reason == "rule_owned":
            why += [
                f"the rule {code(r['rule'])} keeps it for "
                + ", ".join(code(g) for g in r.get("groups") or [])
                for r in held.get("rules") or []
            ]
        elif reason in HELD_WORDS:
            why.append(HELD_WORDS[reason])
    return f"policy {names} would approve this; " + "; ".join(why or ["a person decides"])
