"""Policy test cases (``manage.py policy_test CASES.yaml``): a plan's input and the target
as read, and the outcome a policy set must give it.

::

    cases:
      - name: a same-domain change on a plain contact needs no one
        action: update_contact_email
        input: {contact_id: c-1002, email: g.hopper@example.test}
        before: {id: c-1002, name: Grace Hopper, email: grace@example.test, …}
        expect: approve                 # refuse | approve | review
        policies: [routine-email]       # optional: exactly the policies that decided
        require: [billing-approvers]    # optional: the groups the policies added
        agent: {name: support-bot, registrar: rita, attributes: {workspace: ws-blue}}
        requester: {groups: [support-leads]}
        rate: {hour: 3, day: 20}
        at: "2026-01-05T10:30:00+00:00"

``after`` and the changes are computed from ``before`` and the input as the preview
computes them (actions/preview.py, ``planned_change``), so a case is what an agent
would send and what the upstream would answer, nothing more. Without ``at``, a case is
evaluated on Monday 5 January 2026 at noon in COUNTERSIGN_POLICY_TIMEZONE, so a test
gives the same answer on any day.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings

from ..lib.canonical import CanonicalJSONError, normalize
from ..preview import planned_change
from ..spec import ActionSpec, TemplateError
from .engine import APPROVE, REFUSE, REVIEW, PlanFacts, PolicyResult
from .reviewers import requirement_groups
from .schema import BEFORE_KINDS

KEYS = {
    "name",
    "action",
    "input",
    "before",
    "expect",
    "policies",
    "require",
    "agent",
    "requester",
    "rate",
    "at",
}
MAX_CASES = 1000


class CaseError(ValueError):
    def __init__(self, number: int | None, message: str) -> None:
        self.number = number
        self.message = message
        super().__init__(f"case {number}: {message}" if number else message)


@dataclass(frozen=True)
class PolicyCase:
    number: int
    name: str
    facts: PlanFacts
    expect: str
    policies: tuple[str, ...] | None = None
    require: tuple[str, ...] | None = None


def default_time() -> datetime:
    return datetime(2026, 1, 5, 12, 0, tzinfo=ZoneInfo(settings.COUNTERSIGN_POLICY_TIMEZONE))


def cases_read(document: Any, *, actions: Mapping[str, Mapping[str, Any]]) -> list[PolicyCase]:
    """The cases of a parsed cases file; CaseError naming the first malformed case."""
    if not isinstance(document, dict) or set(document) != {"cases"}:
        raise CaseError(None, "a cases file is a mapping with one key, cases: a list of cases")
    items = document["cases"]
    if not isinstance(items, list) or not items:
        raise CaseError(None, "cases: a non-empty list")
    if len(items) > MAX_CASES:
        raise CaseError(None, f"at most {MAX_CASES} cases in a file")
    return [_case(n, item, actions) for n, item in enumerate(items, start=1)]


def _strings(value: Any, what: str, number: int) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CaseError(number, f"{what}: a list of strings")
    return tuple(value)


def _case(number: int, item: Any, actions: Mapping[str, Mapping[str, Any]]) -> PolicyCase:
    if not isinstance(item, dict):
        raise CaseError(number, "a case is a mapping")
    unknown = sorted(set(item) - KEYS)
    if unknown:
        raise CaseError(number, f"unknown key {unknown[0]!r} (known: {', '.join(sorted(KEYS))})")
    for key in ("action", "input", "expect"):
        if key not in item:
            raise CaseError(number, f"{key} is required")
    name = item.get("name", f"case {number}")
    if not isinstance(name, str):
        raise CaseError(number, "name: a string")
    action = item["action"]
    if not isinstance(action, str) or action not in actions:
        raise CaseError(number, f"no action named {action!r}")
    definition = actions[action]
    try:
        spec = ActionSpec.from_definition(action, dict(definition))
    except (KeyError, TypeError, ValueError) as exc:  # pragma: no cover - loaded definitions
        raise CaseError(number, f"{action}: its definition cannot be read ({exc})") from None
    values = item["input"]
    if not isinstance(values, dict):
        raise CaseError(number, "input: a mapping of the action's input fields")
    # As a submission takes it (approvals/services/validation.py: plan_validate_input): in Unicode
    # normal form, checked, and a format field already in normal form as written.
    sent = values
    try:
        values = normalize(values)
    except CanonicalJSONError as exc:
        raise CaseError(
            number, f"input{exc.pointer}: {exc.message} (the action would refuse it)"
        ) from None
    errors = list(spec.input_validator().iter_errors(values))
    if not errors and values != sent:
        errors = spec.format_errors_as_sent(sent)
    error = next(iter(sorted(errors, key=lambda e: list(e.path))), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise CaseError(
            number,
            f"input{'/' + where if where else ''}: {error.message} (the action would refuse it)",
        )
    if spec.kind in BEFORE_KINDS:
        if "before" not in item:
            raise CaseError(
                number, f"before: {_a(spec.kind)} reads its target: give the target as read"
            )
        before = item["before"]
    else:
        if "before" in item:
            raise CaseError(number, f"before: {_a(spec.kind)} reads nothing before the change")
        before = None
    expect = item["expect"]
    if expect not in (REFUSE, APPROVE, REVIEW):
        raise CaseError(number, f"expect: one of {REFUSE}, {APPROVE}, {REVIEW}")
    policies = _strings(item["policies"], "policies", number) if "policies" in item else None
    require = _strings(item["require"], "require", number) if "require" in item else None
    agent = item.get("agent") or {}
    if not isinstance(agent, dict) or set(agent) - {"name", "registrar", "attributes"}:
        raise CaseError(number, "agent: a mapping of name, registrar and attributes")
    for key in ("name", "registrar"):
        if key in agent and not isinstance(agent[key], str):
            raise CaseError(number, f"agent.{key}: a string")
    attributes = agent.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise CaseError(number, "agent.attributes: a mapping")
    requester = item.get("requester")
    if requester is not None:
        if not isinstance(requester, dict) or set(requester) - {"iss", "sub", "groups"}:
            raise CaseError(number, "requester: a mapping of iss, sub and groups")
        groups = _strings(requester.get("groups", []), "requester.groups", number)
        requester = {
            "iss": str(requester.get("iss", "https://idp.example.test")),
            "sub": str(requester.get("sub", "someone")),
            "groups": list(groups),
        }
    rate = item.get("rate") or {}
    if not isinstance(rate, dict) or set(rate) - {"hour", "day"}:
        raise CaseError(number, "rate: a mapping of hour and day")
    for key in ("hour", "day"):
        value = rate.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CaseError(number, f"rate.{key}: a count of plans (0 or more)")
    at = item.get("at")
    if at is None:
        now = default_time()
    elif isinstance(at, datetime):
        now = at if at.tzinfo else at.replace(tzinfo=UTC)
    elif isinstance(at, str):
        try:
            now = datetime.fromisoformat(at)
        except ValueError:
            raise CaseError(
                number, "at: a date and time, such as 2026-01-05T10:30:00+00:00"
            ) from None
        if now.tzinfo is None:
            raise CaseError(number, "at: give the offset too (+00:00, Z)")
    else:
        raise CaseError(number, "at: a date and time, such as 2026-01-05T10:30:00+00:00")
    try:
        after, changes = planned_change(spec, values, before)
        path = spec.render_path(spec.target, values)
    except (TemplateError, TypeError, ValueError) as exc:
        raise CaseError(number, f"the change cannot be computed: {exc}") from None
    facts = PlanFacts(
        action=action,
        agent=agent.get("name", "test-agent"),
        registrar=agent.get("registrar", ""),
        agent_attributes=attributes,
        requester=requester,
        target={"connector": definition["connector"], "path": path},
        input=values,
        before=before,
        after=after,
        changes=changes,
        rate_hour=rate.get("hour", 0),
        rate_day=rate.get("day", 0),
        now=now,
    )
    return PolicyCase(
        number=number, name=name, facts=facts, expect=expect, policies=policies, require=require
    )


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def case_mismatches(case: PolicyCase, result: PolicyResult) -> list[str]:
    """What in ``result`` is not what ``case`` expects (empty: the case passes)."""
    out = []
    if result.outcome != case.expect:
        out.append(f"expected {case.expect}, got {result.outcome}")
    if case.policies is not None and sorted(result.policies) != sorted(case.policies):
        got = ", ".join(result.policies) or "none"
        out.append(f"expected policies {', '.join(case.policies) or 'none'}, got {got}")
    if case.require is not None:
        groups = sorted(requirement_groups(dict(result.requirement)))
        if groups != sorted(case.require):
            out.append(
                f"expected to require {', '.join(case.require) or 'no group'}, "
                f"got {', '.join(groups) or 'no group'}"
            )
    return out
