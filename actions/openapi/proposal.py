"""What every proposal shares: the import's setting, the document's x-countersign
declarations, and the draft a proposal makes before the catalog checks it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from .document import Refused, problem_at, ptr
from .operations import Document, Operation

KINDS = ["create", "update", "replace", "delete", "invoke"]
CLASSES = ["observation", "reversible", "external", "irreversible"]
# Headers the executor sets itself (conditions, the idempotency key, credentials, media
# types); every other documented header is not forwarded.
HANDLED_HEADERS = {"if-match", "if-none-match", "authorization", "content-type", "accept"}

X_COUNTERSIGN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,63}$"},
        "kind": {"enum": KINDS},
        "class": {"enum": CLASSES},
        "card": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                key: {"type": "string", "maxLength": 500}
                for key in ("effect", "scope", "result", "consent", "retry")
            },
        },
        "version": {
            "type": "object",
            "additionalProperties": False,
            "required": ["source"],
            "properties": {
                "source": {"enum": ["etag", "field", "hash"]},
                "field": {"type": "string", "pattern": "^(/[^/]+)+$"},
            },
        },
        "precondition_field": {"type": "string", "pattern": "^(/[^/]+)+$"},
        "retry": {
            "oneOf": [
                {"const": "never"},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["idempotency_header"],
                    "properties": {
                        "idempotency_header": {
                            "type": "string",
                            "pattern": "^[A-Za-z][A-Za-z0-9-]{0,63}$",
                        }
                    },
                },
            ]
        },
        "status_operation": {"type": "string", "minLength": 1, "maxLength": 200},
        # When accepted work is done (and failed): the catalog's status rules. The path
        # comes from the document (the 202's Location, or the status operation's path).
        "status": {
            "type": "object",
            "additionalProperties": False,
            "required": ["done_when"],
            "properties": {
                "done_when": {"type": "object"},
                "failed_when": {"type": "object"},
                "max_checks": {"type": "integer", "minimum": 1, "maximum": 50},
            },
        },
        "headers": {
            "type": "object",
            "maxProperties": 10,
            "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9-]{0,63}$"},
            "additionalProperties": {"type": "string", "pattern": "^[\\x20-\\x7E]{0,200}$"},
        },
    },
}


@dataclass(frozen=True)
class Setting:
    """What every proposal of one import reads: the document, the connector and the
    options, and the document's GETs (by path, and by operationId)."""

    doc: Document
    connector: str
    prefix: str
    headers: dict[str, str]  # the values of documented headers, by lower-case name
    gets_by_path: dict[str, Operation]
    gets_by_id: dict[str, Operation]

    @classmethod
    def of(
        cls,
        doc: Document,
        operations: list[Operation],
        *,
        connector: str,
        prefix: str,
        headers: dict[str, str],
    ) -> Setting:
        gets = [op for op in operations if op.method == "get"]
        return cls(
            doc=doc,
            connector=connector,
            prefix=prefix,
            headers={name.lower(): value for name, value in headers.items()},
            gets_by_path={op.path: op for op in gets},
            gets_by_id={op.operation_id: op for op in gets},
        )


def add_warning(warnings: list[dict[str, str]], pointer: str, message: str) -> None:
    """A warning, said once however often it is found."""
    item = problem_at(pointer, message)
    if item not in warnings:
        warnings.append(item)


@dataclass
class Draft:
    op: Operation
    name: str
    kind: str
    consequence_class: str
    class_source: str
    class_lowered_from: str
    definition: dict[str, Any]
    warnings: list[dict[str, str]]
    status_operation: str
    # The proposed read its check_with names, and the result fields added only for it
    # (both dropped if that read is not proposed after all).
    check_read: Draft | None = None
    link_fields: tuple[str, ...] = ()
    card_result_drafted: bool = False
    # After the catalog's checks: "accepted" (to be stored), "kept" (an admin reviewed
    # the stored action, which stays as it is) or "refused".
    outcome: str = ""

    def warn(self, pointer: str, message: str) -> None:
        add_warning(self.warnings, pointer, message)


def x_countersign(op: Operation) -> dict[str, Any]:
    raw = op.node.get("x-countersign")
    if raw is None:
        return {}
    base = f"{op.pointer}/x-countersign"
    validator = Draft202012Validator(X_COUNTERSIGN_SCHEMA)
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        raise Refused(base + ptr(*error.absolute_path), f"x-countersign: {error.message}")
    return raw
