"""Where a policy is in its text, and what Cedar's messages mean there: the statements
split out with their lines, and each syntax or validation message turned into the line,
the word and the sentence a policy author reads (sources.py puts them on its problems)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cedarpy

from .schema import ActionTypes


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
    # Comments blanked (same length): only strings are left to tell from the code.
    code = _masked(text)
    i, n = 0, len(text)
    in_string = False
    while i < n:
        char = code[i]
        if in_string:
            if char == "\\":
                i += 2
                continue
            if char == '"':
                in_string = False
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


# --- where a syntax error is --------------------------------------------------------------


def _parse_error(text: str) -> str | None:
    try:
        cedarpy.policies_to_json_str(text)
    except ValueError as exc:
        return str(exc)
    return None


def syntax_line(statement: Statement, message: str) -> int:
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


def syntax_message(message: str) -> str:
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


def grouped(raw: list[str], types: Mapping[str, ActionTypes]) -> list[tuple[str, str]]:
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


def line_of_word(statement: Statement, word: str) -> int:
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


def annotation_line(statement: Statement, name: str) -> int:
    """The line ``@name`` is written on (the statement's first line if it is not found)."""
    if name:
        found = re.search(rf"@{re.escape(name)}(?![A-Za-z0-9_])", _masked(statement.text))
        if found:
            return _position(statement, found.start())[0]
    return statement.line


_GROUP_CHAR = r"A-Za-z0-9_.@+-"


def group_line(statement: Statement, group: str) -> int:
    """The line of the ``@require`` naming ``group``."""
    masked = _masked(statement.text)
    for found in re.finditer(r'@require\s*\(\s*"', masked):
        end = masked.find('"', found.end())
        inner = masked[found.end() : end if end >= 0 else len(masked)]
        named = re.search(rf"(?<![{_GROUP_CHAR}]){re.escape(group)}(?![{_GROUP_CHAR}])", inner)
        if named:
            return _position(statement, found.end() + named.start())[0]
    return annotation_line(statement, "require")


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
class Probe:
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


def type_error_places(
    statement: Statement, body: Mapping[str, Any], message: str, probe: Probe
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
