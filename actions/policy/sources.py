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
class Statement:
    """One policy's source: its text and the 1-based lines it spans in the whole text."""

    index: int
    text: str
    line: int
    end_line: int
    column: int = 1  # where its text starts on its first line


def split_statements(text: str) -> list[Statement]:
    """The statements of a Cedar text, split at each ``;`` outside strings and ``//``
    comments, as Cedar numbers them. Text after the last ``;`` (a policy missing its
    ``;``) is a statement of its own."""
    statements: list[Statement] = []
    start: int | None = None
    i, n = 0, len(text)
    in_string = False
    while i < n:
        char = text[i]
        if in_string:
            if char == "\\":
                i += 2
                continue
            if char == '"':
                in_string = False
        elif char == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif char == '"':
            in_string = True
            start = i if start is None else start
        elif char == ";":
            if start is None:
                start = i
            statements.append(_statement(text, len(statements), start, i + 1))
            start = None
        elif not char.isspace() and start is None:
            start = i
        i += 1
    if start is not None:
        statements.append(_statement(text, len(statements), start, n))
    return statements


def _statement(text: str, index: int, start: int, end: int) -> Statement:
    line = text.count("\n", 0, start) + 1
    body = text[start:end]
    column = start - (text.rfind("\n", 0, start) + 1) + 1
    return Statement(
        index=index, text=body, line=line, end_line=line + body.count("\n"), column=column
    )


# --- one policy --------------------------------------------------------------------------


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


# --- where a syntax error is --------------------------------------------------------------


def _parse_error(text: str) -> str | None:
    try:
        cedarpy.policies_to_json_str(text)
    except ValueError as exc:
        return str(exc)
    return None


def _syntax_line(statement: Statement, message: str) -> int:
    """The line of ``statement`` a syntax error is on. Cedar gives no position, so the
    statement is parsed line by line: the first prefix that fails as the whole does
    holds the faulty token. An unexpected end is at the statement's last line."""
    lines = statement.text.split("\n")
    if message.startswith("unexpected end of input"):
        return statement.end_line
    for count in range(1, min(len(lines), 300)):
        if _parse_error("\n".join(lines[:count])) == message:
            return statement.line + count - 1
    if message.startswith(("unexpected token", "invalid token")):
        return statement.end_line
    named = re.search(r"`([^`\s]+)`", message)
    if named:
        for offset, line in enumerate(lines):
            if named.group(1) in line:
                return statement.line + offset
    return statement.line


def _syntax_message(message: str) -> str:
    text = f"syntax error: {message}"
    if message.startswith("unexpected token `@`"):
        text += " (does the policy before it end with `;`?)"
    elif message.startswith("unexpected end of input"):
        text += " (a policy ends with `;`)"
    return text


# --- validation against the catalog -------------------------------------------------------

_FOR_POLICY = re.compile(r"^for policy `(policy\d+)`, ")
_CONTEXT_ATTRIBUTE = re.compile(r'attribute `([^`]+)` in context for Action::"([^"]+)" not found')
_OPTIONAL_ATTRIBUTE = re.compile(r"access to optional attribute `([^`]+)`")
_TAG = re.compile(r"access to tag `([^`]+)` on entity type")
_UNKNOWN_ACTION = re.compile(r'unrecognized action `Action::"([^"]+)"`')
_NO_ACTION_APPLIES = "unable to find an applicable action given the policy scope constraints"
# What each context attribute read from the document holds, for a message.
_FROM_DOCUMENT = {
    "before": "no field of",
    "after": "no field of",
    "deltas": "not a number field (integer, number, decimal) of",
    "email_domains": "not an e-mail field (format: email) of",
}
_MISSING_PART = {
    ("before", "create"): "a create starts from nothing",
    ("after", "delete"): "a delete leaves nothing",
    ("before", "invoke"): "an invoke has no target document",
    ("after", "invoke"): "an invoke has no target document",
    ("before", "read"): "a read changes nothing",
    ("after", "read"): "a read changes nothing",
}


def _validation_message(message: str, types: Mapping[str, ActionTypes]) -> tuple[str, str]:
    """(a person's message, a word to look for in the policy to find its line)."""
    message = _FOR_POLICY.sub("", message)
    found = _CONTEXT_ATTRIBUTE.search(message)
    if found:
        path, action = found.groups()
        first = re.split(r"[.\[]", path, maxsplit=1)[0]
        word = re.split(r"[.\[\]\"]+", path.rstrip('"]'))[-1]
        action_types = types.get(action)
        if first in ("before", "after") and action_types is not None:
            missing = _MISSING_PART.get((first, action_types.kind))
            if missing is not None:
                return f"{action} has no `context.{first}`: {missing}", first
        if first in _FROM_DOCUMENT and action_types is not None:
            if action_types.document is None:
                return (
                    f"{action} declares no document, so `context.{first}` has no fields: "
                    f"declare the target's shape under `document:` on {action} to use "
                    f"`context.{path}`",
                    word,
                )
            return f"`context.{path}` is {_FROM_DOCUMENT[first]} {action}'s document", word
        if first == "input":
            return f"`context.{path}` is no input field of {action}", word
        return f"`context.{path}` is not in the context of {action}", word
    found = _OPTIONAL_ATTRIBUTE.search(message)
    if found:
        path = found.group(1)
        *head, last = path.split(".")
        owner = ".".join(head)
        where = "context." if "in context" in message else "principal."
        test = f"{where}{owner} has {last}" if owner else f"{where.rstrip('.')} has {last}"
        return (
            f"`{where}{path}` may be absent: test it first (`{test} && …`)",
            last,
        )
    found = _TAG.search(message)
    if found:
        tag = found.group(1)
        return (
            f"`principal.getTag({tag})` may be absent: test it first "
            f"(`principal.hasTag({tag}) && …`)",
            "",
        )
    found = _UNKNOWN_ACTION.search(message)
    if found:
        return f"no action named {found.group(1)}", found.group(1)
    return message, ""


_PER_ACTION = re.compile(r"^(`context\.[^`]+` is (?:no input field|not in the context)) of (\S+)$")


def _grouped(raw: list[str], types: Mapping[str, ActionTypes]) -> list[tuple[str, str]]:
    """One policy's validation errors as (message, word): the same field missing from
    several actions (a policy whose scope is too wide) is said once, naming them."""
    out: list[tuple[str, str]] = []
    grouped: dict[str, tuple[list[str], str]] = {}
    for message in raw:
        if message.endswith(_NO_ACTION_APPLIES) and len(raw) > 1:
            continue  # said better by the error beside it
        text, word = _validation_message(message, types)
        found = _PER_ACTION.match(text)
        if found:
            actions, _ = grouped.setdefault(found.group(1), ([], word))
            actions.append(found.group(2))
            continue
        out.append((text, word))
    for head, (actions, word) in grouped.items():
        if len(actions) == 1:
            out.append((f"{head} of {actions[0]}", word))
        else:
            names = sorted(actions)
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            out.append(
                (f"{head} of {shown}: name the actions that have it in the policy's scope", word)
            )
    return out


def _line_of_word(statement: Statement, word: str) -> int:
    if word:
        pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])")
        for offset, line in enumerate(statement.text.split("\n")):
            if pattern.search(line.split("//")[0]):
                return statement.line + offset
    return statement.line


# --- where in a statement a problem is -----------------------------------------------------
#
# Cedar's validator names the policy and the kind of error, never a position or the
# expression it is about; these find them in the statement's own text.


def _masked(text: str) -> str:
    """``text`` with its ``//`` comments blanked (same length, same lines): a word in a
    comment is never taken for the code."""
    out = list(text)
    i, n = 0, len(text)
    in_string = False
    while i < n:
        char = text[i]
        if in_string:
            if char == "\\":
                i += 2
                continue
            if char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
            continue
        i += 1
    return "".join(out)


def _position(statement: Statement, offset: int) -> tuple[int, int]:
    """The 1-based line and column, in the whole text, of ``offset`` in the statement."""
    before = statement.text[:offset]
    newline = before.rfind("\n")
    if newline < 0:
        return statement.line, statement.column + offset
    return statement.line + before.count("\n"), offset - newline


def _annotation_line(statement: Statement, name: str) -> int:
    """The line ``@name`` is written on (the statement's first line if it is not found)."""
    if name:
        found = re.search(rf"@{re.escape(name)}(?![A-Za-z0-9_])", _masked(statement.text))
        if found:
            return _position(statement, found.start())[0]
    return statement.line


_GROUP_CHAR = r"A-Za-z0-9_.@+-"


def _group_line(statement: Statement, group: str) -> int:
    """The line of the ``@require`` naming ``group``."""
    masked = _masked(statement.text)
    for found in re.finditer(r'@require\s*\(\s*"', masked):
        end = masked.find('"', found.end())
        inner = masked[found.end() : end if end >= 0 else len(masked)]
        named = re.search(rf"(?<![{_GROUP_CHAR}]){re.escape(group)}(?![{_GROUP_CHAR}])", inner)
        if named:
            return _position(statement, found.end() + named.start())[0]
    return _annotation_line(statement, "require")


# Type errors: the smallest part of a condition the validator refuses alone, found by
# validating its parts one by one (``part == part`` keeps each part's own typing). Bounded:
# at most this many validations for one check of a set, then the policy's line is given.
MAX_PROBES = 2000
_EXPRESSION_KEYS = ("left", "right", "arg", "if", "then", "else")
_OPERATORS = {
    "==": "==",
    "!=": "!=",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
    "+": "+",
    "-": "-",
    "*": "*",
    "&&": "&&",
    "||": "||",
    "if-then-else": "if",
}


def _children(expression: Any) -> list[dict[str, Any]]:
    if not isinstance(expression, dict) or len(expression) != 1:
        return []
    ((op, argument),) = expression.items()
    if op in ("Value", "Var", "Slot"):
        return []
    if op == "Record" and isinstance(argument, dict):
        return [v for v in argument.values() if isinstance(v, dict)]
    if isinstance(argument, list):  # a set, a function or method's arguments
        return [v for v in argument if isinstance(v, dict)]
    if isinstance(argument, dict):
        return [argument[k] for k in _EXPRESSION_KEYS if isinstance(argument.get(k), dict)]
    return []


def _path(expression: Any) -> tuple[str, ...] | None:
    """``context.input.amount`` as ("context", "input", "amount"), or None."""
    if not isinstance(expression, dict):
        return None
    if isinstance(expression.get("Var"), str):
        return (expression["Var"],)
    access = expression.get(".")
    if isinstance(access, dict) and isinstance(access.get("attr"), str):
        base = _path(access.get("left"))
        return (*base, access["attr"]) if base else None
    return None


def _fields(expression: Any) -> list[tuple[str, ...]]:
    """The attributes an expression reads, outermost accesses only, in order."""
    out: list[tuple[str, ...]] = []

    def walk(node: Any) -> None:
        path = _path(node) if isinstance(node, dict) and "." in node else None
        if path:
            if path not in out:
                out.append(path)
            return
        for child in _children(node):
            walk(child)

    walk(expression)
    return out


def _field_text(path: tuple[str, ...]) -> str:
    head, *rest = path
    return head + "".join(
        f".{name}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"[{json.dumps(name)}]"
        for name in rest
    )


def _field_pattern(path: tuple[str, ...]) -> re.Pattern[str]:
    head, *rest = path
    pattern = rf"(?<![A-Za-z0-9_.]){re.escape(head)}"
    for name in rest:
        pattern += (
            rf"\s*(?:\.\s*{re.escape(name)}(?![A-Za-z0-9_])"
            rf"|\[\s*{re.escape(json.dumps(name))}\s*\])"
        )
    return re.compile(pattern)


@dataclass
class _Probe:
    schema: cedarpy.Schema
    budget: int = MAX_PROBES

    def refuses(self, body: Mapping[str, Any], expression: Any, message: str) -> bool:
        """Whether the validator gives ``message`` for ``expression`` alone, in the
        policy's scope."""
        if self.budget <= 0:
            return False
        self.budget -= 1
        probe = {k: v for k, v in body.items() if k not in ("conditions", "annotations")}
        probe["conditions"] = [
            {"kind": "when", "body": {"==": {"left": expression, "right": expression}}}
        ]
        document = {"staticPolicies": {"policy0": probe}, "templates": {}, "templateLinks": []}
        try:
            text = cedarpy.policies_from_json_str(json.dumps(document))
        except (ValueError, TypeError):
            return False
        errors = cedarpy.validate_policies(text, self.schema).errors
        return any(_FOR_POLICY.sub("", e.error) == message for e in errors)

    def sites(self, body: Mapping[str, Any], message: str) -> list[dict[str, Any]]:
        """The smallest parts of the policy's conditions that give ``message`` alone."""

        def smallest(expression: dict[str, Any]) -> list[dict[str, Any]]:
            refused = [c for c in _children(expression) if self.refuses(body, c, message)]
            if not refused:
                return [expression]
            return [site for child in refused for site in smallest(child)]

        found: list[dict[str, Any]] = []
        for condition in body.get("conditions") or []:
            expression = condition.get("body") if isinstance(condition, dict) else None
            if isinstance(expression, dict) and self.refuses(body, expression, message):
                found += smallest(expression)
        return found


def _type_error_places(
    statement: Statement, body: Mapping[str, Any], message: str, probe: _Probe
) -> list[tuple[int, str]]:
    """(line, message naming the field and its column) for each place of the policy
    that gives the validator's ``message``; [] when none is found."""
    masked = _masked(statement.text)
    places: list[tuple[int, str]] = []
    for site in probe.sites(body, message):
        fields = _fields(site)
        if not fields:
            continue
        offsets = [m.start() for m in _field_pattern(fields[0]).finditer(masked)]
        if not offsets:
            continue
        symbol = _OPERATORS.get(next(iter(site)), next(iter(site)))
        if len(offsets) > 1:
            # The same field read twice: the place whose line also holds the operator.
            near = [o for o in offsets if symbol in _line_around(masked, o)]
            offsets = near or offsets
        line, column = _position(statement, offsets[0])
        named = ", ".join(f"`{_field_text(f)}`" for f in fields)
        places.append((line, f"{message}, where the policy reads {named} (column {column})"))
    return places


def _line_around(text: str, offset: int) -> str:
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return text[start : end if end >= 0 else len(text)]


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
    probe = _Probe(schema)
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
                    _syntax_line(statement, message)
                    if not message.startswith("templates")
                    else statement.line
                )
                text_line = (text.split("\n")[line - 1] if line else "") or ""
                if message.startswith("templates"):
                    problem(line, message)
                elif re.search(r"@\w+\s*\([^)]*,", text_line):
                    problem(
                        line,
                        _syntax_message(message)
                        + ' (an annotation holds one string: @require("2 of security"))',
                    )
                else:
                    problem(line, _syntax_message(message))
                continue
            named = f"policy {policy.id}: " if POLICY_ID.fullmatch(policy.id) else ""
            for message, annotation in problems:
                problem(_annotation_line(statement, annotation), named + message)
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
            messages = _grouped(raw_messages, types)
            statement = statements[index] if 0 <= index < len(statements) else None
            policy_id = found_here[index].id if index in found_here else ""
            named = f"policy {policy_id}: " if POLICY_ID.fullmatch(policy_id) else ""
            for message, word in messages:
                places: list[tuple[int | None, str]] = []
                if not word and statement is not None and index in found_here:
                    # No word to look for (a type error): find the expression itself.
                    places += _type_error_places(statement, found_here[index].est, message, probe)
                if not places:
                    line = _line_of_word(statement, word) if statement is not None else None
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
                    _group_line(statement, group) if statement else policy.line,
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
