"""Loading catalog files: validate everything first, then write all of it or nothing."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .canonical import CanonicalJSONError, digest, escape_pointer_token, normalize
from .models import Action, Connector

SCHEMA_PATH = Path(__file__).with_name("catalog.schema.json")
_PATH_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class CatalogProblem:
    pointer: str
    message: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.message}"


class CatalogError(Exception):
    def __init__(self, source: str, problems: list[CatalogProblem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(str(p) for p in problems))


@dataclass
class LoadReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    connectors: list[str] = field(default_factory=list)


def catalog_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


# libyaml's safe loader when PyYAML was built with it: the same documents, ~10x faster.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_catalog_text(text: str, source: str) -> dict[str, Any]:
    try:
        document = yaml.load(text, Loader=_SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise CatalogError(
            source,
            [CatalogProblem("", f"not valid YAML at {where}: {getattr(exc, 'problem', exc)}")],
        ) from None
    if not isinstance(document, dict):
        raise CatalogError(source, [CatalogProblem("", "the file must hold a mapping")])
    return document


def _pointer(path) -> str:
    return "".join(f"/{escape_pointer_token(p)}" for p in path)


def validate_catalog(document: dict[str, Any], source: str) -> None:
    """Raise CatalogError with every problem found; return quietly if the file is sound."""
    problems: list[CatalogProblem] = []
    validator = Draft202012Validator(catalog_schema())
    for error in sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path)):
        problems.append(CatalogProblem(_pointer(error.absolute_path), error.message))
    if problems:
        raise CatalogError(source, problems)

    known_connectors = set(document.get("connectors", {})) | set(
        Connector.objects.values_list("name", flat=True)
    )
    for name, action in (document.get("actions") or {}).items():
        base = f"/actions/{escape_pointer_token(name)}"
        problems.extend(_check_action(base, action, known_connectors))
    if problems:
        raise CatalogError(source, problems)


def _check_action(base: str, action: dict[str, Any], connectors: set[str]) -> list[CatalogProblem]:
    out: list[CatalogProblem] = []

    def problem(where: str, message: str) -> None:
        out.append(CatalogProblem(base + where, message))

    if action["connector"] not in connectors:
        problem("/connector", f"unknown connector {action['connector']!r}")
    schema = action["input_schema"]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        problem("/input_schema", f"not a valid JSON Schema: {exc.message}")
        return out
    try:
        normalize(action)
    except CanonicalJSONError as exc:
        problem(exc.pointer, exc.message)
    if schema.get("type") != "object":
        problem("/input_schema/type", "the input must be an object")
    if schema.get("additionalProperties") is not False:
        problem(
            "/input_schema/additionalProperties",
            "must be false: unknown fields are refused, never dropped",
        )
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    kind = action["kind"]
    write = action["write"]
    paths = [("/target", action["target"]), ("/write/path", write.get("path", ""))]
    if isinstance(action.get("read"), dict):
        paths.append(("/read/path", action["read"].get("path", "")))
    for where, template in paths:
        for key in _PATH_FIELD.findall(template):
            if key not in properties:
                problem(where, f"path field {key!r} is not an input property")
            elif key not in required:
                problem(where, f"path field {key!r} must be a required input property")
        leftover = _PATH_FIELD.sub("", template)
        if "{" in leftover or "}" in leftover:
            problem(where, "unbalanced braces in path template")
    body_fields = _template_inputs(write.get("body"))
    for key in body_fields:
        if key not in properties:
            problem("/write/body", f"{{'$input': {key!r}}} names no input property")
    precondition = write.get("precondition", "none")
    has_read = kind != "invoke" and action.get("read", {}) is not None
    if kind in {"update", "replace", "delete"} and not has_read:
        problem("/read", f"a {kind} must read its target (for the preview and revalidation)")
    if kind == "invoke" and action.get("read") not in (None,) and "read" in action:
        problem("/read", "an invoke has no readable state; remove read")
    if kind in {"create", "update", "replace", "invoke"} and write.get("body") is None:
        problem("/write/body", f"a {kind} needs a body template")
    if kind == "delete" and write.get("body") is not None:
        problem("/write/body", "a delete sends no body")
    if precondition == "if_match" and (
        kind in {"create", "invoke"} or _version_source(action) != "etag"
    ):
        problem("/write/precondition", "if_match needs an existing target versioned by ETag")
    if precondition == "if_none_match" and kind != "create":
        problem("/write/precondition", "if_none_match is for create")
    if precondition == "field" and (
        kind in {"create", "invoke"} or _version_source(action) == "etag"
    ):
        problem("/write/precondition", "field needs a target versioned by a body field or hash")
    if precondition == "field" and not isinstance(write.get("body"), dict):
        problem("/write/precondition_field", "needs an object body to carry the expected version")
    if kind == "update" and not isinstance(write.get("body"), dict):
        problem("/write/body", "an update's body is a JSON merge patch object")
    return out


def _version_source(action: dict[str, Any]) -> str:
    return (action.get("version") or {"source": "hash"})["source"]


def _template_inputs(template: Any) -> set[str]:
    if isinstance(template, dict):
        if set(template) == {"$input"}:
            return {str(template["$input"])}
        return set().union(*(_template_inputs(v) for v in template.values())) if template else set()
    if isinstance(template, list):
        return set().union(*(_template_inputs(v) for v in template)) if template else set()
    return set()


def load_catalog(
    text: str, *, source: str = "<catalog>", base_urls: dict[str, str] | None = None
) -> LoadReport:
    """Validate and apply a catalog file in one transaction.

    An action whose definition changed gets a new version (and digest): plans previewed
    under the old definition can no longer be approved or executed.
    """
    document = parse_catalog_text(text, source)
    for name, url in (base_urls or {}).items():
        document.setdefault("connectors", {}).setdefault(name, {})["base_url"] = url
    validate_catalog(document, source)
    report = LoadReport()
    with transaction.atomic():
        for name, spec in (document.get("connectors") or {}).items():
            timeouts = spec.get("timeouts") or {}
            Connector.objects.update_or_create(
                name=name,
                defaults={
                    "base_url": spec["base_url"].rstrip("/"),
                    "connect_timeout": timeouts.get("connect", 3.0),
                    "read_timeout": timeouts.get("read", 10.0),
                },
            )
            report.connectors.append(name)
        for name, definition in (document.get("actions") or {}).items():
            definition = normalize(definition)
            new_digest = digest(definition)
            connector = Connector.objects.get(name=definition["connector"])
            fields = {
                "title": definition["title"],
                "description": definition.get("description", ""),
                "connector": connector,
                "kind": definition["kind"],
                "consequence_class": definition["consequence_class"],
                "definition": definition,
                "digest": new_digest,
                "enabled": definition.get("enabled", True),
            }
            existing = Action.objects.select_for_update().filter(name=name).first()
            if existing is None:
                Action.objects.create(name=name, version=1, **fields)
                report.created.append(name)
            elif existing.digest == new_digest and existing.enabled == fields["enabled"]:
                report.unchanged.append(name)
            else:
                if existing.digest != new_digest:
                    fields["version"] = existing.version + 1
                for key, value in fields.items():
                    setattr(existing, key, value)
                existing.save()
                report.updated.append(name)
    return report
