"""An MCP action's definition checked on its own terms (``tool:`` in the catalog): its
connector is an MCP server, its preview recipe fits its change kind, its templates name
only input fields, and a write with no preview is at least external (docs/mcp-upstreams.md).
The checks every action shares (input schema, card, results) are definitions.py's."""

from __future__ import annotations

import re
from typing import Any

from ..spec import pattern_problem
from .problems import CatalogProblem

_LABEL_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# The classes a write with no computed preview may have: a person always decides it.
NO_PREVIEW_CLASSES = ("external", "irreversible")
WRITE_KINDS = ("create", "update", "replace", "delete", "invoke")


def template_inputs(template: Any) -> set[str]:
    """The input fields a JSON template names with ``{"$input": ...}``."""
    if isinstance(template, dict):
        if set(template) == {"$input"} and isinstance(template["$input"], str):
            return {template["$input"]}
        return set().union(*(template_inputs(v) for v in template.values()))
    if isinstance(template, list):
        return set().union(*(template_inputs(v) for v in template))
    return set()


def check_mcp_action(
    base: str, action: dict[str, Any], properties: dict[str, Any], mcp_connectors: set[str]
) -> list[CatalogProblem]:
    out: list[CatalogProblem] = []

    def problem(where: str, message: str) -> None:
        out.append(CatalogProblem(base + where, message))

    kind = action["kind"]
    cls_name = action["consequence_class"]
    preview = action.get("preview")
    if action["connector"] not in mcp_connectors:
        problem("/tool", "a tool is called on an MCP server: this connector is not one (mcp:)")
    for where, template in (
        ("/arguments", action.get("arguments")),
        ("/preview/read/arguments", ((preview or {}).get("read") or {}).get("arguments")),
        ("/preview/document", (preview or {}).get("document")),
    ):
        for name in sorted(template_inputs(template)):
            if name not in properties:
                problem(where, f"{{'$input': {name!r}}} names no input property")
    for name in _LABEL_FIELD.findall(action.get("target", "")):
        if name not in properties:
            problem("/target", f"label field {name!r} is not an input property")
    if (action.get("version") or {}).get("source") == "etag":
        problem("/version/source", "an MCP tool's result has no ETag: use hash or field")
    for name, field in (action.get("result") or {}).items():
        if "header" in field or "status" in field:
            problem(
                f"/result/{name}",
                "an MCP result field is read from the structured content or the JSON "
                "text, by pointer",
            )
    if kind == "read":
        if preview is not None:
            problem("/preview", "a read is itself a read: it has no preview recipe")
        return out
    if preview is None:
        problem("/preview", "say how the preview is made: paired_read, dry_run or none")
        return out
    recipe = preview["recipe"]
    if recipe == "none":
        if kind != "invoke":
            problem("/kind", "a write with no preview computes no change: its kind is invoke")
        if cls_name not in NO_PREVIEW_CLASSES:
            problem(
                "/consequence_class",
                "a write with no preview is at least external: a person always decides it",
            )
    elif recipe == "dry_run":
        if kind not in WRITE_KINDS:
            problem("/kind", f"a dry run previews a write, not a {kind}")
        schema = ((action.get("input_schema") or {}).get("properties") or {}).get(
            preview["argument"]
        )
        if schema is not None:
            problem(
                f"/input_schema/properties/{preview['argument']}",
                "the dry-run flag is Countersign's to set: the agent cannot send it",
            )
    elif recipe == "paired_read":
        problems_of_paired(kind, preview, problem)
    return out


def problems_of_paired(kind: str, preview: dict[str, Any], problem) -> None:
    if kind == "invoke":
        problem("/kind", "an invoke has no readable state to pair a read with")
    read = preview["read"]
    if read["tool"] == "":
        problem("/preview/read/tool", "name the read tool")
    for key in ("error_matches", "text_matches"):
        pattern = (read.get("absent_when") or {}).get(key)
        if pattern is not None and (why := pattern_problem(pattern)):
            problem(f"/preview/read/absent_when/{key}", why)
    document = preview.get("document")
    if kind in ("create", "replace", "update") and "document" not in preview:
        problem("/preview/document", f"a {kind} says what the target is after it: a document")
    if kind == "delete" and "document" in preview:
        problem("/preview/document", "a delete leaves no document")
    if kind == "update" and not isinstance(document, dict):
        problem("/preview/document", "an update's document is an object merged into the target")
    if "merge" in preview and kind != "update":
        problem("/preview/merge", "merge is how an update joins the target")
