"""What a plan brings to the policies, and the one Cedar request it becomes: the facts of a
plan (engine.py's docstring lists what a policy sees), the values derived from them by a
strict parse, and a failure for each that does not fit, which is never a yes."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings

from ..lib.canonical import canonical_bytes, resolve_pointer
from ..lib.formats import FormatProblem, email_parse
from ..textdiff import is_text_document, policy_text
from .schema import (
    AGENT,
    GROUP,
    PERSON,
    TARGET,
    ActionTypes,
    DecimalType,
    Misfit,
    Record,
    decimal_text,
    lower_value,
)

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


# --- what a plan brings -------------------------------------------------------------------


@dataclass(frozen=True)
class PlanFacts:
    """Everything a policy may look at, for one plan: what the integration has at
    submission (and the worker at its claim, the backtest from history)."""

    action: str
    agent: str
    target: Mapping[str, Any]  # {"connector", "path", ...}
    input: Mapping[str, Any]
    now: datetime
    before: Any = None
    after: Any = None
    changes: Sequence[Mapping[str, Any]] = ()
    registrar: str = ""
    agent_attributes: Mapping[str, Any] = field(default_factory=dict)
    # The person the plan is for (Plan.requester: iss, sub, groups), or None.
    requester: Mapping[str, Any] | None = None
    rate_hour: int = 0
    rate_day: int = 0


@dataclass(frozen=True)
class PolicyFailure:
    """A policy that failed to evaluate (``policy`` is "" when the plan itself could
    not be put to the policies)."""

    policy: str
    message: str


# --- the request ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_bytes(value).decode("utf-8")


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise Misfit(f"/rate/{name}", "a count of plans is a non-negative integer")
    return value


def _at(document: Any, pointer: str) -> Any:
    try:
        return resolve_pointer(document, pointer)
    except KeyError:
        return None


_UNPARSED = object()


def _domain(value: Any) -> Any:
    """The domain of an e-mail value as policies compare it: from the strict parse of
    exactly that value (actions/lib/formats.py), the domain as written with only A-Z
    lower-cased (a Unicode lower-casing would turn a Kelvin sign into a k). None when
    there is no value; _UNPARSED when the value does not parse strictly."""
    if value is None:
        return None
    if not isinstance(value, str):
        return _UNPARSED
    try:
        return email_parse(value).domain_key
    except FormatProblem:
        return _UNPARSED


def _number(cedar: Any, value: Any) -> Decimal | None:
    if value is None:
        return None
    if isinstance(cedar, DecimalType):
        return cedar.number(value, "")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def plan_request(facts: PlanFacts, types: ActionTypes) -> tuple[dict[str, Any], list[dict]]:
    """The Cedar request and entities for one plan. Misfit when a value does not fit."""
    request, entities, _ = plan_request_checked(facts, types)
    return request, entities


def plan_request_checked(
    facts: PlanFacts, types: ActionTypes
) -> tuple[dict[str, Any], list[dict], list[PolicyFailure]]:
    """The Cedar request and entities for one plan, and a failure for each derived value
    that could not be given because its source does not parse strictly (the attribute is
    left out, and the failure keeps any policy from approving the plan). Misfit when a
    value does not fit its type."""
    failures: list[PolicyFailure] = []
    document = types.document or Record()
    context: dict[str, Any] = {"input": types.input.value(dict(facts.input), "/input")}
    # A text document (a file's content) has no fields: its before and after are empty
    # records, and what changed in it is context.text.
    text = (types.has_before or types.has_after) and is_text_document(facts.before, facts.after)
    if text and types.document is not None:
        raise Misfit("/before", "the target is a text, not the document the action declares")
    if types.has_before:
        context["before"] = document.value({} if text else facts.before, "/before")
    if types.has_after:
        context["after"] = document.value({} if text else facts.after, "/after")
    context["text"] = policy_text(facts.before, facts.after) if text else policy_text(None, None)
    # The text fields lower-cased, from the converted values: exactly what is written.
    lower: dict[str, Any] = {"input": lower_value(types.lower_input, context["input"])}
    for part in ("before", "after"):
        if part in context:
            lower[part] = lower_value(types.lower_document, context[part])
    context["lower"] = lower
    changed = set()
    for change in facts.changes:
        path = change.get("path") if isinstance(change, Mapping) else None
        if isinstance(path, str):
            changed.add(path)
    context["changed"] = sorted(changed)
    deltas: dict[str, Any] = {}
    if types.has_before and types.has_after:
        for pointer, cedar in types.numbers:
            old = _number(cedar, _at(facts.before, pointer))
            new = _number(cedar, _at(facts.after, pointer))
            if old is not None and new is not None and old != new:
                deltas[pointer] = {
                    "__extn": {"fn": "decimal", "arg": decimal_text(new - old, f"/deltas{pointer}")}
                }
    context["deltas"] = deltas
    domains: dict[str, Any] = {}
    for pointer in types.emails:
        entry = {}
        for part, present, source in (
            ("before", types.has_before, facts.before),
            ("after", types.has_after, facts.after),
        ):
            if not present:
                continue
            domain = _domain(_at(source, pointer))
            if domain is _UNPARSED:
                # Said by pointer only: the log line of a failure carries no plan value.
                failures.append(
                    PolicyFailure(
                        "",
                        f"/{part}{pointer} is not an e-mail address that parses strictly, "
                        "so the policies get no domain for it",
                    )
                )
            elif domain is not None:
                entry[part] = domain
        domains[pointer] = entry
    context["email_domains"] = domains
    context["rate"] = {
        "hour": _count(facts.rate_hour, "hour"),
        "day": _count(facts.rate_day, "day"),
    }
    now = facts.now if facts.now.tzinfo else facts.now.replace(tzinfo=UTC)
    local = now.astimezone(_zone(settings.COUNTERSIGN_POLICY_TIMEZONE))
    context["time"] = {
        "hour": local.hour,
        "minute": local.minute,
        "weekday": WEEKDAYS[local.weekday()],
    }

    agent_uid = {"type": AGENT, "id": str(facts.agent)}
    agent_attrs: dict[str, Any] = {
        "name": str(facts.agent),
        "registrar": str(facts.registrar or ""),
    }
    entities: list[dict[str, Any]] = []
    requester = facts.requester
    if requester:
        person_uid = {
            "type": PERSON,
            "id": f"{_text(requester.get('iss', ''))} {_text(requester.get('sub', ''))}",
        }
        groups = requester.get("groups") or []
        entities.append(
            {
                "uid": person_uid,
                "attrs": {
                    "iss": _text(requester.get("iss", "")),
                    "sub": _text(requester.get("sub", "")),
                },
                "parents": [
                    {"type": GROUP, "id": g}
                    for g in sorted({g for g in groups if isinstance(g, str)})
                ],
            }
        )
        agent_attrs["on_behalf_of"] = {"__entity": person_uid}
    entities.append(
        {
            "uid": agent_uid,
            "attrs": agent_attrs,
            "parents": [],
            "tags": {str(k): _text(v) for k, v in dict(facts.agent_attributes or {}).items()},
        }
    )
    connector = _text(facts.target.get("connector", ""))
    path = _text(facts.target.get("path", ""))
    target_uid = {"type": TARGET, "id": f"{connector} {path}"}
    entities.append(
        {"uid": target_uid, "attrs": {"connector": connector, "path": path}, "parents": []}
    )
    request = {
        "principal": agent_uid,
        "action": {"type": "Action", "id": types.name},
        "resource": target_uid,
        "context": context,
    }
    return request, entities, failures
