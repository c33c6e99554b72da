"""Scope and eligibility rules: small, declarative comparisons on a JSON document.

A rule names a field by JSON pointer and one comparison: ``equals`` a constant, ``in`` or
``not_in`` a list, or ``equals_agent``: the value of one of the agent's attributes. A
missing field or attribute never satisfies a rule: refusing is the safe side.
"""

from __future__ import annotations

from typing import Any

from .lib.canonical import resolve_pointer

OPERATORS = ("equals", "in", "not_in", "equals_agent")
_MISSING = object()


def _resolve(document: Any, pointer: str) -> Any:
    try:
        return resolve_pointer(document, pointer)
    except KeyError:
        return _MISSING


def rule_operator(rule: dict[str, Any]) -> str | None:
    present = [op for op in OPERATORS if op in rule]
    return present[0] if len(present) == 1 else None


def rule_holds(rule: dict[str, Any], document: Any, attributes: dict[str, Any]) -> bool:
    value = _resolve(document, rule["pointer"])
    if value is _MISSING:
        return False
    op = rule_operator(rule)
    if op == "equals":
        return value == rule["equals"]
    if op == "in":
        return value in rule["in"]
    if op == "not_in":
        return value not in rule["not_in"]
    if op == "equals_agent":
        expected = attributes.get(rule["equals_agent"], _MISSING)
        return expected is not _MISSING and value == expected
    return False


def rule_text(rule: dict[str, Any]) -> str:
    """The reason a person or agent reads when the rule does not hold."""
    if rule.get("message"):
        return rule["message"]
    op = rule_operator(rule)
    pointer = rule["pointer"]
    if op == "equals":
        return f"{pointer} must equal {rule['equals']!r}"
    if op == "in":
        return f"{pointer} must be one of {rule['in']!r}"
    if op == "not_in":
        return f"{pointer} must not be one of {rule['not_in']!r}"
    return f"{pointer} must equal the agent's {rule['equals_agent']}"


def first_failing(rules: list[dict[str, Any]], document: Any, attributes: dict[str, Any]):
    for rule in rules:
        if not rule_holds(rule, document, attributes):
            return rule
    return None
