"""Writes: a POST, PUT, PATCH or DELETE as a proposed, disabled action.

The narrowest definition the document lets us defend: a closed input schema with bounds,
the read that serves the preview and revalidation, how the version is read, the
conditional write or idempotency key, and a consequence class guessed from the method.
What cannot be made narrow is refused, not loosened: a free-form body or a URL-valued
field turns an action back into a generic request tool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from actions.lib.canonical import escape_pointer_token
from actions.lib.http import FORM_CONTENT_TYPE

from .document import Refused, as_dict
from .followups import Request, status_operation, status_rules, wire_check
from .naming import encoded_target, proposed_name, proposed_title
from .operations import Document, Operation
from .proposal import CLASSES, HANDLED_HEADERS, Draft, Setting, add_warning, x_countersign
from .results import write_result
from .schemas import (
    SchemaConverter,
    inputs_from_parameters,
    schema_types,
    types_of,
)
from .text import draft_card

WRITE_METHODS = {"post", "put", "patch", "delete"}
DEFAULT_KIND = {"post": "invoke", "put": "replace", "patch": "update", "delete": "delete"}
DEFAULT_CLASS = {
    "post": "external",
    "put": "reversible",
    "patch": "reversible",
    "delete": "irreversible",
}
VERSION_FIELDS = ("version", "revision", "etag", "_version", "_rev", "rev")
IDEMPOTENCY_HEADERS = {"idempotency-key", "x-idempotency-key"}


@dataclass(frozen=True)
class _Classified:
    """The kind of change and its consequence class, and where the class came from."""

    kind: str
    consequence_class: str
    class_source: str  # "method" | "x-countersign"
    class_lowered_from: str  # the class the method implies, when the document lowers it


@dataclass
class _Inputs:
    """What the parameters give: the inputs, the target with its placeholders renamed to
    them, the conditional headers documented, and the headers an action sends."""

    target: str
    properties: dict[str, Any] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    documented: dict[str, bool] = field(
        default_factory=lambda: {"if-match": False, "if-none-match": False}
    )
    idempotency_header: str = ""
    fixed_headers: dict[str, str] = field(default_factory=dict)


def propose_write(setting: Setting, reads: dict[str, Draft], op: Operation) -> Draft:
    """One write operation as a draft; ``reads`` are the reads proposed from this
    document's GETs, by path (so that a write can name the read that checks it)."""
    warnings: list[dict[str, str]] = []
    warn = partial(add_warning, warnings)
    xc = x_countersign(op)
    name = proposed_name(op, xc, setting.prefix, warn)
    get_op = setting.gets_by_path.get(op.path)
    classified = _classify(op, xc, get_op, warn)
    kind = classified.kind
    if op.node.get("deprecated") is True:
        warn(op.pointer, "the operation is deprecated")

    converter = SchemaConverter(setting.doc, warn)
    inputs = _parameters(setting, op, xc, converter, warn)
    properties, required = inputs.properties, inputs.required
    precondition_field = xc.get("precondition_field", "")
    body_skip = {precondition_field[1:]} if precondition_field.count("/") == 1 else set()
    body_props, body_required, content_type, has_body, form_style = _body(
        setting.doc, op, kind, converter, warn, skip=body_skip
    )
    body_template: dict[str, Any] = {}
    for prop, schema in body_props.items():
        body_template[prop] = {"$input": prop}
        if prop in properties:
            continue  # the path parameter of the same name supplies it
        properties[prop] = schema
        if prop in body_required:
            required.append(prop)

    definition: dict[str, Any] = {
        "title": proposed_title(op, name, warn),
        "connector": setting.connector,
        "kind": kind,
        "consequence_class": classified.consequence_class,
        "enabled": False,
    }
    description = op.text("description")
    if description:
        definition["description"] = description[:2000]
    definition["card"] = {}  # drafted last, when the result is known
    input_schema: dict[str, Any] = {"type": "object", "additionalProperties": False}
    if required:
        input_schema["required"] = list(dict.fromkeys(required))
    input_schema["properties"] = properties
    definition["input_schema"] = input_schema
    target = encoded_target(op, inputs.target, warn)
    definition["target"] = target
    write_body = {"body": body_template, "content_type": content_type, "form_style": form_style}
    definition.update(
        _request(setting.doc, op, xc, kind, get_op, inputs, target, write_body, has_body, warn)
    )
    # What the agent gets back, and the read that checks the work: from a link the
    # document gives (a 202's status read), else the GET of the same path.
    result = write_result(op, converter, warn)
    reads_target = kind != "invoke" and isinstance(definition.get("read"), dict)
    check = wire_check(setting, reads, op, Request(properties, reads_target, result), warn)
    if check.check_with:
        definition["check_with"] = check.check_with
    if check.result:
        definition["result"] = check.result
    status_op = status_operation(setting, op, xc, warn, link=check.link)
    if xc.get("status"):
        definition["status"] = status_rules(op, xc["status"], status_op, required)
    definition["card"], drafted = draft_card(op, xc, warn, check.result)
    return Draft(
        op=op,
        name=name,
        kind=kind,
        consequence_class=classified.consequence_class,
        class_source=classified.class_source,
        class_lowered_from=classified.class_lowered_from,
        definition=definition,
        warnings=warnings,
        status_operation=status_op.describe() if status_op is not None else "",
        check_read=check.read,
        link_fields=check.link_fields,
        card_result_drafted=drafted,
    )


def _classify(op: Operation, xc: dict[str, Any], get_op: Operation | None, warn) -> _Classified:
    """The kind (x-countersign's, else the method's; an invoke when the target cannot be
    read) and the class (x-countersign's, never lower than a write's, else the method's)."""
    method = op.method
    kind = xc.get("kind") or DEFAULT_KIND[method]
    if kind in ("update", "replace", "delete") and get_op is None:
        if kind == "delete":
            raise Refused(
                op.pointer,
                "a delete must read its target for the preview and revalidation, and "
                f"no GET {op.path} is documented",
            )
        warn(
            op.pointer,
            f"no GET {op.path} to read the target: proposed as invoke (the preview "
            "shows the request, not a before/after)",
        )
        kind = "invoke"
    implied = DEFAULT_CLASS[method]
    if kind == "invoke" and method in ("put", "patch"):
        # Nothing is read, so nothing shows what the change replaces, and nothing here
        # could put it back: as consequential as any other command that is sent.
        implied = "external"
        if "class" not in xc:
            warn(
                op.pointer,
                f"proposed external, not reversible: with no GET {op.path} the change "
                "is not previewed against the current state and cannot be undone from "
                "what Countersign knows",
            )
    consequence_class = xc.get("class") or implied
    class_source = "x-countersign" if "class" in xc else "method"
    class_lowered_from = ""
    if consequence_class == "observation":
        raise Refused(
            f"{op.pointer}/x-countersign/class",
            f"x-countersign declares a {method.upper()} an observation: a write is never "
            "an observation (the lowest class for a write is reversible)",
        )
    if CLASSES.index(consequence_class) < CLASSES.index(implied):
        class_lowered_from = implied
        warn(
            f"{op.pointer}/x-countersign/class",
            f"the document lowers the class from {implied} (what a {method.upper()} "
            f"{kind} implies) to {consequence_class}: an admin confirms it before enabling",
        )
    return _Classified(kind, consequence_class, class_source, class_lowered_from)


def _parameters(
    setting: Setting, op: Operation, xc: dict[str, Any], converter: SchemaConverter, warn
) -> _Inputs:
    """The path parameters as inputs; the query, header and cookie parameters as what is
    sent (a fixed header, the idempotency key) or said not to be."""
    inputs = _Inputs(target=op.path)
    walked = inputs_from_parameters(op, converter, warn, partial(_sent, setting, xc, inputs, warn))
    assert not isinstance(walked, str)  # a write's parameters never stop the walk
    inputs.properties, inputs.required, inputs.target = walked
    return inputs


def _sent(
    setting: Setting, xc: dict[str, Any], inputs: _Inputs, warn, param: dict[str, Any], pointer: str
) -> str:
    """A query, header or cookie parameter of a write: a documented condition, the
    idempotency key, a fixed header, or said not to be sent (refused when required)."""
    pname, where = param["name"], param["in"]
    if where == "query":
        if param.get("required") is True:
            raise Refused(
                pointer,
                f"required query parameter {pname!r}: catalog writes send no query string",
            )
        warn(pointer, f"query parameter {pname!r} is not sent (writes have no query)")
    elif where == "header":
        lower = pname.lower()
        if lower in inputs.documented:
            inputs.documented[lower] = True
        elif lower in IDEMPOTENCY_HEADERS:
            inputs.idempotency_header = pname
        elif lower not in HANDLED_HEADERS:
            value = _fixed_header(setting, pname, param, xc)
            if value is not None:
                inputs.fixed_headers[pname] = value
                warn(
                    pointer,
                    f"header {pname!r} is always sent as {value!r} (a fixed value, "
                    "shown to reviewers in the request)",
                )
            elif param.get("required") is True:
                raise Refused(
                    pointer,
                    f"required header {pname!r} has no value Countersign could send: "
                    f"fix one with --header {pname}=VALUE (or x-countersign: "
                    "{headers: {...}}), or the upstream refuses every request",
                )
            else:
                warn(pointer, f"header {pname!r} is not forwarded by Countersign")
    else:
        warn(pointer, f"cookie parameter {pname!r} is not sent")
    return ""


def _request(
    doc: Document,
    op: Operation,
    xc: dict[str, Any],
    kind: str,
    get_op: Operation | None,
    inputs: _Inputs,
    target: str,
    write_body: dict[str, Any],
    has_body: bool,
    warn,
) -> dict[str, Any]:
    """The definition's ``read``, ``version`` and ``write``: what is read before the
    change, how its version is told, and the request with its condition or key.
    ``write_body`` is the body template, its media type and the form style."""
    method = op.method
    precondition_field = xc.get("precondition_field", "")
    out: dict[str, Any] = {}
    write: dict[str, Any] = {"method": method.upper()}
    precondition = "none"
    if kind in ("update", "replace", "delete"):
        assert get_op is not None
        out["read"] = {"path": target}
        version = xc.get("version") or _version(doc, op, get_op, inputs.documented, warn)
        out["version"] = version
        if version["source"] == "etag":
            precondition = "if_match"
        elif precondition_field:
            precondition = "field"
            write["precondition_field"] = precondition_field
    elif kind == "create":
        # A PUT names the new resource, which can be read; a POST to a collection
        # gets a server-assigned id, and reading the collection would say nothing.
        readable = get_op is not None and method != "post"
        out["read"] = {"path": target} if readable else None
        if inputs.documented["if-none-match"]:
            precondition = "if_none_match"
    if kind != "delete":
        write["body"] = write_body["body"]
        write["content_type"] = write_body["content_type"]
        if write_body["form_style"] == "deep_object":
            write["form_style"] = write_body["form_style"]
    elif has_body:
        warn(f"{op.pointer}/requestBody", "the request body of a delete is not sent")
    if precondition != "none":
        write["precondition"] = precondition
    idempotency_header = inputs.idempotency_header
    retry = xc.get("retry")
    if retry == "never":
        idempotency_header = ""
    elif isinstance(retry, dict):
        idempotency_header = retry["idempotency_header"]
    if idempotency_header:
        write["idempotency_header"] = idempotency_header
    if inputs.fixed_headers:
        write["headers"] = inputs.fixed_headers
    out["write"] = write
    if precondition == "none" and not idempotency_header:
        warn(
            op.pointer,
            f"{method.upper()} with no idempotency key and no conditional write: a "
            "duplicated or retried request could take effect twice, and a timeout "
            "leaves the outcome unknown",
        )
    return out


def _fixed_header(
    setting: Setting, name: str, param: dict[str, Any], xc: dict[str, Any]
) -> str | None:
    """The value an action always sends for a documented header: from x-countersign,
    from the import's --header, or the one value the document allows."""
    declared = {k.lower(): v for k, v in as_dict(xc.get("headers")).items()}
    if name.lower() in declared:
        return declared[name.lower()]
    if name.lower() in setting.headers:
        return setting.headers[name.lower()]
    schema = as_dict(param.get("schema"))
    if isinstance(schema.get("const"), str):
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and len(enum) == 1 and isinstance(enum[0], str):
        return enum[0]
    return None


def _body(
    doc: Document, op: Operation, kind: str, converter: SchemaConverter, warn, *, skip: set[str]
) -> tuple[dict[str, Any], list[str], str, bool, str]:
    """The body's inputs, the required ones, the media type, whether a body is
    documented, and the form style ("" unless a form)."""
    default_type = "application/merge-patch+json" if kind == "update" else "application/json"
    raw = op.node.get("requestBody")
    if raw is None:
        if kind in ("create", "update", "replace"):
            raise Refused(op.pointer, f"a {kind} needs a JSON request body; none documented")
        if kind == "invoke":
            warn(op.pointer, "no request body documented: the action sends {}")
        return {}, [], default_type, False, ""
    body, pointer, stack = doc.deref(raw, f"{op.pointer}/requestBody")
    if kind == "delete":
        return {}, [], default_type, True, ""
    if not isinstance(body, dict):
        raise Refused(pointer, "the request body is not a Request Body object")
    content = body.get("content")
    if not isinstance(content, dict) or not content:
        raise Refused(pointer, "the request body has no content: a generic passthrough")
    media = {m.split(";")[0].strip().lower(): m for m in content}
    preferred = ["application/merge-patch+json", "application/json"]
    if kind != "update":
        preferred.reverse()
    chosen = next((m for m in [*preferred, FORM_CONTENT_TYPE] if m in media), None)
    if chosen is None:
        raise Refused(
            f"{pointer}/content",
            f"request body types {sorted(media)} cannot be sent: only application/json, "
            "application/merge-patch+json and application/x-www-form-urlencoded objects",
        )
    media_pointer = f"{pointer}/content/{escape_pointer_token(media[chosen])}"
    entry = content[media[chosen]]
    if not isinstance(entry, dict) or "schema" not in entry:
        raise Refused(media_pointer, "free-form request body (no schema): generic passthrough")
    schema, schema_pointer, stack = doc.deref(entry["schema"], f"{media_pointer}/schema", stack)
    if not isinstance(schema, dict):
        raise Refused(schema_pointer, "free-form request body: generic passthrough")
    schema = converter.merge_all_of(schema, schema_pointer, stack)
    for combinator in ("oneOf", "anyOf"):
        if combinator in schema:
            raise Refused(
                schema_pointer,
                f"the request body is one of several shapes ({combinator}): import one "
                "action per shape",
            )
    types = schema_types(schema)
    if types and "object" not in types:
        raise Refused(
            schema_pointer, f"the request body is {types[0]}, not an object of named fields"
        )
    if not isinstance(schema.get("properties"), dict) or not schema["properties"]:
        raise Refused(
            schema_pointer,
            "free-form request body (an object with no named fields): generic passthrough",
        )
    if schema.get("additionalProperties") not in (False, None):
        warn(schema_pointer, "extra body fields the document allows are not offered")
    props, required = converter.properties(schema, schema_pointer, stack=stack, depth=0, skip=skip)
    style = ""
    if chosen == FORM_CONTENT_TYPE:
        style = _form_style(entry, media_pointer, props, required, warn)
        required = [r for r in required if r in props]
    if not props and any(name not in skip for name in schema["properties"]):
        raise Refused(schema_pointer, "none of the request body's fields can be offered")
    return props, required, chosen, True, style


def _form_style(
    entry: dict[str, Any],
    pointer: str,
    props: dict[str, Any],
    required: list[str],
    warn,
) -> str:
    """``deep_object`` when the document encodes any field that way (``a[b]=``, as
    Stripe does), else ``form``, where a field holding an object or an array of
    them has no agreed encoding: dropped when optional, refused when required."""
    encoding = as_dict(entry.get("encoding"))
    if any(as_dict(e).get("style") == "deepObject" for e in encoding.values()):
        return "deep_object"
    for name in list(props):
        schema = props[name]
        types = types_of(schema)
        items = types_of(schema.get("items")) if "array" in types else set()
        if "object" in types or items & {"object", "array"}:
            if name in required:
                raise Refused(
                    f"{pointer}/schema",
                    f"required form field {name!r} holds an object: the document "
                    "declares no deepObject encoding for it",
                )
            del props[name]
            warn(
                f"{pointer}/schema",
                f"optional form field {name!r} holds an object and the document "
                "declares no deepObject encoding: not offered",
            )
    return "form"


def _version(
    doc: Document, op: Operation, get_op: Operation, documented: dict[str, bool], warn
) -> dict[str, str]:
    if "etag" in get_op.response_headers("2"):
        if not documented["if-match"]:
            warn(
                op.pointer,
                "the read returns an ETag but the write documents no If-Match: confirm "
                "the upstream honours If-Match",
            )
        return {"source": "etag"}
    if documented["if-match"]:
        return {"source": "etag"}
    found = get_op.success_schema()
    if found is not None:
        schema, pointer = found
        try:
            schema, pointer, stack = doc.deref(schema, pointer)
        except Refused:
            schema = None
        if isinstance(schema, dict):
            schema = SchemaConverter(doc, warn).merge_all_of(schema, pointer, stack)
            props = as_dict(schema.get("properties"))
            for candidate in VERSION_FIELDS:
                if candidate in props:
                    return {"source": "field", "field": f"/{candidate}"}
    warn(
        op.pointer,
        "no ETag and no version field: the target's version is a hash of what is read "
        "(no conditional write)",
    )
    return {"source": "hash"}
