"""The document's operations: the version checked, every path item's operations with
their parameters and answers, references followed.

``Document`` is what the stages read from: the tree, the source's name, the budget, and
the allOf merges already made.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from actions.catalog import CatalogProblem
from actions.lib.canonical import escape_pointer_token

from . import refs
from .document import Budget, OpenAPIImportError, Refused, as_dict, as_list, ptr
from .text import plain_text

METHODS = ("get", "head", "post", "put", "patch", "delete", "options", "trace")


class Document:
    def __init__(self, root: dict[str, Any], source: str, budget: Budget | None = None) -> None:
        self.root = root
        self.source = source
        self.budget = budget or Budget()
        # allOf merges by the identity of the node merged (kept alive here, so an id is
        # never reused): each schema is merged once, however often it is referenced.
        self.merged: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._check_version()
        refs.check_refs(root, source, self.budget)
        self.is_30 = str(root["openapi"]).startswith("3.0")

    def refuse(self, pointer: str, message: str) -> NoReturn:
        raise OpenAPIImportError([CatalogProblem(pointer, message)], self.source)

    def _check_version(self) -> None:
        root = self.root
        if "swagger" in root:
            self.refuse(
                "/swagger",
                f"Swagger {root['swagger']!r} is not imported (Swagger 2.0 is converted; "
                "other versions are not)",
            )
        version = root.get("openapi")
        if not isinstance(version, str):
            self.refuse("/openapi", "not an OpenAPI document: 'openapi: 3.x.y' is missing")
        if not re.fullmatch(r"3\.[01]\.\d+(-[A-Za-z0-9.]+)?", version):
            self.refuse("/openapi", f"OpenAPI {version} is not supported (3.0.x and 3.1.x are)")
        if not isinstance(root.get("paths"), dict) or not root["paths"]:
            self.refuse("/paths", "the document has no paths: nothing to import")

    def deref(
        self, node: Any, pointer: str, stack: tuple[str, ...] = ()
    ) -> tuple[Any, str, tuple[str, ...]]:
        """Follow ``$ref`` chains (see ``refs.deref``), spending from the budget."""
        return refs.deref(self.root, self.budget, node, pointer, stack)

    def operations(self) -> list[Operation]:
        out = []
        for path, item in self.root["paths"].items():
            item_pointer = ptr("paths", path)
            try:
                item, _, _ = self.deref(item, item_pointer)
            except Refused as exc:
                # A path item that refers back to itself (or to a chain too long) names
                # no operation at all: say which one, never a bare exception name.
                self.refuse(exc.pointer, f"path item {path!r}: {exc.message}")
            if not isinstance(item, dict):
                continue
            shared = as_list(item.get("parameters"))
            for method in METHODS:
                node = item.get(method)
                if isinstance(node, dict):
                    out.append(Operation(self, path, method, node, shared, item_pointer))
        return out


class Operation:
    def __init__(
        self,
        doc: Document,
        path: str,
        method: str,
        node: dict[str, Any],
        shared: list[Any],
        item_pointer: str,
    ) -> None:
        self.doc = doc
        self.path = path
        self.method = method
        self.node = node
        self.pointer = f"{item_pointer}/{method}"
        self._shared = shared
        self._item_pointer = item_pointer
        op_id = node.get("operationId")
        self.operation_id = op_id if isinstance(op_id, str) else ""
        self.label = f"{method.upper()} {path}"

    def describe(self) -> str:
        return f"{self.operation_id}: {self.label}" if self.operation_id else self.label

    def text(self, key: str) -> str:
        """The operation's summary or description as plain text (some are HTML)."""
        value = self.node.get(key)
        return plain_text(value) if isinstance(value, str) else ""

    def parameters(self) -> list[tuple[dict[str, Any], str]]:
        """Path-level parameters overridden by operation-level ones, references followed."""
        merged: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
        lists = [
            (self._shared, f"{self._item_pointer}/parameters"),
            (as_list(self.node.get("parameters")), f"{self.pointer}/parameters"),
        ]
        for params, base in lists:
            for i, raw in enumerate(params):
                param, pointer, _ = self.doc.deref(raw, f"{base}/{i}")
                if not isinstance(param, dict) or not isinstance(param.get("name"), str):
                    raise Refused(pointer, "a parameter needs a name")
                if param.get("in") not in ("path", "query", "header", "cookie"):
                    raise Refused(pointer, f"parameter {param['name']!r} has no valid 'in'")
                merged[(param["name"], param["in"])] = (param, pointer)
        return list(merged.values())

    def responses(self) -> dict[str, tuple[dict[str, Any], str]]:
        out = {}
        for code, raw in as_dict(self.node.get("responses")).items():
            response, pointer, _ = self.doc.deref(raw, f"{self.pointer}/responses/{code}")
            if isinstance(response, dict):
                out[str(code).upper()] = (response, pointer)
        return out

    def response_headers(self, code_prefix: str) -> set[str]:
        names = set()
        for code, (response, _pointer) in self.responses().items():
            if code.startswith(code_prefix):
                for name in as_dict(response.get("headers")):
                    names.add(name.lower())
        return names

    def success_schema(self) -> tuple[Any, str] | None:
        for code, (response, pointer) in sorted(self.responses().items()):
            if not code.startswith("2"):
                continue
            for media, content in as_dict(response.get("content")).items():
                if _is_json(media) and isinstance(content, dict) and "schema" in content:
                    return content["schema"], f"{pointer}/content/{escape_pointer_token(media)}"
        return None

    def json_response(self, codes: tuple[str, ...]) -> tuple[Any, str, str] | None:
        """The JSON schema of the first of ``codes`` that documents one: (schema, its
        pointer, the code)."""
        responses = self.responses()
        for code in codes:
            if code not in responses:
                continue
            response, pointer = responses[code]
            for media, content in as_dict(response.get("content")).items():
                if _is_json(media) and isinstance(content, dict) and "schema" in content:
                    where = f"{pointer}/content/{escape_pointer_token(media)}/schema"
                    return content["schema"], where, code
        return None


def _is_json(media_type: str) -> bool:
    base = media_type.split(";")[0].strip().lower()
    return base == "application/json" or base.endswith("+json")
