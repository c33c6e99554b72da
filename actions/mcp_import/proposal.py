"""One MCP tool turned into a proposed action: its kind and consequence class from the
tool's annotations, its input schema made strict, its preview recipe, and a sentence for
each decision (the report says why, a person confirms).

The annotations are the server's word, not a guarantee, and the MCP specification's
defaults for a missing hint are the pessimistic ones: not read-only, destructive, open
world. So a tool that says nothing is proposed as an irreversible write that a person
always decides, never as a read.

Recipes: a boolean ``dryRun`` / ``dry_run`` / ``dryrun`` argument (only-show value true)
or ``confirmar`` (only-show value false) is the tool's own dry run; Countersign sets it,
so it leaves the agent's input schema. Otherwise the write has no preview (``recipe:
none``, kind invoke, class at least external): a paired read is never proposed, because
what the target is after the write (``preview.document``) cannot be known from a schema;
a candidate read tool is named in the report for the person who writes it."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any

from actions.lib.canonical import escape_pointer_token
from actions.lib.redaction import filter_text
from actions.spec import pattern_problem

MAX_STRING = 10_000
MAX_ITEMS = 1_000
MAX_DESCRIPTION = 2_000
MAX_RESULT_FIELDS = 20
SCALARS = ("string", "integer", "number", "boolean")
# name: the value that means "only show"
DRY_RUN_ARGUMENTS = {"dryRun": True, "dry_run": True, "dryrun": True, "confirmar": False}
ORDER = ("observation", "reversible", "external", "irreversible")
_ID_NAME = re.compile(r"(^id$|_id$|Id$)")
# Control characters (C0 but newline, DEL, C1) and bidi controls: a tool's title, a
# name or a refusal quoting its schema must not drive a terminal or reorder the text.
UNPRINTABLE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
IDENTIFIER_PATTERN = "^[A-Za-z0-9_.:@/-]{1,200}$"


@dataclass
class ToolProposal:
    """What the import proposes for one tool, and why."""

    tool: str
    name: str
    kind: str = ""
    consequence_class: str = ""
    recipe: str = ""
    definition: dict[str, Any] = field(default_factory=dict)
    why: list[str] = field(default_factory=list)
    lint: list[dict[str, str]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    paired_candidate: str = ""
    stored: str | None = None  # "created" | "updated" | "unchanged" | "kept"

    def note(self, pointer: str, message: str) -> None:
        self.lint.append({"pointer": pointer, "message": message})


def action_name(connector: str, tool: str) -> str:
    """``<connector>_<tool>`` as a catalog slug: lowercase, other characters as ``_``."""
    raw = f"{connector}_{tool}".lower()
    name = re.sub(r"_+", "_", re.sub(r"[^a-z0-9_-]", "_", raw)).strip("_-")
    if not name or not name[0].isalpha():
        name = "t_" + name
    return name[:64].rstrip("_-")


def hints(tool: dict[str, Any]) -> tuple[bool, bool, bool, list[str]]:
    """(read only, destructive, open world, what decided) with the spec's defaults."""
    annotations = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
    said: list[str] = []

    def hint(key: str, default: bool) -> bool:
        value = annotations.get(key)
        if isinstance(value, bool):
            said.append(f"{key}={str(value).lower()}")
            return value
        said.append(f"{key} absent (default {str(default).lower()})")
        return default

    return (
        hint("readOnlyHint", False),
        hint("destructiveHint", True),
        hint("openWorldHint", True),
        said,
    )


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, list):
        return {str(t) for t in kind}
    return {str(kind)} if kind is not None else set()


def strict_schema(schema: Any, proposal: ToolProposal) -> dict[str, Any]:
    """The tool's input schema with every loose part bounded: closed objects, bounded
    strings and arrays. What cannot be made strict is removed and said in the lint (the
    action stays disabled until a person looks)."""
    if not isinstance(schema, dict):
        proposal.note("/input_schema", "the tool declared no input schema: it takes none")
        schema = {}
    out = copy.deepcopy(schema)
    out.pop("$schema", None)
    out.setdefault("type", "object")
    stack: list[tuple[Any, str]] = [(out, "/input_schema")]
    while stack:
        node, here = stack.pop()
        if not isinstance(node, dict):
            continue
        types = _types(node)
        constrained = "enum" in node or "const" in node
        if "patternProperties" in node:
            node.pop("patternProperties")
            proposal.note(
                f"{here}/patternProperties",
                "patternProperties cannot be made strict: removed, so fields named only by "
                "a pattern are refused; name them if the tool needs them",
            )
        if isinstance(node.get("pattern"), str) and (why := pattern_problem(node["pattern"])):
            node.pop("pattern")
            proposal.note(
                f"{here}/pattern",
                f"the tool's pattern cannot be matched in linear time ({why}): removed; "
                "the server still checks it, write one RE2 accepts",
            )
        if "object" in types or "properties" in node:
            extra = node.get("additionalProperties")
            if extra is not False:
                if isinstance(extra, dict) or extra is True:
                    proposal.note(
                        f"{here}/additionalProperties",
                        "a free-form object cannot be made strict: it now takes only its "
                        "named fields",
                    )
                node["additionalProperties"] = False
            for name, sub in (node.get("properties") or {}).items():
                where = f"{here}/properties/{escape_pointer_token(name)}"
                if (
                    isinstance(sub, dict)
                    and _ID_NAME.search(name)
                    and _types(sub) == {"string"}
                    and not any(k in sub for k in ("pattern", "enum", "const", "format"))
                ):
                    sub["pattern"] = IDENTIFIER_PATTERN
                    proposal.note(where, f"identifier {name!r}: a pattern was proposed, check it")
                stack.append((sub, where))
        if "string" in types and not constrained and "maxLength" not in node:
            node["maxLength"] = MAX_STRING
        if "array" in types:
            if "maxItems" not in node and not constrained:
                node["maxItems"] = MAX_ITEMS
            stack.append((node.get("items"), f"{here}/items"))
        for key in ("anyOf", "oneOf", "allOf"):
            for i, sub in enumerate(node.get(key) or []):
                stack.append((sub, f"{here}/{key}/{i}"))
        for key in ("$defs", "definitions"):
            for name, sub in (node.get(key) or {}).items():
                stack.append((sub, f"{here}/{key}/{escape_pointer_token(name)}"))
    return out


def dry_run_argument(schema: dict[str, Any]) -> tuple[str, bool] | None:
    """The tool's own "only show" flag, if its input has one: (name, only-show value)."""
    properties = schema.get("properties") or {}
    for name, value in DRY_RUN_ARGUMENTS.items():
        sub = properties.get(name)
        if isinstance(sub, dict) and _types(sub) == {"boolean"}:
            return name, value
    return None


def result_fields(tool: dict[str, Any], proposal: ToolProposal) -> dict[str, Any]:
    """The structured content's top-level scalar fields the output schema declares."""
    schema = tool.get("outputSchema")
    if not isinstance(schema, dict):
        return {}
    out: dict[str, Any] = {}
    for name, sub in (schema.get("properties") or {}).items():
        if not isinstance(sub, dict) or len(out) >= MAX_RESULT_FIELDS:
            continue
        types = _types(sub)
        if len(types) != 1 or next(iter(types)) not in SCALARS:
            continue
        key = re.sub(r"[^a-z0-9_]", "_", re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower())
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", key) or key in out:
            proposal.note(f"/result/{escape_pointer_token(name)}", "not a result field name")
            continue
        field_spec: dict[str, Any] = {
            "type": next(iter(types)),
            "pointer": "/" + escape_pointer_token(name),
        }
        if field_spec["type"] == "string":
            field_spec["max_length"] = 4096
        out[key] = field_spec
    return out


def _card(connector: str, tool: str, kind: str, result: dict[str, Any]) -> dict[str, str]:
    fields = ", ".join(sorted(result))
    return {
        "effect": (
            f"Reads through the tool {tool} of the MCP server {connector}; changes nothing."
            if kind == "read"
            else f"Calls the tool {tool} of the MCP server {connector} once."
        ),
        "scope": "What the tool's arguments name (a person describes it before enabling).",
        "result": f"The fields {fields}." if fields else "The server's answer, as declared.",
        "consent": "A reviewer decides each call unless a policy says otherwise.",
        "retry": "Propose again after a stale or refused plan.",
    }


def propose(connector: str, tool: dict[str, Any], served: list[dict[str, Any]]) -> ToolProposal:
    """The proposal for ``tool`` (one entry of the server's tools/list)."""
    name = str(tool.get("name", ""))
    proposal = ToolProposal(tool=name, name=action_name(connector, name))
    read_only, destructive, open_world, said = hints(tool)
    proposal.why.append("hints: " + ", ".join(said))
    schema = strict_schema(tool.get("inputSchema"), proposal)
    title = UNPRINTABLE.sub(" ", filter_text(str(tool.get("title") or name), limit=190))
    description = UNPRINTABLE.sub(
        " ", filter_text(str(tool.get("description") or ""), limit=MAX_DESCRIPTION - 20)
    )
    definition: dict[str, Any] = {
        "title": title or name,
        "connector": connector,
        "tool": name,
        "enabled": False,
        "input_schema": schema,
    }
    if description:
        definition["description"] = description
    if read_only:
        proposal.kind, proposal.consequence_class, proposal.recipe = "read", "observation", "read"
        result = result_fields(tool, proposal)
        if result:
            definition["result"] = result
            proposal.why.append("read-only: an observation returning " + ", ".join(sorted(result)))
        else:
            proposal.note(
                "/result",
                "the tool declares no scalar structured fields (outputSchema): declare the "
                "result fields by hand before enabling it",
            )
            proposal.why.append("read-only, but no result can be declared: stays disabled")
    else:
        if destructive:
            cls = "irreversible"
            proposal.why.append(
                "destructive (or not said): irreversible unless a person says otherwise"
            )
        elif open_world:
            cls = "external"
            proposal.why.append("not destructive, open world: external")
        else:
            cls = "reversible"
            proposal.why.append("not destructive, closed world: reversible")
        dry = dry_run_argument(schema)
        if dry is not None:
            argument, value = dry
            schema["properties"].pop(argument)
            if argument in (schema.get("required") or []):
                schema["required"] = [r for r in schema["required"] if r != argument]
            definition["preview"] = {"recipe": "dry_run", "argument": argument, "value": value}
            proposal.kind, proposal.recipe = "update", "dry_run"
            proposal.why.append(
                f"its own dry run: {argument}={json.dumps(value)} only shows; Countersign "
                "sets it (removed from the input)"
            )
        else:
            definition["preview"] = {"recipe": "none"}
            proposal.kind, proposal.recipe = "invoke", "none"
            if ORDER.index(cls) < ORDER.index("external"):
                proposal.why.append("no preview: raised to external, a person decides each call")
                cls = "external"
            candidate = paired_candidate(tool, served)
            if candidate:
                proposal.paired_candidate = candidate
                proposal.why.append(
                    f"candidate paired read: {candidate} (not proposed: say what the target "
                    "is after the write, preview.document, to use it)"
                )
        proposal.consequence_class = cls
    definition["kind"] = proposal.kind
    definition["consequence_class"] = proposal.consequence_class
    definition["card"] = _card(connector, name, proposal.kind, definition.get("result") or {})
    proposal.definition = definition
    return proposal


def _required_types(tool: dict[str, Any]) -> dict[str, frozenset[str]] | None:
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties") or {}
    out = {}
    for name in schema.get("required") or []:
        sub = properties.get(name)
        if not isinstance(sub, dict) or not _types(sub):
            return None
        out[name] = frozenset(_types(sub))
    return out


def paired_candidate(tool: dict[str, Any], served: list[dict[str, Any]]) -> str:
    """A read-only tool whose required arguments are all among ``tool``'s required ones,
    with the same JSON types (read_text_file(path) for write_file(path, content))."""
    mine = _required_types(tool)
    if not mine:
        return ""
    found = []
    for other in served:
        annotations = other.get("annotations")
        if other is tool or not isinstance(annotations, dict):
            continue
        if annotations.get("readOnlyHint") is not True:
            continue
        theirs = _required_types(other)
        if theirs and all(mine.get(name) == types for name, types in theirs.items()):
            found.append(other)
    # A tool that calls itself deprecated is named last (only a suggestion to a person).
    found.sort(key=lambda t: "deprecated" in str(t.get("title", "")).lower())
    return str(found[0].get("name", "")) if found else ""
