"""Follow-ups: the read that checks a write's work (``check_with``, from a link the
document gives or the GET of the same path) and how accepted work is followed (the
status operation, x-countersign's status rules).

Only what the document says exactly is wired: a link that cannot be followed exactly is
said and not used, and nothing is guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from actions.lib.canonical import escape_pointer_token

from .document import Refused, as_dict
from .naming import encode_path_literals, input_name_of, snake_case
from .operations import Document, Operation
from .proposal import Draft, Setting
from .results import MAX_RESULT_FIELDS, MAX_RESULT_LENGTH, RESULT_TYPES, object_at
from .schemas import DEFAULT_MAX_LENGTH, SchemaConverter, schema_types, types_of


@dataclass
class Link:
    """An OpenAPI link from a write's answer to the read that checks it."""

    name: str
    op: Operation
    read: Draft
    inputs: dict[str, Any]
    result: dict[str, Any]  # the write's result fields, with those the check needs
    added: tuple[str, ...]


@dataclass(frozen=True)
class Request:
    """What a write's check is wired from: its inputs, whether it reads its target before
    the change, and the result it declares."""

    properties: dict[str, Any]
    reads_target: bool
    result: dict[str, Any]


@dataclass(frozen=True)
class Check:
    """The read that checks a write's work, if any: the ``check_with`` to declare, the
    write's result with the fields the check needs, and which of them were added for it."""

    read: Draft | None
    link: Link | None
    check_with: dict[str, Any] | None
    result: dict[str, Any]
    link_fields: tuple[str, ...]


def wire_check(
    setting: Setting, reads: dict[str, Draft], op: Operation, request: Request, warn
) -> Check:
    """The check from a link the document gives (a 202's status read), else the GET of
    the same path when the change reads it (update, replace, delete, a readable create)."""
    link = linked_check(setting, reads, op, request.properties, request.result, warn)
    if link:
        check_with = {"action": link.read.name, "input": link.inputs}
        return Check(link.read, link, check_with, link.result, link.added)
    read = _same_path_read(reads, op, request.properties) if request.reads_target else None
    result = request.result
    if read is None:
        return Check(None, None, None, result, ())
    required_in = read.definition["input_schema"].get("required") or []
    check_with = {"action": read.name, "input": {key: {"$input": key} for key in required_in}}
    return Check(read, None, check_with, result, ())


def linked_check(
    setting: Setting,
    reads: dict[str, Draft],
    op: Operation,
    properties: dict[str, Any],
    result: dict[str, Any],
    warn,
) -> Link | None:
    """The read a link on the 202 (or 201) names, with its input taken from this
    write's input and answer. A link that cannot be followed exactly is said and not
    used: nothing is guessed."""
    responses = op.responses()
    for code in ("202", "201"):
        if code not in responses:
            continue
        response, response_pointer = responses[code]
        links = as_dict(response.get("links"))
        found = op.json_response((code,)) if links else None

        def documented(pointer: str, found=found) -> str:
            return _type_at(setting.doc, found[0], found[1], pointer) if found else ""

        for link_name, raw in links.items():
            where = f"{response_pointer}/links/{escape_pointer_token(link_name)}"
            setting.doc.budget.spend(where)
            try:
                link, where, _ = setting.doc.deref(raw, where)
            except Refused as exc:
                warn(where, f"link {link_name!r}: {exc.message}")
                continue
            if not isinstance(link, dict):
                continue
            target = _link_target(setting, link, link_name, where, warn)
            if target is None:
                continue
            read = reads.get(target.path)
            if read is None:
                warn(
                    where,
                    f"link {link_name!r}: {target.describe()} is not proposed as a read "
                    "in this import: check_with not wired",
                )
                continue
            wired = _link_inputs(link, link_name, where, read, properties, result, warn, documented)
            if wired is not None:
                inputs, fields, added = wired
                return Link(link_name, target, read, inputs, fields, added)
    return None


def _type_at(doc: Document, raw: Any, schema_pointer: str, pointer: str) -> str:
    """What the answer's schema says is at ``pointer``: a result type, "nested", or
    "" when it does not say."""
    converter = SchemaConverter(doc, lambda *_: None)
    try:
        node, where, stack = object_at(raw, schema_pointer, (), converter)
        for raw_token in pointer[1:].split("/"):
            token = raw_token.replace("~1", "/").replace("~0", "~")
            doc.budget.spend(where)
            if not isinstance(node, dict):
                return ""
            if "array" in schema_types(node) and token.isdigit():
                child, child_where = node.get("items"), f"{where}/items"
            else:
                props = as_dict(node.get("properties"))
                if token not in props:
                    return ""
                child = props[token]
                child_where = f"{where}/properties/{escape_pointer_token(token)}"
            node, where, stack = object_at(child, child_where, stack, converter)
    except Refused:
        return ""
    if not isinstance(node, dict):
        return ""
    types = [t for t in schema_types(node) if t != "null"]
    if {"object", "array"} & set(types):
        return "nested"
    return types[0] if len(types) == 1 and types[0] in RESULT_TYPES else ""


def _link_target(
    setting: Setting, link: dict[str, Any], name: str, where: str, warn
) -> Operation | None:
    op_id, op_ref = link.get("operationId"), link.get("operationRef")
    target = None
    if isinstance(op_id, str):
        target = setting.gets_by_id.get(op_id)
        named = repr(op_id)
    elif isinstance(op_ref, str):
        target = _operation_ref(setting, op_ref)
        named = f"operationRef {op_ref[:200]!r}"
    else:
        return None
    if target is None:
        warn(
            where,
            f"link {name!r}: {named} is no GET operation of this document (references "
            "outside it are never followed): not a read",
        )
        return None
    if "server" in link:
        warn(where, f"link {name!r} names another server: the read would not be this one")
        return None
    return target


def _operation_ref(setting: Setting, ref: str) -> Operation | None:
    """``#/paths/~1jobs~1{id}/get`` → that GET; nothing outside the document."""
    if not ref.startswith("#/paths/"):
        return None
    tokens = ref[2:].split("/")
    if len(tokens) != 3 or tokens[2] != "get":
        return None
    path = unquote(tokens[1]).replace("~1", "/").replace("~0", "~")
    return setting.gets_by_path.get(path)


def _link_inputs(
    link: dict[str, Any],
    link_name: str,
    where: str,
    read: Draft,
    properties: dict[str, Any],
    result: dict[str, Any],
    warn,
    documented,
) -> tuple[dict[str, Any], dict[str, Any], tuple[str, ...]] | None:
    """check_with's input for every input the read requires, from the link's
    parameters; the result fields with the fields it needs added."""
    given: dict[str, Any] = {}
    for key, expression in as_dict(link.get("parameters")).items():
        location, _, pname = str(key).rpartition(".")
        if location and location != "path":
            warn(where, f"link {link_name!r}: {key!r} is not sent by a read: not used")
            continue
        given[input_name_of(pname)] = expression
    schema = read.definition["input_schema"]
    needed = list(schema.get("required") or [])
    fields = dict(result)
    added: list[str] = []
    inputs: dict[str, Any] = {}
    for param in needed:
        if param not in given:
            warn(
                where,
                f"link {link_name!r} does not say where the read's {param!r} comes from: "
                "check_with not wired (nothing is guessed)",
            )
            return None
        source = _link_source(
            given[param],
            param,
            schema["properties"].get(param) or {},
            properties,
            fields,
            documented,
        )
        if isinstance(source, str):
            warn(where, f"link {link_name!r}, {param!r}: {source}: check_with not wired")
            return None
        if "$result" in source and source["$result"] not in result:
            added.append(source["$result"])
        inputs[param] = source
    for extra in sorted(set(given) - set(needed)):
        warn(where, f"link {link_name!r}: {extra!r} is no input of {read.name}: not used")
    # The fields the check needs stay; the last of the others make room for them.
    while len(fields) > MAX_RESULT_FIELDS:
        dropped = next(k for k in reversed(fields) if k not in added)
        del fields[dropped]
        warn(where, f"result: {dropped!r} left out to make room for the link's fields")
    return inputs, fields, tuple(added)


def _link_source(
    expression: Any,
    param: str,
    param_schema: dict[str, Any],
    properties: dict[str, Any],
    fields: dict[str, Any],
    documented,
) -> dict[str, str] | str:
    """``{"$input": ...}`` or ``{"$result": ...}`` (adding the result field), or why
    the expression cannot be carried."""
    if not isinstance(expression, str):
        return "a constant, which check_with cannot carry"
    text = expression.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if not text.startswith("$"):
        return "a constant, which check_with cannot carry"
    if text.startswith("$request.path."):
        name = input_name_of(text.removeprefix("$request.path."))
        return {"$input": name} if name in properties else f"{text} is no input of this write"
    if text.startswith("$request.body#/"):
        token = text.removeprefix("$request.body#/").replace("~1", "/").replace("~0", "~")
        if token in properties and "/" not in text.removeprefix("$request.body#/"):
            return {"$input": token}
        return f"{text} is no top-level input of this write"
    wanted = scalar_type(param_schema)
    if text.startswith("$response.body#/"):
        pointer = text.removeprefix("$response.body#")
        if not re.fullmatch(r"(/[^/]+)+", pointer) or len(pointer) > 500:
            return f"{text[:200]!r} is not a JSON pointer into the answer"
        # Where the answer's schema documents the value, it must be the read's kind
        # of value (an undocumented one is taken at the link's word).
        kind = documented(pointer)
        if kind == "nested":
            return f"the answer's {pointer} holds an object or a list, not a value"
        if kind and kind != wanted:
            return f"the answer's {pointer} is {kind}, and the read's {param!r} is {wanted}"
        spec: dict[str, Any] = {"pointer": pointer, "type": wanted}
    elif text.lower().startswith("$response.header."):
        header = text[len("$response.header.") :]
        if header.lower() == "location":
            return (
                "a Location is a URL, not a value of the read's input (x-countersign "
                "status follows a Location instead)"
            )
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,63}", header):
            return f"{header[:100]!r} is not a header name"
        if wanted != "string":
            return f"a header is text, and the read's {param!r} is {wanted}"
        spec = {"header": header, "type": "string"}
    else:
        return f"{text[:200]!r} is not an input or a field of the answer"
    source_key = "pointer" if "pointer" in spec else "header"
    for name, existing in fields.items():
        if existing.get(source_key) == spec[source_key]:
            if existing["type"] != wanted:
                return f"the answer's {name!r} is {existing['type']}, the read wants {wanted}"
            return {"$result": name}
    if wanted == "string":
        given = param_schema.get("maxLength")
        ok = isinstance(given, int) and not isinstance(given, bool) and given >= 1
        spec["max_length"] = min(given if ok else DEFAULT_MAX_LENGTH, MAX_RESULT_LENGTH)
    name = snake_case(param)[:60].rstrip("_") or "linked"
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name):
        name = "linked"
    base, n = name, 2
    while name in fields:
        name, n = f"{base}_{n}", n + 1
    fields[name] = spec
    return {"$result": name}


def _same_path_read(
    reads: dict[str, Draft], op: Operation, properties: dict[str, Any]
) -> Draft | None:
    """The read of the very GET a change already reads: it checks an unknown outcome
    with the same input."""
    read = reads.get(op.path)
    if read is None:
        return None
    needed = read.definition["input_schema"].get("required") or []
    return read if all(key in properties for key in needed) else None


def status_operation(
    setting: Setting, op: Operation, xc: dict[str, Any], warn, *, link: Link | None
) -> Operation | None:
    """The GET that reports on accepted work: the one a link names, the one
    x-countersign declares, or the created resource's GET when the 202 documents a
    Location. Only a link says which of the answer's fields the GET takes, so only a
    link (or the same path) makes a check_with."""
    responses = op.responses()
    declared = xc.get("status_operation")
    status_op = None
    if declared:
        status_op = setting.gets_by_id.get(declared)
        if status_op is None:
            raise Refused(
                f"{op.pointer}/x-countersign/status_operation",
                f"status_operation {declared!r} names no GET operation in this document",
            )
    if link is not None:
        status_op = link.op
    elif status_op is None and "202" in responses and "location" in op.response_headers("202"):
        base = op.path.rstrip("/")
        for candidate in setting.gets_by_path.values():
            if candidate.path == op.path or re.fullmatch(
                re.escape(base) + r"/\{[^{}/]+\}", candidate.path
            ):
                status_op = candidate
                break
    if "202" not in responses:
        return status_op
    where = f"{op.pointer}/responses/202"
    followed = (
        "followed by x-countersign's status rules"
        if xc.get("status")
        else "outcomes stay pending until the agent checks or a person settles them "
        "(x-countersign status: {done_when: ...} lets the worker follow it)"
    )
    if link is not None:
        warn(
            where,
            f"202 Accepted: the agent checks the work with the read {link.read.name} "
            f"(check_with, from the document's link {link.name!r}); {followed}",
        )
    elif status_op is not None:
        warn(
            where,
            f"202 Accepted: status operation {status_op.describe()} found, but no link "
            "in the document says which of the answer's fields it takes: check_with is "
            f"not wired (add a link to the 202, or check_with by hand); {followed}",
        )
    else:
        warn(where, "202 without a status operation: outcomes would stay pending")
    return status_op


def status_rules(
    op: Operation,
    declared: dict[str, Any],
    status_op: Operation | None,
    required: list[str],
) -> dict[str, Any]:
    """The catalog's ``status:`` from x-countersign's rules and a request the
    document gives: the 202's Location, or the status operation's path when the
    write's own input fills it. Anything else refuses: a declaration is never
    dropped."""
    where = f"{op.pointer}/x-countersign/status"
    out: dict[str, Any] = {}
    if "202" in op.responses() and "location" in op.response_headers("202"):
        out["from_location"] = True
    elif status_op is not None:
        path = status_op.path
        for pname in re.findall(r"\{([^{}]+)\}", path):
            path = path.replace("{" + pname + "}", "{" + input_name_of(pname) + "}")
        path = encode_path_literals(path)
        missing = [k for k in re.findall(r"\{([^{}]+)\}", path) if k not in required]
        if missing:
            raise Refused(
                where,
                f"x-countersign status: the 202 documents no Location, and the status "
                f"operation's path needs {', '.join(missing)}, which this write's input "
                "does not have",
            )
        out["path"] = path
    else:
        raise Refused(
            where,
            "x-countersign status: no request to ask (no Location on a 202 and no "
            "status operation)",
        )
    out.update(declared)
    return out


def scalar_type(schema: dict[str, Any]) -> str:
    """The result type of a value an input schema takes (string unless it says)."""
    types = [t for t in sorted(types_of(schema)) if t != "null"]
    return types[0] if len(types) == 1 and types[0] in RESULT_TYPES else "string"
