"""Writing the catalog back to its file format.

``load_catalog(export_catalog())`` changes nothing: every action keeps its digest, so
its version too. The output is deterministic (connectors and actions by name, keys in
the order the catalog schema lists them, everything else sorted), so two exports of
the same state are the same text and a diff between exports shows real changes only.

Credentials are never exported; the catalog file format has no place for them.
"""

from __future__ import annotations

from typing import Any

import yaml

from .catalog import catalog_schema
from .models import Action, Connector, DecisionRule
from .policy.reviewers import section_groups
from .policy.sources import required_groups
from .policy.versions import policy_version_current

HEADER = (
    "# Countersign catalog, exported. Load it with `manage.py load_catalog FILE`.\n"
    "# Credentials are not part of the file: store them with `manage.py set_credential`.\n"
)

# The keywords of a JSON Schema in the order people usually write them; the rest sorted.
_SCHEMA_KEYWORDS = (
    "$schema",
    "$id",
    "title",
    "description",
    "type",
    "const",
    "enum",
    "format",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "items",
    "additionalProperties",
    "required",
    "properties",
    "$defs",
)
_SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
_SCHEMA_ONE = {
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
}
_SCHEMA_LISTS = {"allOf", "anyOf", "oneOf", "prefixItems"}
# Stands for "this value is a JSON Schema" while walking the catalog schema.
_JSON_SCHEMA: dict[str, Any] = {"x-json-schema": True}


class ExportError(Exception):
    pass


def export_catalog(*, connectors: list[str] | None = None) -> str:
    """The catalog as YAML in the file format: all connectors, or only those named, with
    their actions. Definitions are written exactly as stored."""
    connector_rows = Connector.objects.order_by("name")
    if connectors is not None:
        connector_rows = connector_rows.filter(name__in=connectors)
        missing = sorted(set(connectors) - {c.name for c in connector_rows})
        if missing:
            raise ExportError(f"unknown connectors: {', '.join(missing)}")
    connector_rows = list(connector_rows)
    actions = list(
        Action.objects.filter(connector__in=connector_rows)
        .order_by("name")
        .only("name", "definition", "class_confirmed")
    )
    document: dict[str, Any] = {
        "version": 1,
        "connectors": {c.name: _connector_entry(c) for c in connector_rows},
        "actions": {a.name: a.definition for a in actions},
    }
    header = HEADER
    unconfirmed = [a.name for a in actions if not a.class_confirmed]
    if unconfirmed:
        # The review state travels with the file: loading it keeps these unconfirmed
        # (and so disabled) instead of taking the file as a person's statement.
        document["unconfirmed_classes"] = unconfirmed
        header += (
            "# Consequence class not yet confirmed in Countersign (review before enabling): "
            + ", ".join(unconfirmed)
            + "\n"
        )
    if connectors is None:
        # Decision rules travel with the whole catalog only: a part of it may lack the
        # actions a rule names.
        rules = list(DecisionRule.objects.order_by("name").values_list("name", "definition"))
        if rules:
            document["reviewers"] = {
                "groups": sorted(section_groups({"rules": dict(rules)})),
                "rules": dict(rules),
            }
        # The policy set in force, each part inline (a file's policies were read into
        # it when it was loaded), with the groups its @require name: loading the export
        # makes no new version.
        current = policy_version_current()
        if current is not None:
            groups = required_groups(current.enforce) | required_groups(current.shadow)
            document["policies"] = {
                **({"groups": sorted(groups)} if groups else {}),
                **{
                    part: [{"text": text}] if text else []
                    for part, text in (("enforce", current.enforce), ("shadow", current.shadow))
                },
            }
    root = _ordering_schema()
    return header + _dump(_ordered(document, root, root["$defs"]))


def definition_text(definition: dict[str, Any]) -> str:
    """One action's definition as YAML, ordered the way export_catalog orders it."""
    defs = _ordering_schema()["$defs"]
    return _dump(_ordered(definition, defs["action"], defs))


def _connector_entry(connector: Connector) -> dict[str, Any]:
    if connector.kind == Connector.Kind.MCP:
        server = connector.server or {}
        if server.get("transport") == "http":
            address = {"url": server["url"], "headers": dict(server.get("headers") or {})}
        else:
            address = {
                "command": server.get("command", ""),
                "args": list(server.get("args") or []),
                "env": dict(server.get("env") or {}),
                "cwd": server.get("cwd", ""),
            }
        entry: dict[str, Any] = {"mcp": {k: v for k, v in address.items() if v or k == "command"}}
    else:
        entry = {"base_url": connector.base_url}
    return {
        **entry,
        "timeouts": {
            "connect": _number(connector.connect_timeout),
            "read": _number(connector.read_timeout),
        },
    }


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


# --- ordering ------------------------------------------------------------------------


def _ordering_schema() -> dict[str, Any]:
    """The catalog schema, with input_schema and document marked as JSON Schemas to order
    as such."""
    schema = catalog_schema()
    action = schema.get("$defs", {}).get("action", {})
    for key in ("input_schema", "document"):
        if key in action.get("properties", {}):
            action["properties"][key] = _JSON_SCHEMA
    return schema


def _resolve(schema: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    seen = 0
    while "$ref" in schema and seen < 10:
        schema = defs.get(schema["$ref"].rsplit("/", 1)[-1], {})
        seen += 1
    for branch in schema.get("oneOf") or schema.get("anyOf") or []:
        branch = _resolve(branch, defs)
        if "properties" in branch:
            return branch
    return schema


def _ordered(value: Any, schema: Any, defs: dict[str, Any]) -> Any:
    """``value`` with its mappings rebuilt in a stable key order (dicts keep insertion
    order, and the YAML dumper is told not to sort)."""
    if schema is _JSON_SCHEMA:
        return _ordered_json_schema(value)
    schema = _resolve(schema, defs)
    if isinstance(value, dict) and set(value) == {"$input"}:
        return _Flow(value)  # a body template's placeholder reads best inline
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keys = [k for k in properties if k in value] + sorted(
            k for k in value if k not in properties
        )
        out = {}
        for key in keys:
            if key in properties:
                sub = properties[key]
            else:
                sub = extra if isinstance(extra, dict) else {}
            out[key] = _ordered(value[key], sub, defs)
        return out
    if isinstance(value, list):
        items = schema.get("items")
        return [_ordered(item, items if isinstance(items, dict) else {}, defs) for item in value]
    return value


def _ordered_json_schema(value: Any) -> Any:
    if not isinstance(value, dict):
        return _ordered(value, {}, {}) if isinstance(value, list) else value
    rank = {k: i for i, k in enumerate(_SCHEMA_KEYWORDS)}
    keys = sorted(value, key=lambda k: (rank.get(k, len(rank)), k))
    out: dict[str, Any] = {}
    for key in keys:
        item = value[key]
        if key in _SCHEMA_MAPS and isinstance(item, dict):
            out[key] = {name: _ordered_json_schema(item[name]) for name in sorted(item)}
        elif key in _SCHEMA_ONE and isinstance(item, dict):
            out[key] = _ordered_json_schema(item)
        elif key in _SCHEMA_LISTS and isinstance(item, list):
            out[key] = [_ordered_json_schema(sub) for sub in item]
        else:
            out[key] = _ordered(item, {}, {})
    return out


# --- YAML ----------------------------------------------------------------------------


class _Flow(dict):
    pass


class _Dumper(yaml.SafeDumper):
    """The pure-Python safe dumper (not libyaml's), so the text is the same wherever
    it runs; block sequences indented under their key, as people write them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False):
        return super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str):
    # Multi-line text (descriptions, messages) stays readable as a literal block; the
    # emitter falls back to a quoted scalar where a block cannot hold the value exactly.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(
    _Flow,
    lambda dumper, value: dumper.represent_mapping(
        "tag:yaml.org,2002:map", dict(value), flow_style=True
    ),
)


def _dump(document: Any) -> str:
    return yaml.dump(
        document,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )
