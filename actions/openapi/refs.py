"""References: every ``$ref`` of a document checked before anything is imported, and
followed (chains, siblings, recursion) while it is.

Only references inside the document are followed: one that leaves it (a URL or a file)
refuses the whole document, so importing never touches the network or the file system.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from actions.catalog import CatalogProblem
from actions.lib.canonical import escape_pointer_token, resolve_pointer

from .document import MAX_REF_HOPS, MAX_SCHEMA_DEPTH, Budget, OpenAPIImportError, Refused


def check_refs(root: dict[str, Any], source: str, budget: Budget) -> None:
    """Every reference must point inside this document, at something that exists.

    Checked before anything else so that a document relying on another file or a
    URL is refused as a whole: importing never fetches or opens anything.
    """
    problems: list[CatalogProblem] = []
    stack: list[tuple[Any, str]] = [(root, "")]
    visited = 0
    while stack:
        node, pointer = stack.pop()
        visited += 1
        if not visited % 4096:
            budget.check_time(pointer)
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{pointer}/{escape_pointer_token(key)}"
                if key in ("$ref", "$dynamicRef") and not (
                    pointer.endswith("/properties") or isinstance(value, dict)
                ):
                    problem = _ref_problem(root, value)
                    if problem:
                        problems.append(CatalogProblem(here, problem))
                else:
                    stack.append((value, here))
        elif isinstance(node, list):
            stack.extend((v, f"{pointer}/{i}") for i, v in enumerate(node))
    if problems:
        problems.sort(key=lambda p: p.pointer)
        raise OpenAPIImportError(problems, source)


def _ref_problem(root: dict[str, Any], ref: Any) -> str:
    if not isinstance(ref, str):
        return "a $ref must be a string"
    if not ref.startswith("#/"):
        return (
            f"{ref!r} leaves this document: only internal references (#/...) are "
            "followed; bundle the document into one file first"
        )
    try:
        resolve(root, ref)
    except KeyError:
        return f"{ref!r} points at nothing in this document"
    return ""


def resolve(root: dict[str, Any], ref: str) -> Any:
    """What ``#/a/b`` points at (KeyError if nothing); each token may be percent-encoded,
    as in a URI fragment."""
    tokens = (unquote(raw).replace("/", "~1") for raw in ref[2:].split("/"))
    return resolve_pointer(root, "".join("/" + token for token in tokens))


def deref(
    root: dict[str, Any], budget: Budget, node: Any, pointer: str, stack: tuple[str, ...] = ()
) -> tuple[Any, str, tuple[str, ...]]:
    """Follow ``$ref`` chains; siblings of a ``$ref`` (3.1) override the target."""
    hops = 0
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        if ref in stack:
            raise Refused(
                pointer,
                f"recursive schema: {ref} refers back to itself; an action's input must be finite",
            )
        hops += 1
        if hops > MAX_REF_HOPS or len(stack) > MAX_REF_HOPS + MAX_SCHEMA_DEPTH:
            raise Refused(pointer, f"more than {MAX_REF_HOPS} references in a chain")
        budget.spend(pointer)
        stack = (*stack, ref)
        target = resolve(root, ref)
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **siblings} if siblings and isinstance(target, dict) else target
        pointer = unquote(ref[1:])
    return node, pointer, stack
