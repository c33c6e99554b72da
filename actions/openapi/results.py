"""Results: what an action declares it returns, from the answer the document gives.

At most MAX_RESULT_FIELDS of the record's top-level scalar fields, ids first; nested
objects and arrays, URLs and what looks like a secret are never proposed. An answer that
is a list, one page of a list, or one of several shapes declares no result.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from actions.lib.canonical import escape_pointer_token

from .document import Refused, as_dict
from .naming import URL_NAMES, URL_SUFFIXES, looks_like_id, snake_case
from .schemas import DEFAULT_MAX_LENGTH, SAFE_INTEGER, URL_FORMATS, SchemaConverter, schema_types

if TYPE_CHECKING:
    from .operations import Operation

# What a proposed result declares: the answer's top-level scalar fields, ids first, at
# most as many as the catalog allows (result: maxProperties); nested objects and arrays
# are added by a person who knows which of them the agent needs.
MAX_RESULT_FIELDS = 20
# The fields of one answer looked at to choose them (real records have a few hundred at
# most): a document cannot make choosing a result cost more than this.
MAX_RESULT_CANDIDATES = 1000
MAX_RESULT_LENGTH = 4096  # the catalog's bound on max_length
MAX_RESULT_ENUM = 50  # the catalog's bound on a result field's enum
RESULT_TYPES = ("string", "integer", "number", "boolean")
# The answers a write's result is read from, in this order.
WRITE_RESULT_CODES = ("200", "201", "202")
# Proposed right after the ids: what a follow-up or a check reads.
STATE_FIELDS = {"status", "state", "version", "revision", "etag"}
# Field names that look like a secret the upstream holds for someone (a client secret,
# an API key): never proposed as something an agent receives.
_SECRET_FIELD = re.compile(r"secret|passw|token|api_?key|private_?key|credential|signature")
# An object answer that is one page of a list: an array of the records beside paging
# fields ({data: [...], has_more}, {calls: [...], page, next_page_uri}).
LIST_FIELDS = {"data", "items", "results", "records", "entries", "elements", "nodes", "edges"}
PAGE_FIELDS = {
    "has_more",
    "next",
    "next_page",
    "next_page_uri",
    "next_page_url",
    "next_cursor",
    "next_page_token",
    "cursor",
    "page",
    "page_size",
    "per_page",
    "total",
    "total_count",
    "more",
    "offset",
    "limit",
}

NESTED = object()  # a field holding an object or an array: never proposed


def write_result(op: Operation, converter: SchemaConverter, warn) -> dict[str, Any]:
    """The result a write declares: from its 200, 201 or 202 answer, bounded."""
    found = op.json_response(WRITE_RESULT_CODES)
    if found is None:
        return {}
    raw, pointer, code = found
    node, pointer, stack, why, prefix = answer(raw, pointer, converter)
    if node is None:
        warn(pointer, f"no result proposed from the {code} answer: {why}")
        return {}
    return result_of(node, pointer, stack, converter, warn, prefix=prefix)


def answer(
    raw: Any, pointer: str, converter: SchemaConverter
) -> tuple[dict[str, Any] | None, str, tuple[str, ...], str, str]:
    """An answer's object schema (references followed, allOf merged, null unwrapped)
    and the pointer to the record in it, or None and why there is none. A record
    wrapped in an object of its own (``{"incident": {...}}``) is read inside it."""
    try:
        node, pointer, stack = object_at(raw, pointer, (), converter)
        if not isinstance(node, dict):
            return None, pointer, stack, "the answer has no usable schema", ""
        prefix = ""
        properties = as_dict(node.get("properties"))
        if len(properties) == 1:
            (key, inner_raw), where = (
                next(iter(properties.items())),
                f"{pointer}/properties/{escape_pointer_token(next(iter(properties)))}",
            )
            inner, inner_pointer, inner_stack = object_at(inner_raw, where, stack, converter)
            if isinstance(inner, dict) and "array" in schema_types(inner):
                return None, pointer, stack, f"the answer is a list (in {key!r})", ""
            if isinstance(inner, dict) and as_dict(inner.get("properties")):
                node, pointer, stack = inner, inner_pointer, inner_stack
                prefix = "/" + escape_pointer_token(key)
    except Refused as exc:
        return None, pointer, (), f"its schema cannot be read ({exc.message})", ""
    why = _no_record(node, pointer, stack, converter)
    return (None if why else node), pointer, stack, why, prefix


def object_at(
    raw: Any, pointer: str, stack: tuple[str, ...], converter: SchemaConverter
) -> tuple[Any, str, tuple[str, ...]]:
    node, pointer, stack = converter.doc.deref(raw, pointer, stack)
    if isinstance(node, dict):
        node = converter.merge_all_of(node, pointer, stack)
        node, pointer, stack, _ = converter.unwrap_nullable(node, pointer, stack)
    return node, pointer, stack


def _no_record(
    node: dict[str, Any],
    pointer: str,
    stack: tuple[str, ...],
    converter: SchemaConverter,
) -> str:
    """Why an answer's schema holds no single record, or ""."""
    properties = as_dict(node.get("properties"))
    if "array" in schema_types(node):
        return "the answer is a list"
    if not properties:
        if any(isinstance(node.get(k), list) for k in ("oneOf", "anyOf")):
            return "the answer is one of several shapes"
        return "the answer has no named fields"
    if _is_page(properties, pointer, stack, converter):
        return "the answer is one page of a list"
    return ""


def _is_page(
    properties: dict[str, Any],
    pointer: str,
    stack: tuple[str, ...],
    converter: SchemaConverter,
) -> bool:
    """A list in an envelope: no id, an array of records, paging fields."""
    considered = list(properties.items())[:MAX_RESULT_CANDIDATES]
    names = {snake_case(p) for p, _ in considered}
    if any(looks_like_id(p) for p, _ in considered) or "id" in names:
        return False
    arrays = set()
    for prop, raw in considered:
        where = f"{pointer}/properties/{escape_pointer_token(prop)}"
        converter.doc.budget.spend(where)
        try:
            peek, _, _ = converter.doc.deref(raw, where, stack)
        except Refused:
            continue
        if isinstance(peek, dict) and "array" in schema_types(peek):
            arrays.add(snake_case(prop))
    return bool(arrays) and bool(arrays & LIST_FIELDS or names & PAGE_FIELDS)


def result_of(
    node: dict[str, Any],
    pointer: str,
    stack: tuple[str, ...],
    converter: SchemaConverter,
    warn,
    *,
    prefix: str = "",
) -> dict[str, Any]:
    """At most MAX_RESULT_FIELDS of the record's top-level scalar fields, ids first;
    nested objects and arrays are never proposed (a person adds what the agent
    needs), nor URLs or what looks like a secret. ``prefix`` points at the record
    inside the answer (``/incident``)."""
    ids: list[tuple[str, dict[str, Any]]] = []
    rest: list[tuple[str, dict[str, Any]]] = []
    nested: list[str] = []
    taken: set[str] = set()
    properties = as_dict(node.get("properties"))
    if len(properties) > MAX_RESULT_CANDIDATES:
        warn(
            pointer,
            f"result: the answer documents {len(properties)} fields; only the first "
            f"{MAX_RESULT_CANDIDATES} were considered",
        )
    for prop, raw in list(properties.items())[:MAX_RESULT_CANDIDATES]:
        where = f"{pointer}/properties/{escape_pointer_token(prop)}"
        name = snake_case(prop)[:64].rstrip("_")
        try:
            found = _result_field(prop, name, raw, where, stack, converter, prefix)
        except Refused as exc:
            found = f"has a schema that cannot be read ({exc.message})"
        if found is None:
            continue
        if found is NESTED:
            nested.append(prop)
            continue
        if isinstance(found, str):
            warn(where, f"result: {prop!r} {found}: not returned")
            continue
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name) or name in taken:
            warn(where, f"result: {prop!r} has no name of its own a result can use")
            continue
        taken.add(name)
        is_id = looks_like_id(prop) or name == "id" or name.endswith("_id")
        (ids if is_id else rest).append((name, found))
    # The record's own id, then the other ids; then what a follow-up reads (status,
    # state, version), then the document's order.
    ids.sort(key=lambda item: item[0] != "id")
    rest.sort(key=lambda item: item[0] not in STATE_FIELDS)
    ordered = ids + rest
    if len(ordered) > MAX_RESULT_FIELDS:
        more = [name for name, _ in ordered[MAX_RESULT_FIELDS:]]
        warn(
            pointer,
            f"result: at most {MAX_RESULT_FIELDS} fields are proposed (ids, then status "
            "and version fields, then the document's order); "
            f"{len(more)} more left out: {few(more)}",
        )
    if nested:
        warn(
            pointer,
            f"result: nested objects and arrays are never proposed ({few(nested)}): "
            "add the fields the agent needs by hand (result: {name: {pointer: "
            f"{prefix}/{escape_pointer_token(nested[0])}/<field or index>, type: ...}}}})",
        )
    return dict(ordered[:MAX_RESULT_FIELDS])


def _result_field(
    prop: str,
    name: str,
    raw: Any,
    pointer: str,
    stack: tuple[str, ...],
    converter: SchemaConverter,
    prefix: str,
) -> dict[str, Any] | str | None:
    """One field's declaration, NESTED, a reason it is not returned, or None for a
    field no answer carries (writeOnly). ``name`` is ``prop`` in snake_case."""
    converter.doc.budget.spend(pointer)
    node, pointer, stack = converter.doc.deref(raw, pointer, stack)
    if not isinstance(node, dict):
        return "has no usable schema"
    if node.get("writeOnly") is True:
        return None
    node = converter.merge_all_of(node, pointer, stack)
    node, pointer, stack, _ = converter.unwrap_nullable(node, pointer, stack)
    types = [t for t in schema_types(node) if t != "null"]
    values: list[Any] | None = None
    if isinstance(node.get("enum"), list):
        values = [v for v in node["enum"] if v is not None]
    elif node.get("const") is not None:
        values = [node["const"]]
    if not types and values:
        types = sorted({json_type(v) for v in values})
    if {"object", "array"} & set(types) or (
        not types and any(k in node for k in ("oneOf", "anyOf"))
    ):
        return NESTED
    if len(types) != 1 or types[0] not in RESULT_TYPES:
        return "has no single scalar type"
    kind = types[0]
    fmt = node.get("format")
    if (isinstance(fmt, str) and fmt.lower() in URL_FORMATS) or (
        name in URL_NAMES or name.endswith(URL_SUFFIXES)
    ):
        return "is a URL (results never carry URLs: the filter removes them)"
    if _SECRET_FIELD.search(name):
        return "looks like a secret"
    spec: dict[str, Any] = {
        "pointer": f"{prefix}/{escape_pointer_token(prop)}",
        "type": kind,
    }
    if kind == "string":
        given = node.get("maxLength")
        length = (
            given
            if isinstance(given, int) and not isinstance(given, bool) and given >= 1
            else DEFAULT_MAX_LENGTH
        )
        longest = [len(v) for v in values or [] if isinstance(v, str)]
        spec["max_length"] = min(max([length, *longest]), MAX_RESULT_LENGTH)
    if (
        values
        and kind != "number"
        and len(values) <= MAX_RESULT_ENUM
        and all(json_type(v) == kind for v in values)
        and not any(isinstance(v, int) and abs(v) > SAFE_INTEGER for v in values)
    ):
        spec["enum"] = list(dict.fromkeys(values))
    return spec


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if isinstance(value, str) else "other"


def few(names: list[str], count: int = 8) -> str:
    shown = ", ".join(names[:count])
    return shown + (f" and {len(names) - count} more" if len(names) > count else "")
