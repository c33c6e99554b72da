"""Schema conversion: OpenAPI schema objects (and parameters) as closed, bounded JSON
Schema 2020-12 for an action's input.

Bounds are added where the document gives none (and each addition is a warning, so a
person sees what was guessed); free-form values are reported to the caller, which drops
an optional one and refuses a required one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actions.lib.canonical import escape_pointer_token
from actions.lib.formats import FORMATS
from actions.spec import pattern_problem

from .document import MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, FreeForm, Refused, as_dict, as_names
from .naming import input_name_of, is_url_name, looks_like_id
from .text import plain_text

if TYPE_CHECKING:
    from .operations import Document, Operation

IDENTIFIER_PATTERN = "^[A-Za-z0-9_.-]{1,100}$"
SAFE_INTEGER = 2**53 - 1
DEFAULT_MAX_LENGTH = 200
DEFAULT_MAX_ITEMS = 100
URL_FORMATS = {"uri", "url", "uri-reference", "iri", "iri-reference", "uri-template"}
FIXED_FORMATS = {"date", "date-time", "time", "uuid", "ipv4", "ipv6", "duration"}
# Keywords kept from an OpenAPI schema object; the rest (xml, discriminator, examples,
# extensions, ...) say nothing an action's input validation needs.
SCHEMA_KEYWORDS = (
    "title",
    "description",
    "enum",
    "const",
    "format",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "default",
)


class SchemaConverter:
    """OpenAPI schema objects → closed, bounded JSON Schema 2020-12 for action inputs.

    Bounds are added where the document gives none (and each addition is a warning, so a
    person sees what was guessed); free-form values are reported to the caller, which
    drops an optional one and refuses a required one.
    """

    def __init__(self, doc: Document, warn) -> None:
        self.doc = doc
        self.warn = warn
        self.nodes = 0

    def merge_all_of(
        self, node: dict[str, Any], pointer: str, stack: tuple[str, ...], depth: int = 0
    ) -> dict:
        if not isinstance(node.get("allOf"), list):
            return node
        cached = self.doc.merged.get(id(node))
        if cached is not None and cached[0] is node:
            return cached[1]
        if depth > MAX_SCHEMA_DEPTH:
            raise Refused(pointer, f"allOf nested more than {MAX_SCHEMA_DEPTH} levels deep")
        self.doc.budget.spend(pointer, 1 + len(node["allOf"]))
        merged = {k: v for k, v in node.items() if k != "allOf"}
        for i, raw in enumerate(node["allOf"]):
            part, part_pointer, part_stack = self.doc.deref(raw, f"{pointer}/allOf/{i}", stack)
            if not isinstance(part, dict):
                raise Refused(part_pointer, "allOf parts must be schema objects")
            part = self.merge_all_of(part, part_pointer, part_stack, depth + 1)
            self.doc.budget.spend(part_pointer, len(part))
            for key, value in part.items():
                if key == "properties" and isinstance(value, dict):
                    merged["properties"] = {**as_dict(merged.get("properties")), **value}
                elif key == "required":
                    merged["required"] = list(
                        dict.fromkeys([*as_names(merged.get("required")), *as_names(value)])
                    )
                else:
                    merged.setdefault(key, value)
        self.doc.merged[id(node)] = (node, merged)
        return merged

    def convert(
        self,
        raw: Any,
        pointer: str,
        *,
        name: str,
        stack: tuple[str, ...] = (),
        depth: int = 0,
        identifier: bool = False,
    ) -> dict[str, Any]:
        self.nodes += 1
        if self.nodes > MAX_SCHEMA_NODES or depth > MAX_SCHEMA_DEPTH:
            raise Refused(
                pointer,
                f"the input schema has more than {MAX_SCHEMA_NODES} nodes or is nested more "
                f"than {MAX_SCHEMA_DEPTH} levels deep",
            )
        self.doc.budget.spend(pointer)
        node, pointer, stack = self.doc.deref(raw, pointer, stack)
        if node is True or node == {}:
            raise FreeForm(pointer, "free-form (any value)")
        if not isinstance(node, dict):
            raise Refused(pointer, f"{name!r}: not a usable schema")
        node = self.merge_all_of(node, pointer, stack)
        node, pointer, stack, nullable = self.unwrap_nullable(node, pointer, stack)
        fmt = node.get("format")
        if isinstance(fmt, str) and fmt.lower() in URL_FORMATS:
            raise FreeForm(
                pointer,
                f"a URL (format {fmt})",
                refusal=f"{name!r} is a URL (format {fmt}): a URL an agent chooses makes the "
                "action a generic passthrough",
            )
        out: dict[str, Any] = {k: node[k] for k in SCHEMA_KEYWORDS if k in node}
        if "format" in out and out["format"] not in FORMATS:
            # The catalog refuses a format it cannot check strictly (actions/lib/formats.py);
            # the field keeps its other constraints.
            self.warn(
                pointer,
                f"{name!r}: format {out.pop('format')!r} is not one Countersign checks; dropped",
            )
        for key in ("description", "title"):
            if isinstance(out.get(key), str):
                out[key] = plain_text(out[key])[:2000]
        types = schema_types(node)
        if self.doc.is_30:
            for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
                if isinstance(node.get(bound), bool):
                    out.pop(bound)
                    if node[bound] and limit in node:
                        out[bound] = out.pop(limit)
        if nullable:
            if types and "null" not in types:
                types.append("null")
            if isinstance(out.get("enum"), list) and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        _safe_bounds(out, pointer, name, self.warn)
        for combinator in ("oneOf", "anyOf"):
            if isinstance(node.get(combinator), list):
                variants = []
                for i, variant in enumerate(node[combinator]):
                    try:
                        variants.append(
                            self.convert(
                                variant,
                                f"{pointer}/{combinator}/{i}",
                                name=name,
                                stack=stack,
                                depth=depth + 1,
                            )
                        )
                    except FreeForm as exc:
                        # Dropped when optional, like any value that cannot be offered.
                        raise FreeForm(
                            exc.pointer,
                            f"one of several shapes, one of them {exc.what}",
                            refusal=exc.refusal
                            or f"{name!r}: one of its alternatives is {exc.what}",
                        ) from None
                out[combinator] = variants
        if not types and not any(k in out for k in ("enum", "const", "oneOf", "anyOf")):
            raise FreeForm(pointer, "free-form (no type)")
        if types:
            out = {"type": types[0] if len(types) == 1 else types, **out}
        if "string" in types:
            _bound_string(out, pointer, name, self.warn, identifier=identifier)
        if isinstance(out.get("pattern"), str):
            problem = pattern_problem(out["pattern"])
            if problem:
                raise FreeForm(
                    pointer,
                    f"a string whose pattern cannot be checked in linear time ({problem})",
                    refusal=f"{name!r}: its pattern {out['pattern']!r} cannot be checked in "
                    f"linear time ({problem})",
                )
        if "array" in types:
            if "items" not in node:
                raise FreeForm(pointer, "an array of anything")
            try:
                out["items"] = self.convert(
                    node["items"], f"{pointer}/items", name=name, stack=stack, depth=depth + 1
                )
            except FreeForm as exc:
                raise FreeForm(
                    exc.pointer, f"an array of {exc.what} values", refusal=exc.refusal
                ) from None
            if "maxItems" not in out and not any(k in out for k in ("enum", "const")):
                out["maxItems"] = DEFAULT_MAX_ITEMS
                self.warn(pointer, f"{name!r}: no maxItems; proposed {DEFAULT_MAX_ITEMS}")
        if "object" in types:
            properties = node.get("properties")
            if not isinstance(properties, dict) or not properties:
                raise FreeForm(pointer, "a free-form object")
            if node.get("additionalProperties") is not False:
                self.warn(
                    pointer,
                    f"{name!r}: closed with additionalProperties: false (unknown fields "
                    "are refused, never passed on)",
                )
            out["properties"], required = self.properties(node, pointer, stack=stack, depth=depth)
            if not out["properties"]:
                raise FreeForm(pointer, "an object none of whose fields can be offered")
            if required:
                out["required"] = required
            out["additionalProperties"] = False
        return out

    def unwrap_nullable(
        self, node: dict[str, Any], pointer: str, stack: tuple[str, ...]
    ) -> tuple[dict[str, Any], str, tuple[str, ...], bool]:
        """One schema that may also be null, however the document says so: 3.0's
        ``nullable: true``, 3.1's ``type: [T, "null"]`` (left to ``schema_types``), or
        ``anyOf``/``oneOf`` of a schema and ``{type: "null"}``."""
        nullable = node.get("nullable") is True
        for combinator in ("anyOf", "oneOf"):
            variants = node.get(combinator)
            if not isinstance(variants, list) or len(variants) < 2:
                continue
            resolved = []
            for i, raw in enumerate(variants):
                resolved.append(self.doc.deref(raw, f"{pointer}/{combinator}/{i}", stack))
            nulls = [r for r in resolved if _is_null_schema(r[0])]
            if not nulls:
                continue
            rest = [r for r in resolved if not _is_null_schema(r[0])]
            if len(rest) != 1:
                # Several shapes and null: keep the alternatives, allow null among them.
                node = {**node, combinator: [r[0] for r in rest] + [{"type": "null"}]}
                return node, pointer, stack, nullable
            inner, inner_pointer, inner_stack = rest[0]
            if not isinstance(inner, dict):
                return node, pointer, stack, nullable
            inner = self.merge_all_of(inner, inner_pointer, inner_stack)
            outer = {k: v for k, v in node.items() if k not in (combinator, "nullable")}
            # The alternative's own keywords win; the outer description or bounds stay.
            merged = {**outer, **inner}
            return merged, inner_pointer, inner_stack, True
        return node, pointer, stack, nullable

    def properties(
        self,
        node: dict[str, Any],
        pointer: str,
        *,
        stack: tuple[str, ...],
        depth: int,
        skip: set[str] | None = None,
    ) -> tuple[dict[str, Any], list[str]]:
        """The fields that can be offered. One that cannot (free-form, a URL, a pattern
        that is not linear-time) is dropped with a warning when it is optional; when it
        is required, so is the object holding it, up to the body, whose operation is then
        refused."""
        required_in = as_names(node.get("required"))
        out: dict[str, Any] = {}
        for prop, raw in as_dict(node.get("properties")).items():
            if skip and prop in skip:
                continue
            prop_pointer = f"{pointer}/properties/{escape_pointer_token(prop)}"
            peek, _, _ = self.doc.deref(raw, prop_pointer, stack)
            if isinstance(peek, dict) and peek.get("readOnly") is True:
                continue  # set by the server: never an input
            try:
                if is_url_name(prop):
                    raise FreeForm(
                        prop_pointer,
                        "a URL (by its name)",
                        refusal=f"{prop!r} names a URL: a URL an agent chooses makes the "
                        "action a generic passthrough",
                    )
                out[prop] = self.convert(
                    raw,
                    prop_pointer,
                    name=prop,
                    stack=stack,
                    depth=depth + 1,
                    identifier=looks_like_id(prop),
                )
            except FreeForm as exc:
                if prop not in required_in:
                    self.warn(exc.pointer, f"optional field {prop!r} is {exc.what}: not offered")
                    continue
                if depth == 0:
                    raise Refused(
                        exc.pointer,
                        exc.refusal
                        or f"required field {prop!r} is {exc.what}: a generic passthrough",
                    ) from None
                raise FreeForm(
                    exc.pointer,
                    f"an object whose required field {prop!r} is {exc.what}",
                    refusal=exc.refusal,
                ) from None
        required = [r for r in required_in if r in out]
        return out, required


def _safe_bounds(out: dict[str, Any], pointer: str, name: str, warn) -> None:
    """Numeric bounds beyond what JSON numbers carry exactly (±2**53-1) are tightened to
    that range: the catalog keeps big numbers as strings, and a tighter bound never
    admits anything the document refuses."""
    for key, limit in (
        ("maximum", SAFE_INTEGER),
        ("exclusiveMaximum", SAFE_INTEGER),
        ("minimum", -SAFE_INTEGER),
        ("exclusiveMinimum", -SAFE_INTEGER),
    ):
        value = out.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if abs(value) > SAFE_INTEGER:
            out[key] = limit
            warn(
                pointer,
                f"{name!r}: {key} {value} is beyond what JSON numbers carry exactly; "
                f"tightened to {limit}",
            )
    for key in ("enum", "const", "default"):
        values = out.get(key) if key == "enum" else [out.get(key)]
        if isinstance(values, list) and any(
            isinstance(v, int) and not isinstance(v, bool) and abs(v) > SAFE_INTEGER for v in values
        ):
            raise FreeForm(
                pointer,
                f"a number beyond what JSON numbers carry exactly ({key})",
            )


def schema_types(node: dict[str, Any]) -> list[str]:
    raw = node.get("type")
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list):
        return [t for t in raw if isinstance(t, str)]
    if "properties" in node or "additionalProperties" in node:
        return ["object"]
    if "items" in node:
        return ["array"]
    return []


def _bound_string(out: dict[str, Any], pointer: str, name: str, warn, *, identifier: bool) -> None:
    constrained = any(k in out for k in ("enum", "const"))
    if identifier and not constrained and not any(k in out for k in ("pattern", "format")):
        out["pattern"] = IDENTIFIER_PATTERN
        out.setdefault("maxLength", 100)
        warn(
            pointer,
            f"identifier {name!r} has no pattern or enum; proposed {IDENTIFIER_PATTERN}",
        )
    if not constrained and "maxLength" not in out:
        out["maxLength"] = DEFAULT_MAX_LENGTH
        # The catalog wants a maxLength on every string; when an anchored pattern or a
        # fixed format already bounds the value, adding one is not worth a warning.
        if not (_bounded_pattern(out.get("pattern")) or out.get("format") in FIXED_FORMATS):
            warn(pointer, f"{name!r}: string without maxLength; proposed {DEFAULT_MAX_LENGTH}")


def types_of(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    raw = schema.get("type")
    return set(raw) if isinstance(raw, list) else {raw} if isinstance(raw, str) else set()


def _is_null_schema(node: Any) -> bool:
    return isinstance(node, dict) and (
        node.get("type") == "null" or node.get("type") == ["null"] or node.get("enum") == [None]
    )


def _bounded_pattern(pattern: Any) -> bool:
    """True for an anchored pattern with no unbounded repetition (``^c-[0-9]{1,10}$``)."""
    if not isinstance(pattern, str) or not pattern.startswith("^"):
        return False
    core = re.sub(r"\\.", "x", pattern)  # escaped characters are literals
    core = re.sub(r"\[[^\]]*\]", "x", core)  # so are character classes
    if not core.endswith("$") or "|" in core:
        return False
    return not re.search(r"[*+]|\{\d*,\}", core)


def _path_input(
    converter: SchemaConverter, param: dict[str, Any], pointer: str
) -> tuple[str, dict[str, Any]]:
    """A path parameter as a required input: its template-safe name and its schema."""
    pname = param["name"]
    input_name = input_name_of(pname)
    if is_url_name(pname):
        raise Refused(pointer, f"{pname!r} names a URL: generic passthrough")
    schema = param.get("schema", {"type": "string"})
    try:
        return input_name, converter.convert(
            schema, f"{pointer}/schema", name=input_name, identifier=True
        )
    except FreeForm as exc:
        if exc.refusal:  # a URL, a pattern that is not linear-time
            raise Refused(exc.pointer, exc.refusal) from None
        return input_name, converter.convert(
            {"type": "string"}, f"{pointer}/schema", name=input_name, identifier=True
        )


def inputs_from_parameters(
    op: Operation, converter: SchemaConverter, warn, other: Callable[[dict[str, Any], str], str]
) -> tuple[dict[str, Any], list[str], str] | str:
    """The path parameters as required inputs, in the document's order, then the template
    variables it does not describe; the inputs, the required ones, and the target with
    its placeholders renamed to the inputs. ``other(param, pointer)`` takes every other
    parameter, and stops the walk with the reason it returns, if any."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    target = op.path
    path_params = set(re.findall(r"\{([^{}]+)\}", op.path))
    for param, pointer in op.parameters():
        pname = param["name"]
        if param["in"] != "path":
            stop = other(param, pointer)
            if stop:
                return stop
            continue
        input_name, properties[input_name] = _path_input(converter, param, pointer)
        required.append(input_name)
        if input_name != pname:
            target = target.replace("{" + pname + "}", "{" + input_name + "}")
        path_params.discard(pname)
    for missing in sorted(path_params):
        # A template variable the document never describes: a required string input.
        input_name = input_name_of(missing)
        warn(op.pointer, f"path parameter {missing!r} is not documented")
        properties[input_name] = converter.convert(
            {"type": "string"}, op.pointer, name=input_name, identifier=True
        )
        required.append(input_name)
        target = target.replace("{" + missing + "}", "{" + input_name + "}")
    return properties, required, target
