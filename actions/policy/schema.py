"""The Cedar side of the catalog: the types policies see, and plans' values in those types.

Every action's JSON Schemas (its input, and the ``document:`` its target has when read)
become Cedar types, so that Cedar's validator can check each policy against the action
it names before it is ever evaluated: a field no action has, a string compared with a
number, a decimal compared with a string are refused at load. The same types convert a
plan's values when it is evaluated, and a value that does not fit (a decimal with more
than four digits after the point, an integer beyond 64 bits, a required field missing,
a string where the document says a number) fails the plan's evaluation, which is never
a yes (engine.py).

JSON Schema → Cedar:

=================================================  =======================================
``type: string``, ``enum``/``const`` of strings     ``String``
``type: string`` with ``format: decimal``, or a      ``decimal`` (money is kept as decimal
plain-decimal ``pattern`` (``DECIMAL_PATTERN``)      strings, ``"1250.00"``)
``type: integer``                                    ``Long``
``type: number``                                     ``decimal``
``type: boolean``                                    ``Bool``
``type: array`` with ``items``                       ``Set`` of the items' type
``type: object``                                     ``Record``: ``required`` properties
                                                     required, the others optional
``type: [T, "null"]``                                T, optional (a null is absent)
=================================================  =======================================

Anything else (several types, ``oneOf``, an array without ``items``) has no Cedar type:
a ``document:`` field like that is refused at load; an input field like that is left
out of the Cedar type, so a policy that names it is refused. Properties whose names
start with ``__`` are Cedar's own escapes (``__entity``, ``__extn``) and are treated the
same way. This module imports no app (the layers contract).

Over 600 lines: the table above read both ways, types for the validator at load and the
same types converting a plan's values at evaluation; kept together so that what a policy
is checked against and what it is evaluated on cannot drift apart.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from ..lib.canonical import escape_pointer_token
from ..lib.formats import PLAIN_DECIMAL

# The change kinds whose plans have a target as read (``before``) and a target as it
# would be (``after``). A delete leaves nothing; a create starts from nothing; an
# invoke and a read have no target document at all.
BEFORE_KINDS = frozenset({"update", "replace", "delete"})
AFTER_KINDS = frozenset({"create", "update", "replace"})
DOCUMENT_KINDS = frozenset({"create", "update", "replace", "delete", "read"})
CLASSES = ("observation", "reversible", "external", "irreversible")
KINDS = ("create", "update", "replace", "delete", "invoke", "read")

# Cedar's decimal: a 64-bit integer of ten-thousandths.
DECIMAL_PLACES = 4
DECIMAL_MAX = Decimal(2**63 - 1).scaleb(-DECIMAL_PLACES)
DECIMAL_MIN = Decimal(-(2**63)).scaleb(-DECIMAL_PLACES)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
_QUANTUM = Decimal(1).scaleb(-DECIMAL_PLACES)
# The same plain decimal ``format: decimal`` accepts at input (actions/lib/formats.py).
_PLAIN_DECIMAL = PLAIN_DECIMAL

# A string field is a decimal when its pattern is one of the plain-decimal patterns:
# anchored at both ends, an optional sign, digits, and then an escaped point and
# digits (possibly optional). ``^\d+\.\d{2}$``, ``^-?[0-9]{1,12}(\.[0-9]{1,2})?$``
# are; ``^[0-9]+$`` (an id, a postal code) is not: without a point it stays a string.
_DIGITS = r"(?:\\d|\[0-9\])(?:\+|\*|\?|\{[0-9]+(?:,[0-9]*)?\})?"
_SIGN = r"(?:-\?|\[(?:\+-|-\+|\\\+-|-\\\+)\]\?)?"
_FRACTION = rf"\\\.{_DIGITS}"
DECIMAL_PATTERN = re.compile(rf"\^{_SIGN}{_DIGITS}(?:{_FRACTION}|\((?:\?:)?{_FRACTION}\)\?)\$")

MAX_DEPTH = 16


class Misfit(ValueError):
    """A plan's value that does not fit its Cedar type; ``pointer`` says where."""

    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(f"{pointer or '/'}: {message}")
        self.pointer = pointer
        self.message = message


# --- the types ---------------------------------------------------------------------


class CedarType:
    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def value(self, value: Any, where: str) -> Any:
        """``value`` as Cedar JSON; Misfit when it does not fit."""
        raise NotImplementedError


@dataclass(frozen=True)
class String(CedarType):
    email: bool = False  # ``format: email``: its domain is in context.email_domains

    def schema(self) -> dict[str, Any]:
        return {"type": "String"}

    def value(self, value: Any, where: str) -> Any:
        if not isinstance(value, str):
            raise Misfit(where, f"expected a string, found {_kind(value)}")
        return value


@dataclass(frozen=True)
class Long(CedarType):
    def schema(self) -> dict[str, Any]:
        return {"type": "Long"}

    def value(self, value: Any, where: str) -> Any:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise Misfit(where, f"expected an integer, found {_kind(value)}")
        if not LONG_MIN <= value <= LONG_MAX:
            raise Misfit(where, "the integer does not fit in 64 bits")
        return value


@dataclass(frozen=True)
class DecimalType(CedarType):
    """Cedar's ``decimal``, from a JSON number (``text=False``) or a decimal string."""

    text: bool = False

    def schema(self) -> dict[str, Any]:
        return {"type": "Extension", "name": "decimal"}

    def value(self, value: Any, where: str) -> Any:
        return {"__extn": {"fn": "decimal", "arg": decimal_text(self.number(value, where), where)}}

    def number(self, value: Any, where: str) -> Decimal:
        if self.text:
            if not isinstance(value, str) or not _PLAIN_DECIMAL.fullmatch(value):
                raise Misfit(
                    where, f"expected a decimal string such as '120.00', found {_kind(value)}"
                )
            return Decimal(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Misfit(where, f"expected a number, found {_kind(value)}")
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise Misfit(where, "the number is not finite")
            return Decimal(repr(value))
        return Decimal(value)


@dataclass(frozen=True)
class Bool(CedarType):
    def schema(self) -> dict[str, Any]:
        return {"type": "Boolean"}

    def value(self, value: Any, where: str) -> Any:
        if not isinstance(value, bool):
            raise Misfit(where, f"expected true or false, found {_kind(value)}")
        return value


@dataclass(frozen=True)
class SetOf(CedarType):
    element: CedarType

    def schema(self) -> dict[str, Any]:
        return {"type": "Set", "element": self.element.schema()}

    def value(self, value: Any, where: str) -> Any:
        if not isinstance(value, list):
            raise Misfit(where, f"expected an array, found {_kind(value)}")
        return [self.element.value(item, f"{where}/{i}") for i, item in enumerate(value)]


@dataclass(frozen=True)
class Attribute:
    type: CedarType
    required: bool
    nullable: bool = False


@dataclass(frozen=True)
class Record(CedarType):
    attributes: Mapping[str, Attribute] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        return {
            "type": "Record",
            "attributes": {
                name: {**a.type.schema(), "required": a.required}
                for name, a in sorted(self.attributes.items())
            },
        }

    def value(self, value: Any, where: str) -> Any:
        if not isinstance(value, dict):
            raise Misfit(where, f"expected an object, found {_kind(value)}")
        out: dict[str, Any] = {}
        for name, attribute in self.attributes.items():
            here = f"{where}/{escape_pointer_token(name)}"
            item = value.get(name, _ABSENT)
            if item is None and attribute.nullable:
                item = _ABSENT
            if item is _ABSENT:
                if attribute.required:
                    raise Misfit(here, "a required field is missing")
                continue
            out[name] = attribute.type.value(item, here)
        return out

    def leaves(self, prefix: str = "") -> Iterator[tuple[str, CedarType]]:
        """(pointer, type) of every field reached through records only (not through a
        set: a pointer names one value)."""
        for name, attribute in sorted(self.attributes.items()):
            pointer = f"{prefix}/{escape_pointer_token(name)}"
            yield pointer, attribute.type
            if isinstance(attribute.type, Record):
                yield from attribute.type.leaves(pointer)


_ABSENT = object()


# --- lower-cased text (context.lower) ---------------------------------------------------


def lower_type(cedar: CedarType) -> CedarType | None:
    """The type of a value's lower-cased text: its strings where they are, through
    records and sets; None when it holds no string."""
    if isinstance(cedar, String):
        return String()
    if isinstance(cedar, SetOf):
        element = lower_type(cedar.element)
        return SetOf(element) if element is not None else None
    if isinstance(cedar, Record):
        record = lower_record(cedar)
        return record if record.attributes else None
    return None


def lower_record(record: Record) -> Record:
    """``record`` with only its text fields (every one as required as it was)."""
    attributes = {}
    for name, attribute in record.attributes.items():
        lowered = lower_type(attribute.type)
        if lowered is not None:
            attributes[name] = Attribute(lowered, attribute.required, attribute.nullable)
    return Record(attributes)


def lower_value(cedar: CedarType, value: Any) -> Any:
    """The lower-cased text of ``value``, already converted to Cedar JSON by the type
    ``cedar`` was made from (``lower_type``): each string lower-cased by Unicode's
    lower-case mapping (``str.lower``, not case folding: "ß" stays "ß"), nothing else."""
    if isinstance(cedar, String):
        return value.lower()
    if isinstance(cedar, SetOf):
        return [lower_value(cedar.element, item) for item in value]
    if isinstance(cedar, Record):
        return {
            name: lower_value(attribute.type, value[name])
            for name, attribute in cedar.attributes.items()
            if name in value
        }
    raise TypeError(f"no lower-cased form of {type(cedar).__name__}")  # pragma: no cover


def decimal_text(number: Decimal, where: str = "") -> str:
    """``number`` as Cedar writes a decimal; Misfit beyond four places or 64 bits."""
    try:
        quantized = number.quantize(_QUANTUM)
    except InvalidOperation:
        raise Misfit(where, "the number is too large for a decimal") from None
    if quantized != number:
        raise Misfit(where, f"more than {DECIMAL_PLACES} digits after the point")
    if not DECIMAL_MIN <= quantized <= DECIMAL_MAX:
        raise Misfit(where, "the number is too large for a decimal")
    text = format(quantized, "f").rstrip("0")
    return text + "0" if text.endswith(".") else text


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# --- JSON Schema -> Cedar ------------------------------------------------------------


class _NoType(Exception):
    def __init__(self, pointer: str, message: str) -> None:
        self.pointer = pointer
        self.message = message


def _resolve(schema: Any, defs: Mapping[str, Any], where: str) -> Any:
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema:
        ref = schema["$ref"]
        match = (
            re.fullmatch(r"#/(?:\$defs|definitions)/([^/]+)", ref) if isinstance(ref, str) else None
        )
        if match is None or match.group(1) not in defs or seen > 10:
            raise _NoType(where, f"the reference {ref!r} cannot be followed")
        schema = defs[match.group(1)]
        seen += 1
    return schema


def _type_of(schema: Any, defs: Mapping[str, Any], where: str, depth: int, lax: bool):
    """(CedarType, nullable) for one JSON Schema; _NoType when there is none."""
    if depth > MAX_DEPTH:
        raise _NoType(where, f"nested more than {MAX_DEPTH} levels")
    schema = _resolve(schema, defs, where)
    if not isinstance(schema, dict):
        raise _NoType(where, "not a schema")
    types = schema.get("type")
    names = [types] if isinstance(types, str) else list(types or [])
    nullable = "null" in names
    names = [n for n in names if n != "null"]
    if not names:
        values = schema["enum"] if isinstance(schema.get("enum"), list) else None
        if values is None and "const" in schema:
            values = [schema["const"]]
        if values:
            values = [v for v in values if v is not None]
            nullable = nullable or len(values) < len(schema.get("enum") or [schema.get("const")])
            if values and all(isinstance(v, str) for v in values):
                return String(), nullable
            if values and all(isinstance(v, bool) for v in values):
                return Bool(), nullable
            if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return Long(), nullable
            raise _NoType(where, "an enum of mixed values has no Cedar type")
        if "properties" in schema:
            names = ["object"]
        else:
            raise _NoType(where, "give it a type (string, integer, number, boolean, array, object)")
    if len(names) != 1:
        raise _NoType(where, f"several types ({', '.join(names)}) have no one Cedar type")
    name = names[0]
    if name == "string":
        if schema.get("format") == "decimal" or DECIMAL_PATTERN.fullmatch(
            str(schema.get("pattern") or "")
        ):
            return DecimalType(text=True), nullable
        return String(email=schema.get("format") == "email"), nullable
    if name == "integer":
        return Long(), nullable
    if name == "number":
        return DecimalType(), nullable
    if name == "boolean":
        return Bool(), nullable
    if name == "array":
        if not isinstance(schema.get("items"), dict):
            raise _NoType(where, "an array needs items with one type")
        element, _ = _type_of(schema["items"], defs, f"{where}/items", depth + 1, lax)
        return SetOf(element), nullable
    if name == "object":
        return _record(schema, defs, where, depth, lax), nullable
    raise _NoType(where, f"type {name!r} has no Cedar type")


def _record(schema: dict[str, Any], defs, where: str, depth: int, lax: bool) -> Record:
    required = set(schema.get("required") or [])
    attributes: dict[str, Attribute] = {}
    for name, sub in (schema.get("properties") or {}).items():
        here = f"{where}/properties/{escape_pointer_token(name)}"
        try:
            if name.startswith("__"):
                raise _NoType(here, "names starting with __ are Cedar's own")
            cedar, nullable = _type_of(sub, defs, here, depth + 1, lax)
        except _NoType:
            if lax:
                continue
            raise
        attributes[name] = Attribute(
            type=cedar, required=name in required and not nullable, nullable=nullable
        )
    return Record(attributes)


def input_type(schema: Mapping[str, Any]) -> Record:
    """An action's input schema as a Cedar record. Fields with no Cedar type are left
    out (the input schema serves validation first), so a policy naming one is refused."""
    try:
        return _record(dict(schema), schema.get("$defs") or {}, "", 0, lax=True)
    except _NoType:  # pragma: no cover - lax records skip what has no type
        return Record()


def document_type(schema: Mapping[str, Any]) -> Record:
    """A ``document:`` schema (already checked by ``document_problems``) as a record."""
    return _record(dict(schema), schema.get("$defs") or {}, "", 0, lax=False)


def document_problems(kind: str, schema: Any) -> list[tuple[str, str]]:
    """(pointer relative to ``document``, message) for a ``document:`` the loader
    refuses: not a JSON Schema, not an object, a field without a Cedar type, or an
    action whose plans have no target document."""
    if kind not in DOCUMENT_KINDS:
        return [("", f"an {kind} has no readable target: its input is what it sends")]
    if not isinstance(schema, dict):
        return [("", "the document is a JSON Schema (an object)")]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return [("", f"not a valid JSON Schema: {exc.message}")]
    if schema.get("type") != "object":
        return [("/type", "the target document is an object: type: object")]
    try:
        _record(schema, schema.get("$defs") or {}, "", 0, lax=False)
    except _NoType as exc:
        return [(exc.pointer, f"no Cedar type: {exc.message}")]
    return []


# --- the catalog's Cedar schema ------------------------------------------------------


@dataclass(frozen=True)
class ActionTypes:
    """What policies see of one action's plans."""

    name: str
    kind: str
    consequence_class: str
    input: Record
    document: Record | None
    has_before: bool
    has_after: bool
    # Pointers of the document's numeric fields (context.deltas) and e-mail fields
    # (context.email_domains).
    numbers: tuple[tuple[str, DecimalType | Long], ...] = ()
    emails: tuple[str, ...] = ()

    @functools.cached_property
    def lower_input(self) -> Record:
        return lower_record(self.input)

    @functools.cached_property
    def lower_document(self) -> Record:
        return lower_record(self.document or Record())

    def context_type(self) -> Record:
        document = self.document or Record()
        lower = {"input": Attribute(self.lower_input, required=True)}
        if self.has_before:
            lower["before"] = Attribute(self.lower_document, required=True)
        if self.has_after:
            lower["after"] = Attribute(self.lower_document, required=True)
        attributes: dict[str, Attribute] = {
            "input": Attribute(self.input, required=True),
            # The text fields of input, before and after, lower-cased (Cedar's ``like``
            # and ``==`` are case-sensitive).
            "lower": Attribute(Record(lower), required=True),
            "changed": Attribute(SetOf(String()), required=True),
            "deltas": Attribute(
                Record({p: Attribute(DecimalType(), required=False) for p, _ in self.numbers}),
                required=True,
            ),
            "email_domains": Attribute(
                Record(
                    {
                        p: Attribute(
                            Record(
                                {
                                    "before": Attribute(String(), required=False),
                                    "after": Attribute(String(), required=False),
                                }
                            ),
                            required=True,
                        )
                        for p in self.emails
                    }
                ),
                required=True,
            ),
            # What changed in a text document (actions/textdiff.py: policy_text).
            "text": Attribute(
                Record(
                    {
                        "is_text": Attribute(Bool(), True),
                        "lines_added": Attribute(Long(), True),
                        "lines_removed": Attribute(Long(), True),
                        "added": Attribute(String(), True),
                        "removed": Attribute(String(), True),
                        "complete": Attribute(Bool(), True),
                    }
                ),
                True,
            ),
            "rate": Attribute(
                Record({"hour": Attribute(Long(), True), "day": Attribute(Long(), True)}), True
            ),
            "time": Attribute(
                Record(
                    {
                        "hour": Attribute(Long(), True),
                        "minute": Attribute(Long(), True),
                        "weekday": Attribute(String(), True),
                    }
                ),
                True,
            ),
        }
        if self.has_before:
            attributes["before"] = Attribute(document, required=True)
        if self.has_after:
            attributes["after"] = Attribute(document, required=True)
        return Record(attributes)


def action_types(name: str, definition: Mapping[str, Any]) -> ActionTypes:
    kind = definition["kind"]
    document = None
    raw = definition.get("document")
    if isinstance(raw, dict) and not document_problems(kind, raw):
        document = document_type(raw)
    numbers: list[tuple[str, Any]] = []
    emails: list[str] = []
    if document is not None:
        for pointer, cedar in document.leaves():
            if isinstance(cedar, DecimalType | Long):
                numbers.append((pointer, cedar))
            elif isinstance(cedar, String) and cedar.email:
                emails.append(pointer)
    return ActionTypes(
        name=name,
        kind=kind,
        consequence_class=definition["consequence_class"],
        input=input_type(definition.get("input_schema") or {}),
        document=document,
        has_before=kind in BEFORE_KINDS,
        has_after=kind in AFTER_KINDS,
        numbers=tuple(numbers),
        emails=tuple(emails),
    )


AGENT = "Agent"
PERSON = "Person"
GROUP = "Group"
TARGET = "Target"


def class_group(consequence_class: str) -> str:
    return f"class:{consequence_class}"


def kind_group(kind: str) -> str:
    return f"kind:{kind}"


def cedar_schema(actions: Mapping[str, ActionTypes]) -> dict[str, Any]:
    """The Cedar schema (JSON form) of a catalog: the principal, resource and group
    entity types, and one Cedar action per catalog action, a member of its class's and
    its kind's action groups, with its own context type."""
    entity_types = {
        AGENT: {
            "shape": {
                "type": "Record",
                "attributes": {
                    "name": {"type": "String", "required": True},
                    "registrar": {"type": "String", "required": True},
                    "on_behalf_of": {"type": "Entity", "name": PERSON, "required": False},
                },
            },
            # The agent's attributes (AgentForm: names and scalar values), as strings.
            "tags": {"type": "String"},
        },
        PERSON: {
            "memberOfTypes": [GROUP],
            "shape": {
                "type": "Record",
                "attributes": {
                    "iss": {"type": "String", "required": True},
                    "sub": {"type": "String", "required": True},
                },
            },
        },
        GROUP: {},
        TARGET: {
            "shape": {
                "type": "Record",
                "attributes": {
                    "connector": {"type": "String", "required": True},
                    "path": {"type": "String", "required": True},
                },
            }
        },
    }
    cedar_actions: dict[str, Any] = {class_group(c): {} for c in CLASSES}
    cedar_actions.update({kind_group(k): {} for k in KINDS})
    for name, types in sorted(actions.items()):
        cedar_actions[name] = {
            "memberOf": [
                {"id": class_group(types.consequence_class)},
                {"id": kind_group(types.kind)},
            ],
            "appliesTo": {
                "principalTypes": [AGENT],
                "resourceTypes": [TARGET],
                "context": types.context_type().schema(),
            },
        }
    return {"": {"entityTypes": entity_types, "actions": cedar_actions}}
