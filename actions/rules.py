"""Scope and eligibility rules: small, declarative comparisons on a JSON document.

A rule names a field by JSON pointer and one comparison: ``equals`` a constant, ``in`` or
``not_in`` a list, ``equals_agent``: the value of one of the agent's attributes, or an
ordered comparison with a number (``above``, ``below``, ``at_least``, ``at_most``). A
missing field or attribute never satisfies a rule: refusing is the safe side.

Ordered comparisons are exact: numbers and decimal strings (money is kept as strings,
``"1250.00"``) are compared as decimals, never as floats, and a value that is neither (a
boolean, ``"1,250"``, ``"1e3"``) satisfies no bound.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from .lib.canonical import resolve_pointer

ORDERED = ("above", "below", "at_least", "at_most")
OPERATORS = ("equals", "in", "not_in", "equals_agent", *ORDERED)
_MISSING = object()
# A plain decimal: an optional sign, digits, an optional fraction. No exponent, no
# separators, bounded length: what a money or count field holds.
_DECIMAL = re.compile(r"[+-]?[0-9]{1,30}(\.[0-9]{1,30})?")


def _resolve(document: Any, pointer: str) -> Any:
    try:
        return resolve_pointer(document, pointer)
    except KeyError:
        return _MISSING


def as_decimal(value: Any) -> Decimal | None:
    """``value`` as an exact decimal, or None when it is no number or decimal string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        # repr is the shortest text that reads back as this float: 0.1 stays 0.1.
        return Decimal(repr(value)) if value == value and abs(value) != float("inf") else None
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        try:
            return Decimal(value)
        except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
            return None
    return None


def rule_operator(rule: dict[str, Any]) -> str | None:
    present = [op for op in OPERATORS if op in rule]
    return present[0] if len(present) == 1 else None


def rule_problem(rule: Any) -> str | None:
    """Why ``rule`` is malformed (the catalog loader's words), or None."""
    if not isinstance(rule, dict) or not isinstance(rule.get("pointer"), str):
        return "a rule needs a pointer"
    op = rule_operator(rule)
    if op is None:
        return "a rule needs exactly one of: " + ", ".join(OPERATORS)
    if op in ORDERED and as_decimal(rule[op]) is None:
        return f"{op} needs a number or a decimal string such as '1000.00'"
    return None


def rule_decides(rule: dict[str, Any], document: Any, attributes: dict[str, Any]) -> bool | None:
    """True or False when the rule can be evaluated on ``document``; None when it
    cannot (the field or attribute is missing, or an ordered comparison meets a value
    that is no number). Each caller decides which side None falls on."""
    value = _resolve(document, rule["pointer"])
    if value is _MISSING:
        return None
    op = rule_operator(rule)
    if op == "equals":
        return value == rule["equals"]
    if op == "in":
        return value in rule["in"]
    if op == "not_in":
        return value not in rule["not_in"]
    if op == "equals_agent":
        expected = attributes.get(rule["equals_agent"], _MISSING)
        return None if expected is _MISSING else value == expected
    if op in ORDERED:
        number, bound = as_decimal(value), as_decimal(rule[op])
        if number is None or bound is None:
            return None
        if op == "above":
            return number > bound
        if op == "below":
            return number < bound
        if op == "at_least":
            return number >= bound
        return number <= bound
    return None


def rule_holds(rule: dict[str, Any], document: Any, attributes: dict[str, Any]) -> bool:
    return rule_decides(rule, document, attributes) is True


_ORDERED_TEXT = {
    "above": "be above",
    "below": "be below",
    "at_least": "be at least",
    "at_most": "be at most",
}


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
    if op in _ORDERED_TEXT:
        return f"{pointer} must {_ORDERED_TEXT[op]} {rule[op]}"
    return f"{pointer} must equal the agent's {rule['equals_agent']}"


def first_failing(rules: list[dict[str, Any]], document: Any, attributes: dict[str, Any]):
    for rule in rules:
        if not rule_holds(rule, document, attributes):
            return rule
    return None
