"""Policy text: Cedar statements with their lines, their annotations, and the checks a
set passes before it is put in force.

A policy set is Cedar text in two parts, ``enforce`` and ``shadow``. Each policy says
what it does through annotations (a Cedar annotation holds one string):

* ``@id("routine-email")`` — required, a lowercase slug, once in each part;
* ``forbid`` — refuses the plans it matches; ``@reason("...")`` is what the agent reads;
* ``permit`` with ``@approve`` — approves with no person (never an irreversible plan);
* ``permit`` with ``@require("billing-approvers")``, ``@require("2 of security")`` or
  ``@require("1 of finance-leads or 2 of billing-approvers and 1 of security")`` —
  adds to the plan's requirement: ``and`` separates clauses, ``or`` the thresholds one
  clause offers, as in the decision rules (reviewers.py);
* ``@shadow`` — in the enforce part, the policy is evaluated in shadow only;
* ``@description("...")`` — for people.

Any other annotation is refused: a misspelt ``@shadow`` would otherwise put a draft in
force. Cedar numbers the policies of a text ``policy0``, ``policy1``… in order; the
statements found here are numbered the same way, so every error Cedar reports is given
back with the line it starts on (or, for a syntax error, the line Cedar stopped at).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cedarpy

from ..lib.canonical import digest
from .schema import ActionTypes, cedar_schema
from .statements import (
    Probe,
    Statement,
    annotation_line,
    group_line,
    grouped,
    line_of_word,
    split_statements,
    syntax_line,
    syntax_message,
    type_error_places,
)

ENFORCE = "enforce"
SHADOW = "shadow"
PARTS = (ENFORCE, SHADOW)
ANNOTATIONS = frozenset({"id", "reason", "approve", "require", "shadow", "description"})
POLICY_ID = re.compile(r"[a-z][a-z0-9_-]{0,63}")
GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,149}")
MAX_COUNT = 20  # as a decision rule's threshold
MAX_THRESHOLDS = 8  # per clause, as a decision rule
MAX_TEXT_CHARS = 256 * 1024
MAX_POLICIES = 1000
MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class Policy:
    id: str
    effect: str  # "permit" | "forbid"
    part: str
    line: int  # where it starts, in its text
    origin: str = ""  # the file it came from, if any
    item: int | None = None  # which text of its part
    approve: bool = False
    require: tuple[Mapping[str, Any], ...] = ()  # clauses: {"any_of": [{group, count}]}
    reason: str = ""
    shadow: bool = False
    est: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def refusal(self) -> str:
        return self.reason or f"refused by policy {self.id}"


@dataclass(frozen=True)
class Problem:
    """What is wrong with a policy text: ``line`` is in the text it was given
    (``item``: which text of its part; ``origin``: the file it came from)."""

    part: str
    line: int | None
    message: str
    item: int | None = None
    origin: str = ""


def parse_require(value: Any) -> list[dict[str, Any]]:
    """``@require``'s text as requirement clauses; ValueError saying what is wrong.

    ``billing-approvers`` (one of them), ``2 of security``, ``1 of finance-leads or 2 of
    billing-approvers`` (one clause, either threshold), ``… and …`` (clauses, all of
    them). No parentheses: ``and`` separates clauses, ``or`` the thresholds of one."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            '@require names who must approve: @require("billing-approvers") or '
            '@require("2 of security")'
        )
    clauses = []
    for clause_text in re.split(r"\s+and\s+", value.strip()):
        thresholds: list[dict[str, Any]] = []
        for threshold_text in re.split(r"\s+or\s+", clause_text.strip()):
            match = re.fullmatch(r"(?:(\S+)\s+of\s+)?(\S+)", threshold_text.strip())
            if match is None:
                raise ValueError(f"cannot read {threshold_text!r}: write '2 of security'")
            count_text, group = match.groups()
            if count_text is not None and not count_text.isdigit():
                raise ValueError(f"{count_text!r} is not a count: write '2 of {group}'")
            count = int(count_text) if count_text is not None else 1
            if not 1 <= count <= MAX_COUNT:
                raise ValueError(f"a count is from 1 to {MAX_COUNT}, not {count}")
            if not GROUP_NAME.fullmatch(group):
                raise ValueError(f"{group!r} is not a group name")
            if any(t["group"] == group for t in thresholds):
                raise ValueError(f"{group!r} is named twice in one clause")
            thresholds.append({"group": group, "count": count})
        if len(thresholds) > MAX_THRESHOLDS:
            raise ValueError(f"at most {MAX_THRESHOLDS} alternatives in a clause")
        clauses.append({"any_of": sorted(thresholds, key=lambda t: (t["group"], t["count"]))})
    return clauses


def _policy_from(
    statement: Statement, part: str, origin: str, item: int | None
) -> tuple[Policy | None, list[tuple[str, str]]]:
    """The policy a statement holds, with what is wrong with its annotations, each with
    the annotation it is about ("" for the policy as a whole); (None, [(syntax error,
    "")]) when Cedar cannot parse it."""
    try:
        est = json.loads(cedarpy.policies_to_json_str(statement.text))
    except ValueError as exc:
        return None, [(str(exc), "")]
    policies = list((est.get("staticPolicies") or {}).values())
    if est.get("templates"):
        return None, [
            ("templates (?principal, ?resource) are not supported: name the policy's scope", "")
        ]
    if len(policies) != 1:  # pragma: no cover - one statement is one policy
        return None, [("expected one policy", "")]
    body = policies[0]
    annotations = body.get("annotations") or {}
    problems: list[tuple[str, str]] = []
    policy_id = annotations.get("id")
    if policy_id is None or not POLICY_ID.fullmatch(str(policy_id)):
        problems.append(
            (
                '@id("a-name") is required: a lowercase slug, naming the policy wherever it '
                "decides",
                "",
            )
            if policy_id is None
            else (
                f"@id({json.dumps(policy_id)}) is not a lowercase slug (letters, digits, - and _)",
                "id",
            )
        )
    known = ", ".join(f"@{a}" for a in sorted(ANNOTATIONS))
    # One problem each, so that each points at the line the annotation is on.
    for name in sorted(set(annotations) - ANNOTATIONS):
        problems.append((f"unknown annotation @{name} (known: {known})", name))
    effect = body["effect"]
    clauses: list[dict[str, Any]] = []
    if effect == "permit":
        if ("approve" in annotations) == ("require" in annotations):
            problems.append(
                (
                    "a permit says what it allows: @approve (no person needed) or "
                    '@require("group") (who must approve), exactly one of them',
                    "approve" if "approve" in annotations else "",
                )
            )
        if "require" in annotations:
            try:
                clauses = parse_require(annotations["require"])
            except ValueError as exc:
                problems.append((f"@require: {exc}", "require"))
    else:
        for name in ("approve", "require"):
            if name in annotations:
                problems.append((f"a forbid refuses: @{name} is for permits", name))
    reason = annotations.get("reason")
    if reason is not None and len(str(reason)) > MAX_REASON_CHARS:
        problems.append((f"@reason is at most {MAX_REASON_CHARS} characters", "reason"))
    policy = Policy(
        id=str(policy_id or ""),
        effect=effect,
        part=part,
        line=statement.line,
        origin=origin,
        item=item,
        approve="approve" in annotations,
        require=tuple(clauses),
        reason=str(reason or ""),
        shadow="shadow" in annotations,
        est=body,
    )
    return policy, problems


@dataclass
class CheckedSet:
    """Policies read from some texts, with every problem found."""

    policies: list[Policy] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # Each policy's statement (by id()), for the checks of the whole set to find lines.
    statements: dict[int, Statement] = field(default_factory=dict, repr=False)


def check_texts(
    texts: Iterable[tuple[str, int | None, str, str]],
    *,
    types: Mapping[str, ActionTypes],
    groups_existing: set[str] | Callable[[set[str]], set[str]] | None = None,
    schema: cedarpy.Schema | None = None,
) -> CheckedSet:
    """Read and check policy texts: ``texts`` are (part, item, text, origin).

    Refused, each with its line: a syntax error; a missing, malformed or repeated
    ``@id``; an unknown annotation; a permit with neither or both of ``@approve`` and
    ``@require``, a forbid with either; a bad ``@require`` (unreadable, a count outside
    1–20, a group not in ``groups_existing``, a set or a function from the groups named
    to those that exist — None: groups are not checked); and whatever Cedar's validator
    finds against the catalog's schema (a field no action has, a string compared with a
    number, an unknown action)."""
    checked = CheckedSet()
    if schema is None:
        schema = cedarpy.Schema.from_json_str(json.dumps(cedar_schema(types)))
    probe = Probe(schema)
    for part, item, text, origin in texts:

        def problem(line: int | None, message: str, part=part, item=item, origin=origin) -> None:
            checked.problems.append(Problem(part, line, message, item, origin))

        if len(text) > MAX_TEXT_CHARS:
            problem(None, f"longer than {MAX_TEXT_CHARS // 1024} KiB")
            continue
        statements = split_statements(text)
        syntax_ok = True
        found_here: dict[int, Policy] = {}
        for statement in statements:
            policy, problems = _policy_from(statement, part, origin, item)
            if policy is None:
                syntax_ok = False
                message = problems[0][0]
                line = (
                    syntax_line(statement, message)
                    if not message.startswith("templates")
                    else statement.line
                )
                text_line = (text.split("\n")[line - 1] if line else "") or ""
                if message.startswith("templates"):
                    problem(line, message)
                elif re.search(r"@\w+\s*\([^)]*,", text_line):
                    problem(
                        line,
                        syntax_message(message)
                        + ' (an annotation holds one string: @require("2 of security"))',
                    )
                else:
                    problem(line, syntax_message(message))
                continue
            named = f"policy {policy.id}: " if POLICY_ID.fullmatch(policy.id) else ""
            for message, annotation in problems:
                problem(annotation_line(statement, annotation), named + message)
            checked.policies.append(policy)
            checked.statements[id(policy)] = statement
            found_here[statement.index] = policy
        if not syntax_ok or not statements:
            continue
        result = cedarpy.validate_policies(text, schema)
        seen: set[tuple[int, str]] = set()
        by_policy: dict[int, list[str]] = {}
        for error in result.errors:
            found = re.fullmatch(r"policy(\d+)", error.policy_id or "")
            index = int(found.group(1)) if found else -1
            by_policy.setdefault(index, []).append(error.error)
        for index, raw_messages in sorted(by_policy.items()):
            messages = grouped(raw_messages, types)
            statement = statements[index] if 0 <= index < len(statements) else None
            policy_id = found_here[index].id if index in found_here else ""
            named = f"policy {policy_id}: " if POLICY_ID.fullmatch(policy_id) else ""
            for message, word in messages:
                places: list[tuple[int | None, str]] = []
                if not word and statement is not None and index in found_here:
                    # No word to look for (a type error): find the expression itself.
                    places += type_error_places(statement, found_here[index].est, message, probe)
                if not places:
                    line = line_of_word(statement, word) if statement is not None else None
                    places = [(line, message)]
                for line, text_said in places:
                    if (line or 0, text_said) in seen:
                        continue
                    seen.add((line or 0, text_said))
                    problem(line, named + text_said)
    _check_groups(checked, groups_existing)
    _check_ids(checked)
    if len(checked.policies) > MAX_POLICIES:
        checked.problems.append(
            Problem(ENFORCE, None, f"more than {MAX_POLICIES} policies in one set")
        )
    return checked


def _check_groups(checked: CheckedSet, groups_existing) -> None:
    if groups_existing is None:
        return
    wanted = {t["group"] for p in checked.policies for c in p.require for t in c["any_of"]}
    if not wanted:
        return
    known = groups_existing(wanted) if callable(groups_existing) else groups_existing
    for policy in checked.policies:
        statement = checked.statements.get(id(policy))
        for group in sorted({t["group"] for c in policy.require for t in c["any_of"]} - known):
            checked.problems.append(
                Problem(
                    policy.part,
                    group_line(statement, group) if statement else policy.line,
                    f"policy {policy.id}: @require: unknown group {group!r} (create it, or "
                    "declare it in policies.groups or reviewers.groups)",
                    policy.item,
                    policy.origin,
                )
            )


def _check_ids(checked: CheckedSet) -> None:
    """An id is used once in the set each evaluation sees: the enforce part, and the
    shadow part with the enforce part's ``@shadow`` policies."""
    for name, members in (
        (ENFORCE, [p for p in checked.policies if p.part == ENFORCE]),
        (SHADOW, [p for p in checked.policies if p.part == SHADOW or p.shadow]),
    ):
        first: dict[str, Policy] = {}
        for policy in members:
            if not policy.id:
                continue
            if policy.id in first and first[policy.id] is not policy:
                earlier = first[policy.id]
                where = f"{earlier.origin + ', ' if earlier.origin else ''}line {earlier.line}"
                if earlier.part != policy.part:
                    where = f"the {earlier.part} part, {where}"
                checked.problems.append(
                    Problem(
                        policy.part,
                        policy.line,
                        f"policy {policy.id}: the id is used twice in the {name} set "
                        f"(first at {where})",
                        policy.item,
                        policy.origin,
                    )
                )
            else:
                first.setdefault(policy.id, policy)


# --- a part's text -------------------------------------------------------------------------


def part_text(texts: Iterable[str]) -> str:
    """The texts of one part as the one text kept and evaluated: each without trailing
    spaces or leading and trailing blank lines, one blank line between them. Lines keep
    their order and their content, so the text reads as the files did."""
    chunks = []
    for text in texts:
        lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while lines and not lines[0]:
            lines.pop(0)
        while lines and not lines[-1]:
            lines.pop()
        if lines:
            chunks.append("\n".join(lines) + "\n")
    return "\n".join(chunks)


def set_hash(enforce: str, shadow: str) -> str:
    """SHA-256 of the set's canonical JSON: the text of each part, exactly as kept. Any
    change to the text in force (a comment too: it is what people read) is a new hash."""
    return digest({"enforce": enforce, "shadow": shadow})


def policy_ids(text: str) -> list[str]:
    """The ``@id`` of each policy of a valid text, in order."""
    if not text.strip():
        return []
    est = json.loads(cedarpy.policies_to_json_str(text))
    return [
        str((body.get("annotations") or {}).get("id") or "")
        for _, body in sorted(
            (est.get("staticPolicies") or {}).items(), key=lambda item: int(item[0][6:])
        )
    ]


def required_groups(text: str) -> set[str]:
    """The groups the ``@require`` annotations of a valid text name."""
    if not text.strip():
        return set()
    est = json.loads(cedarpy.policies_to_json_str(text))
    groups: set[str] = set()
    for body in (est.get("staticPolicies") or {}).values():
        value = (body.get("annotations") or {}).get("require")
        if value is not None:
            groups |= {t["group"] for c in parse_require(value) for t in c["any_of"]}
    return groups
