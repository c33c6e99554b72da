"""Importing an OpenAPI 3.0/3.1 document as proposed, disabled actions.

An operation is evidence about an upstream, not an action an agent may use. The importer
reads each operation and proposes the narrowest catalog definition it can defend: a
closed input schema with bounds, the read that serves the preview and revalidation, how
the version is read, the conditional write or idempotency key, and a consequence class
guessed from the method. A GET that reads one resource becomes a read action. Every
proposal declares a bounded result (the answer's top-level scalar fields) and, where the
document says so exactly (a link, or the same path), the read that checks its work. Every
proposal is stored *disabled* with its class unconfirmed; a person completes the card and
confirms the class before any agent can use it.

What cannot be made narrow is refused, not loosened: a free-form body or a URL-valued
field turns an action back into a generic request tool. The document itself is only
ever read: a ``$ref`` that leaves it (a URL or a file) refuses the whole document before
anything is looked at, so importing never touches the network or the file system.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from html.parser import HTMLParser
from typing import Any, NoReturn
from urllib.parse import quote, unquote

import yaml
from django.db import transaction
from jsonschema import Draft202012Validator

from actions.lib.audit import audit_record

from .catalog import (
    CatalogError,
    CatalogProblem,
    action_define,
    parse_catalog_text,
    result_promise_problem,
    validate_action_definition,
)
from .lib.canonical import CanonicalJSONError, digest, escape_pointer_token, normalize
from .lib.http import FORM_CONTENT_TYPE
from .models import Action, Connector
from .openapi.swagger import swagger_to_openapi
from .spec import pattern_problem

# One limit for the command line and the admin upload: the largest public documents
# (Stripe, OpenAI, PagerDuty, Twilio, Discord) are 1-7 MiB.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
# Bounds on the parsed document: YAML aliases and chains of $refs can make a small file
# expand enormously, and a large one must not hold a process for minutes.
MAX_DOCUMENT_NODES = 1_000_000
MAX_DOCUMENT_DEPTH = 200
MAX_REF_HOPS = 64  # $ref -> $ref -> ... before the target is a real object
# Bounds on one operation's input schema.
MAX_SCHEMA_DEPTH = 24
MAX_SCHEMA_NODES = 5_000
# Bounds on the whole import: schema nodes visited (converting, merging allOf, following
# references) and seconds. Real documents need a few hundred thousand nodes at most.
MAX_IMPORT_WORK = 3_000_000
MAX_IMPORT_SECONDS = 20.0
# libyaml's event parser when PyYAML was built with it (it also caps nesting at 1000).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

METHODS = ("get", "head", "post", "put", "patch", "delete", "options", "trace")
WRITE_METHODS = {"post", "put", "patch", "delete"}
DEFAULT_KIND = {"post": "invoke", "put": "replace", "patch": "update", "delete": "delete"}
DEFAULT_CLASS = {
    "post": "external",
    "put": "reversible",
    "patch": "reversible",
    "delete": "irreversible",
}
KINDS = ["create", "update", "replace", "delete", "invoke"]
CLASSES = ["observation", "reversible", "external", "irreversible"]

IDENTIFIER_PATTERN = "^[A-Za-z0-9_.-]{1,100}$"
SAFE_INTEGER = 2**53 - 1
DEFAULT_MAX_LENGTH = 200
DEFAULT_MAX_ITEMS = 100
# Verbs that say "something happens" without saying what: a summary built on one hides
# the effect from the reviewer and from the agent.
VAGUE_VERBS = {"manage", "process", "handle", "do", "execute", "perform", "administer"}
URL_FORMATS = {"uri", "url", "uri-reference", "iri", "iri-reference", "uri-template"}
URL_NAMES = {"url", "uri", "href", "endpoint", "callback", "webhook"}
URL_SUFFIXES = ("_url", "_uri", "_endpoint", "_href")
VERSION_FIELDS = ("version", "revision", "etag", "_version", "_rev", "rev")
# Headers the executor sets itself (conditions, the idempotency key, credentials, media
# types); every other documented header is not forwarded.
HANDLED_HEADERS = {"if-match", "if-none-match", "authorization", "content-type", "accept"}
IDEMPOTENCY_HEADERS = {"idempotency-key", "x-idempotency-key"}
# What a proposed result declares: the answer's top-level scalar fields, ids first, at
# most as many as the catalog allows (result: maxProperties); nested objects and arrays
# are added by a person who knows which of them the agent needs.
MAX_RESULT_FIELDS = 20
# The fields of one answer looked at to choose them (real records have a few hundred at
# most): a document cannot make choosing a result cost more than this.
MAX_RESULT_CANDIDATES = 1000
MAX_RESULT_LENGTH = 4096  # the catalog's bound on max_length
MAX_RESULT_ENUM = 50  # the catalog's bound on a result field's enum
RESULT_TYPES = ("string", "integer", "number", "boolean")
# The answers a write's result is read from, in this order.
WRITE_RESULT_CODES = ("200", "201", "202")
# Proposed right after the ids: what a follow-up or a check reads.
STATE_FIELDS = {"status", "state", "version", "revision", "etag"}
# Field names that look like a secret the upstream holds for someone (a client secret,
# an API key): never proposed as something an agent receives.
_SECRET_FIELD = re.compile(r"secret|passw|token|api_?key|private_?key|credential|signature")
# An object answer that is one page of a list: an array of the records beside paging
# fields ({data: [...], has_more}, {calls: [...], page, next_page_uri}).
LIST_FIELDS = {"data", "items", "results", "records", "entries", "elements", "nodes", "edges"}
PAGE_FIELDS = {
    "has_more",
    "next",
    "next_page",
    "next_page_uri",
    "next_page_url",
    "next_cursor",
    "next_page_token",
    "cursor",
    "page",
    "page_size",
    "per_page",
    "total",
    "total_count",
    "more",
    "offset",
    "limit",
}
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


# --- results -------------------------------------------------------------------------------


@dataclass
class ProposedAction:
    name: str
    operation: str  # "PATCH /contacts/{contact_id}"
    kind: str
    consequence_class: str
    warnings: list[dict[str, str]] = field(default_factory=list)
    # "created" | "updated" | "unchanged"; None for a dry run or when not stored.
    stored: str | None = None
    class_source: str = "method"  # "method" | "x-countersign"
    # The class the method implies, when the document declared a lower one.
    class_lowered_from: str = ""
    status_operation: str = ""  # "getDeployment: GET /deployments/{id}"
    definition: dict[str, Any] = field(default_factory=dict)
    pointer: str = ""

    @property
    def result_fields(self) -> list[str]:
        """What the agent would receive: "id (string)", "state (string: queued, ...)"."""
        out = []
        for name, spec in (self.definition.get("result") or {}).items():
            text = f"{name} ({spec.get('type', '?')}"
            if spec.get("enum"):
                values = ", ".join(str(v) for v in spec["enum"][:6])
                text += f": {values}" + (", ..." if len(spec["enum"]) > 6 else "")
            out.append(text + ")")
        return out

    @property
    def check_with(self) -> str:
        """The read action that checks this action's work, if one was wired."""
        return str((self.definition.get("check_with") or {}).get("action", ""))

    @property
    def status_follow(self) -> str:
        """How accepted work is followed: "the 202's Location" or a path, if wired."""
        status = self.definition.get("status") or {}
        if status.get("from_location"):
            return "Location"
        return str(status.get("path", ""))


@dataclass
class RefusedOperation:
    operation: str
    name: str
    reasons: list[dict[str, str]]

    @property
    def reason(self) -> str:
        return "; ".join(r["message"] for r in self.reasons)


@dataclass
class ListedRead:
    """A GET or HEAD that is not proposed as a read action, and why (a list, a search)."""

    operation: str  # "listContacts: GET /contacts"
    reason: str

    def __str__(self) -> str:
        return f"{self.operation} ({self.reason})"


@dataclass
class ImportReport:
    proposed: list[ProposedAction] = field(default_factory=list)
    refused: list[RefusedOperation] = field(default_factory=list)
    # GETs and HEADs not proposed (lists, searches, no JSON answer); proposed reads are
    # in ``proposed`` with kind "read".
    reads: list[ListedRead] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)
    connector: str = ""
    source_name: str = ""
    dry_run: bool = False
    connector_created: bool = False

    def action(self, name: str) -> ProposedAction:
        return next(p for p in self.proposed if p.name == name)


class OpenAPIImportError(Exception):
    """The whole document is refused; nothing was stored."""

    def __init__(self, problems: list[CatalogProblem], source: str = "<upload>") -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: " + "; ".join(str(p) for p in problems))


class _Refused(Exception):
    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(message)
        self.pointer = pointer
        self.message = message


class _FreeForm(Exception):
    """A value that cannot be offered to an agent (free-form, a URL, a pattern that is not
    linear-time); the caller decides whether to drop it (optional) or refuse (required).
    ``refusal`` is the message when it refuses the operation, if more than ``what``."""

    def __init__(self, pointer: str, what: str, refusal: str = "") -> None:
        super().__init__(what)
        self.pointer = pointer
        self.what = what
        self.refusal = refusal


def _ptr(*tokens: str | int) -> str:
    return "".join(f"/{escape_pointer_token(t)}" for t in tokens)


def _problem(pointer: str, message: str) -> dict[str, str]:
    return {"pointer": pointer, "message": message}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _names(value: Any) -> list[str]:
    return [item for item in _list(value) if isinstance(item, str)]


# --- the document ----------------------------------------------------------------------------


class _Exhausted(Exception):
    """The document needs more work than an import may spend: refuse all of it."""

    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(message)
        self.pointer = pointer
        self.message = message


class _Budget:
    """Work and time one import may spend, so that no document can hold a process.

    Work is counted in schema nodes visited (converting, merging ``allOf`` parts,
    following references); time is checked every few hundred units of work.
    """

    def __init__(self, work: int | None = None, seconds: float | None = None) -> None:
        self.work = MAX_IMPORT_WORK if work is None else work
        self.seconds = MAX_IMPORT_SECONDS if seconds is None else seconds
        self.left = self.work
        self.deadline = time.monotonic() + self.seconds
        self._until_clock = 256

    def spend(self, pointer: str, units: int = 1) -> None:
        self.left -= units
        if self.left < 0:
            raise _Exhausted(
                pointer,
                f"the document needs more than {self.work} schema nodes of work to import "
                "(nested allOf, references used many times): refused",
            )
        self._until_clock -= units
        if self._until_clock <= 0:
            self._until_clock = 256
            self.check_time(pointer)

    def check_time(self, pointer: str = "") -> None:
        if time.monotonic() > self.deadline:
            raise _Exhausted(
                pointer,
                f"importing the document takes longer than {self.seconds:g} seconds: refused",
            )


# A JSON string, quotes and escapes included; possessive, so it never backtracks.
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"')
_STARTS_JSON = re.compile(r"\s*[\[{]")


def _parse(text: str, source: str, budget: _Budget) -> dict[str, Any]:
    def refuse(message: str, pointer: str = "") -> NoReturn:
        raise OpenAPIImportError([CatalogProblem(pointer, message)], source)

    # Characters never outnumber bytes: encode only when the count alone cannot decide.
    size = len(text)
    if size * 4 > MAX_DOCUMENT_BYTES:
        size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_DOCUMENT_BYTES:
        refuse(
            f"the document is {size / 2**20:.1f} MiB; at most "
            f"{MAX_DOCUMENT_BYTES // 2**20} MiB is imported"
        )
    too_large = (
        f"the document has more than {MAX_DOCUMENT_NODES} values or is nested more than "
        f"{MAX_DOCUMENT_DEPTH} levels deep: refused"
    )
    try:
        if _STARTS_JSON.match(text):
            # Count the values before building them: a few megabytes of "[[],[],...]"
            # would otherwise become hundreds of megabytes of lists.
            bare = _JSON_STRING.sub("", text)
            if bare.count(",") + bare.count("[") + bare.count("{") > MAX_DOCUMENT_NODES:
                refuse(too_large)
            del bare
            try:
                document = json.loads(text, object_pairs_hook=_no_duplicates)
            except (ValueError, _DuplicateKey) as exc:
                refuse(f"not valid JSON: {exc}")
        else:
            if not _yaml_within_bounds(text, budget):
                refuse(too_large)
            try:
                document = parse_catalog_text(
                    text, source, allow_aliases=True, max_bytes=MAX_DOCUMENT_BYTES
                )
            except CatalogError as exc:
                raise OpenAPIImportError(exc.problems, source) from None
    except RecursionError:
        refuse(too_large)
    if not isinstance(document, dict):
        refuse("the document must be a mapping")
    nodes = [MAX_DOCUMENT_NODES]
    try:
        return _plain(document, "", 0, nodes, budget)
    except _Refused as exc:
        raise OpenAPIImportError([CatalogProblem(exc.pointer, exc.message)], source) from None


def _yaml_within_bounds(text: str, budget: _Budget) -> bool:
    """Count YAML events before composing any node: composed nodes cost far more memory
    than the text, and a flood of tiny ones is cheap to write. A document that is not
    valid YAML passes here and is refused by the parser with its line and column."""
    events = depth = 0
    starts = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
    ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    try:
        for event in yaml.parse(text, Loader=_YAML_LOADER):
            events += 1
            if isinstance(event, starts):
                depth += 1
                if depth > MAX_DOCUMENT_DEPTH:
                    return False
            elif isinstance(event, ends):
                depth -= 1
            # A key and its value are two events.
            if events > 2 * MAX_DOCUMENT_NODES:
                return False
            if not events % 4096:
                budget.check_time()
    except yaml.YAMLError:
        return True
    return True


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key!r}")
        out[key] = value
    return out


def _plain(value: Any, pointer: str, depth: int, nodes: list[int], budget: _Budget) -> Any:
    """A fresh tree of plain JSON values: string keys (YAML reads ``202:`` as an int),
    dates as ISO strings, no shared or recursive nodes, bounded in size."""
    nodes[0] -= 1
    if nodes[0] < 0 or depth > MAX_DOCUMENT_DEPTH:
        raise _Refused(
            pointer if len(pointer) < 120 else pointer[:120] + "...",
            f"the document has more than {MAX_DOCUMENT_NODES} values (YAML aliases "
            f"included) or is nested more than {MAX_DOCUMENT_DEPTH} levels deep: refused",
        )
    if not nodes[0] % 4096:
        budget.check_time(pointer)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, bool) or not isinstance(key, str | int):
                raise _Refused(pointer, f"key {key!r} is not a string; quote it")
            key = str(key)
            out[key] = _plain(
                item, f"{pointer}/{escape_pointer_token(key)}", depth + 1, nodes, budget
            )
        return out
    if isinstance(value, list):
        return [_plain(v, f"{pointer}/{i}", depth + 1, nodes, budget) for i, v in enumerate(value)]
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


class _Document:
    def __init__(self, root: dict[str, Any], source: str, budget: _Budget | None = None) -> None:
        self.root = root
        self.source = source
        self.budget = budget or _Budget()
        # allOf merges by the identity of the node merged (kept alive here, so an id is
        # never reused): each schema is merged once, however often it is referenced.
        self._merged: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._check_version()
        self._check_refs()
        self.is_30 = str(root["openapi"]).startswith("3.0")

    def _refuse(self, pointer: str, message: str) -> None:
        raise OpenAPIImportError([CatalogProblem(pointer, message)], self.source)

    def _check_version(self) -> None:
        root = self.root
        if "swagger" in root:
            self._refuse(
                "/swagger",
                f"Swagger {root['swagger']!r} is not imported (Swagger 2.0 is converted; "
                "other versions are not)",
            )
        version = root.get("openapi")
        if not isinstance(version, str):
            self._refuse("/openapi", "not an OpenAPI document: 'openapi: 3.x.y' is missing")
        if not re.fullmatch(r"3\.[01]\.\d+(-[A-Za-z0-9.]+)?", version):
            self._refuse("/openapi", f"OpenAPI {version} is not supported (3.0.x and 3.1.x are)")
        if not isinstance(root.get("paths"), dict) or not root["paths"]:
            self._refuse("/paths", "the document has no paths: nothing to import")

    def _check_refs(self) -> None:
        """Every reference must point inside this document, at something that exists.

        Checked before anything else so that a document relying on another file or a
        URL is refused as a whole: importing never fetches or opens anything.
        """
        problems: list[CatalogProblem] = []
        stack: list[tuple[Any, str]] = [(self.root, "")]
        visited = 0
        while stack:
            node, pointer = stack.pop()
            visited += 1
            if not visited % 4096:
                self.budget.check_time(pointer)
            if isinstance(node, dict):
                for key, value in node.items():
                    here = f"{pointer}/{escape_pointer_token(key)}"
                    if key in ("$ref", "$dynamicRef") and not (
                        pointer.endswith("/properties") or isinstance(value, dict)
                    ):
                        problem = self._ref_problem(value)
                        if problem:
                            problems.append(CatalogProblem(here, problem))
                    else:
                        stack.append((value, here))
            elif isinstance(node, list):
                stack.extend((v, f"{pointer}/{i}") for i, v in enumerate(node))
        if problems:
            problems.sort(key=lambda p: p.pointer)
            raise OpenAPIImportError(problems, self.source)

    def _ref_problem(self, ref: Any) -> str:
        if not isinstance(ref, str):
            return "a $ref must be a string"
        if not ref.startswith("#/"):
            return (
                f"{ref!r} leaves this document: only internal references (#/...) are "
                "followed; bundle the document into one file first"
            )
        try:
            self.resolve(ref)
        except KeyError:
            return f"{ref!r} points at nothing in this document"
        return ""

    def resolve(self, ref: str) -> Any:
        node: Any = self.root
        for raw in ref[2:].split("/"):
            token = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise KeyError(ref)
        return node

    def deref(
        self, node: Any, pointer: str, stack: tuple[str, ...] = ()
    ) -> tuple[Any, str, tuple[str, ...]]:
        """Follow ``$ref`` chains; siblings of a ``$ref`` (3.1) override the target."""
        hops = 0
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in stack:
                raise _Refused(
                    pointer,
                    f"recursive schema: {ref} refers back to itself; an action's input "
                    "must be finite",
                )
            hops += 1
            if hops > MAX_REF_HOPS or len(stack) > MAX_REF_HOPS + MAX_SCHEMA_DEPTH:
                raise _Refused(pointer, f"more than {MAX_REF_HOPS} references in a chain")
            self.budget.spend(pointer)
            stack = (*stack, ref)
            target = self.resolve(ref)
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            node = {**target, **siblings} if siblings and isinstance(target, dict) else target
            pointer = unquote(ref[1:])
        return node, pointer, stack

    def operations(self) -> list[_Operation]:
        out = []
        for path, item in self.root["paths"].items():
            item_pointer = _ptr("paths", path)
            try:
                item, _, _ = self.deref(item, item_pointer)
            except _Refused as exc:
                # A path item that refers back to itself (or to a chain too long) names
                # no operation at all: say which one, never a bare exception name.
                self._refuse(exc.pointer, f"path item {path!r}: {exc.message}")
            if not isinstance(item, dict):
                continue
            shared = _list(item.get("parameters"))
            for method in METHODS:
                node = item.get(method)
                if isinstance(node, dict):
                    out.append(_Operation(self, path, method, node, shared, item_pointer))
        return out


class _Operation:
    def __init__(
        self,
        doc: _Document,
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
            (_list(self.node.get("parameters")), f"{self.pointer}/parameters"),
        ]
        for params, base in lists:
            for i, raw in enumerate(params):
                param, pointer, _ = self.doc.deref(raw, f"{base}/{i}")
                if not isinstance(param, dict) or not isinstance(param.get("name"), str):
                    raise _Refused(pointer, "a parameter needs a name")
                if param.get("in") not in ("path", "query", "header", "cookie"):
                    raise _Refused(pointer, f"parameter {param['name']!r} has no valid 'in'")
                merged[(param["name"], param["in"])] = (param, pointer)
        return list(merged.values())

    def responses(self) -> dict[str, tuple[dict[str, Any], str]]:
        out = {}
        for code, raw in _dict(self.node.get("responses")).items():
            response, pointer, _ = self.doc.deref(raw, f"{self.pointer}/responses/{code}")
            if isinstance(response, dict):
                out[str(code).upper()] = (response, pointer)
        return out

    def response_headers(self, code_prefix: str) -> set[str]:
        names = set()
        for code, (response, _pointer) in self.responses().items():
            if code.startswith(code_prefix):
                for name in _dict(response.get("headers")):
                    names.add(name.lower())
        return names

    def success_schema(self) -> tuple[Any, str] | None:
        for code, (response, pointer) in sorted(self.responses().items()):
            if not code.startswith("2"):
                continue
            for media, content in _dict(response.get("content")).items():
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
            for media, content in _dict(response.get("content")).items():
                if _is_json(media) and isinstance(content, dict) and "schema" in content:
                    where = f"{pointer}/content/{escape_pointer_token(media)}/schema"
                    return content["schema"], where, code
        return None


def _is_json(media_type: str) -> bool:
    base = media_type.split(";")[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


# --- text ----------------------------------------------------------------------------------

_MARKUP = re.compile(r"<[A-Za-z/!]|&(?:#[0-9]{1,7}|#x[0-9A-Fa-f]{1,6}|[A-Za-z]{2,31});")
_BLOCK_TAGS = {"p", "div", "br", "li", "ul", "ol", "tr", "table", "h1", "h2", "h3", "h4", "pre"}
MAX_MARKUP_CHARS = 20_000  # what is kept of a text is far shorter; never parse more


class _TextOnly(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")


def plain_text(text: str) -> str:
    """Summaries and descriptions as plain text: tags dropped, entities decoded, blank
    lines between blocks. Text without markup is returned as it is (stripped)."""
    text = text.strip()
    if not _MARKUP.search(text[:MAX_MARKUP_CHARS]):
        return text
    parser = _TextOnly()
    parser.feed(text[:MAX_MARKUP_CHARS])
    parser.close()
    lines = [" ".join(line.split()) for line in "".join(parser.parts).splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


# --- naming and linting ----------------------------------------------------------------------


def snake_case(text: str) -> str:
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", text)
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    text = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()
    return re.sub(r"_+", "_", text)


def _action_name(op: _Operation) -> tuple[str, bool]:
    """The proposed name, and whether it came from the operationId."""
    if op.operation_id:
        name, from_id = snake_case(op.operation_id), True
    else:
        segments = [s.strip("{}") for s in op.path.split("/") if s]
        name, from_id = snake_case("_".join([op.method, *segments])), False
    if not name or not name[0].isalpha():
        name = f"op_{name}"
    return name[:64].rstrip("_-"), from_id


def _first_word(text: str) -> str:
    match = re.match(r"\s*([A-Za-z]+)", text)
    return match.group(1).lower() if match else ""


def _vague_verb(word: str) -> str:
    for verb in VAGUE_VERBS:
        if word in (verb, verb + "s", verb + "es", verb + "ing", verb.rstrip("e") + "ing"):
            return verb
    return ""


def _is_url_name(name: str) -> bool:
    snake = snake_case(name)
    return snake in URL_NAMES or snake.endswith(URL_SUFFIXES) or snake in {"callback_url"}


_PATH_LITERAL = re.compile(r"%(?![0-9A-Fa-f]{2})|[^A-Za-z0-9_.~/%-]")


def _encode_path_literals(path: str) -> str:
    """Percent-encode what a catalog path template does not take raw (``/users/@me`` ->
    ``/users/%40me``); the ``{field}`` placeholders are left as they are."""
    parts = re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", path)
    return "".join(
        part if i % 2 else _PATH_LITERAL.sub(lambda m: quote(m.group(0), safe=""), part)
        for i, part in enumerate(parts)
    )


def _undocumented_path_params(
    names, target: str, properties: dict, required: list, converter, warn, pointer: str
) -> str:
    """A template variable the document never describes becomes a required string input
    (with a warning); returns the target with the variables renamed to their inputs."""
    for missing in sorted(names):
        input_name = _identifier(missing)
        warn(pointer, f"path parameter {missing!r} is not documented")
        properties[input_name] = converter.convert(
            {"type": "string"}, pointer, name=input_name, identifier=True
        )
        required.append(input_name)
        target = target.replace("{" + missing + "}", "{" + input_name + "}")
    return target


def _identifier(name: str) -> str:
    """A path-template-safe input name for a path parameter."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return name
    return snake_case(name) or "id"


# --- schemas ---------------------------------------------------------------------------------


class _SchemaConverter:
    """OpenAPI schema objects → closed, bounded JSON Schema 2020-12 for action inputs.

    Bounds are added where the document gives none (and each addition is a warning, so a
    person sees what was guessed); free-form values are reported to the caller, which
    drops an optional one and refuses a required one.
    """

    def __init__(self, doc: _Document, warn) -> None:
        self.doc = doc
        self.warn = warn
        self.nodes = 0

    def merge_all_of(
        self, node: dict[str, Any], pointer: str, stack: tuple[str, ...], depth: int = 0
    ) -> dict:
        if not isinstance(node.get("allOf"), list):
            return node
        cached = self.doc._merged.get(id(node))
        if cached is not None and cached[0] is node:
            return cached[1]
        if depth > MAX_SCHEMA_DEPTH:
            raise _Refused(pointer, f"allOf nested more than {MAX_SCHEMA_DEPTH} levels deep")
        self.doc.budget.spend(pointer, 1 + len(node["allOf"]))
        merged = {k: v for k, v in node.items() if k != "allOf"}
        for i, raw in enumerate(node["allOf"]):
            part, part_pointer, part_stack = self.doc.deref(raw, f"{pointer}/allOf/{i}", stack)
            if not isinstance(part, dict):
                raise _Refused(part_pointer, "allOf parts must be schema objects")
            part = self.merge_all_of(part, part_pointer, part_stack, depth + 1)
            self.doc.budget.spend(part_pointer, len(part))
            for key, value in part.items():
                if key == "properties" and isinstance(value, dict):
                    merged["properties"] = {**_dict(merged.get("properties")), **value}
                elif key == "required":
                    merged["required"] = list(
                        dict.fromkeys([*_names(merged.get("required")), *_names(value)])
                    )
                else:
                    merged.setdefault(key, value)
        self.doc._merged[id(node)] = (node, merged)
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
            raise _Refused(
                pointer,
                f"the input schema has more than {MAX_SCHEMA_NODES} nodes or is nested more "
                f"than {MAX_SCHEMA_DEPTH} levels deep",
            )
        self.doc.budget.spend(pointer)
        node, pointer, stack = self.doc.deref(raw, pointer, stack)
        if node is True or node == {}:
            raise _FreeForm(pointer, "free-form (any value)")
        if not isinstance(node, dict):
            raise _Refused(pointer, f"{name!r}: not a usable schema")
        node = self.merge_all_of(node, pointer, stack)
        node, pointer, stack, nullable = self._unwrap_nullable(node, pointer, stack)
        fmt = node.get("format")
        if isinstance(fmt, str) and fmt.lower() in URL_FORMATS:
            raise _FreeForm(
                pointer,
                f"a URL (format {fmt})",
                refusal=f"{name!r} is a URL (format {fmt}): a URL an agent chooses makes the "
                "action a generic passthrough",
            )
        out: dict[str, Any] = {k: node[k] for k in SCHEMA_KEYWORDS if k in node}
        for key in ("description", "title"):
            if isinstance(out.get(key), str):
                out[key] = plain_text(out[key])[:2000]
        types = self._types(node)
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
        self._safe_bounds(out, pointer, name)
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
                    except _FreeForm as exc:
                        # Dropped when optional, like any value that cannot be offered.
                        raise _FreeForm(
                            exc.pointer,
                            f"one of several shapes, one of them {exc.what}",
                            refusal=exc.refusal
                            or f"{name!r}: one of its alternatives is {exc.what}",
                        ) from None
                out[combinator] = variants
        if not types and not any(k in out for k in ("enum", "const", "oneOf", "anyOf")):
            raise _FreeForm(pointer, "free-form (no type)")
        if types:
            out = {"type": types[0] if len(types) == 1 else types, **out}
        if "string" in types:
            self._bound_string(out, pointer, name, identifier=identifier)
        if isinstance(out.get("pattern"), str):
            problem = pattern_problem(out["pattern"])
            if problem:
                raise _FreeForm(
                    pointer,
                    f"a string whose pattern cannot be checked in linear time ({problem})",
                    refusal=f"{name!r}: its pattern {out['pattern']!r} cannot be checked in "
                    f"linear time ({problem})",
                )
        if "array" in types:
            if "items" not in node:
                raise _FreeForm(pointer, "an array of anything")
            try:
                out["items"] = self.convert(
                    node["items"], f"{pointer}/items", name=name, stack=stack, depth=depth + 1
                )
            except _FreeForm as exc:
                raise _FreeForm(
                    exc.pointer, f"an array of {exc.what} values", refusal=exc.refusal
                ) from None
            if "maxItems" not in out and not any(k in out for k in ("enum", "const")):
                out["maxItems"] = DEFAULT_MAX_ITEMS
                self.warn(pointer, f"{name!r}: no maxItems; proposed {DEFAULT_MAX_ITEMS}")
        if "object" in types:
            properties = node.get("properties")
            if not isinstance(properties, dict) or not properties:
                raise _FreeForm(pointer, "a free-form object")
            if node.get("additionalProperties") is not False:
                self.warn(
                    pointer,
                    f"{name!r}: closed with additionalProperties: false (unknown fields "
                    "are refused, never passed on)",
                )
            out["properties"], required = self.properties(node, pointer, stack=stack, depth=depth)
            if not out["properties"]:
                raise _FreeForm(pointer, "an object none of whose fields can be offered")
            if required:
                out["required"] = required
            out["additionalProperties"] = False
        return out

    def _unwrap_nullable(
        self, node: dict[str, Any], pointer: str, stack: tuple[str, ...]
    ) -> tuple[dict[str, Any], str, tuple[str, ...], bool]:
        """One schema that may also be null, however the document says so: 3.0's
        ``nullable: true``, 3.1's ``type: [T, "null"]`` (left to ``_types``), or
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

    def _safe_bounds(self, out: dict[str, Any], pointer: str, name: str) -> None:
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
                self.warn(
                    pointer,
                    f"{name!r}: {key} {value} is beyond what JSON numbers carry exactly; "
                    f"tightened to {limit}",
                )
        for key in ("enum", "const", "default"):
            values = out.get(key) if key == "enum" else [out.get(key)]
            if isinstance(values, list) and any(
                isinstance(v, int) and not isinstance(v, bool) and abs(v) > SAFE_INTEGER
                for v in values
            ):
                raise _FreeForm(
                    pointer,
                    f"a number beyond what JSON numbers carry exactly ({key})",
                )

    def _types(self, node: dict[str, Any]) -> list[str]:
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

    def _bound_string(
        self, out: dict[str, Any], pointer: str, name: str, *, identifier: bool
    ) -> None:
        constrained = any(k in out for k in ("enum", "const"))
        if identifier and not constrained and not any(k in out for k in ("pattern", "format")):
            out["pattern"] = IDENTIFIER_PATTERN
            out.setdefault("maxLength", 100)
            self.warn(
                pointer,
                f"identifier {name!r} has no pattern or enum; proposed {IDENTIFIER_PATTERN}",
            )
        if not constrained and "maxLength" not in out:
            out["maxLength"] = DEFAULT_MAX_LENGTH
            # The catalog wants a maxLength on every string; when an anchored pattern or a
            # fixed format already bounds the value, adding one is not worth a warning.
            if not (_bounded_pattern(out.get("pattern")) or out.get("format") in FIXED_FORMATS):
                self.warn(
                    pointer, f"{name!r}: string without maxLength; proposed {DEFAULT_MAX_LENGTH}"
                )

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
        required_in = _names(node.get("required"))
        out: dict[str, Any] = {}
        for prop, raw in _dict(node.get("properties")).items():
            if skip and prop in skip:
                continue
            prop_pointer = f"{pointer}/properties/{escape_pointer_token(prop)}"
            peek, _, _ = self.doc.deref(raw, prop_pointer, stack)
            if isinstance(peek, dict) and peek.get("readOnly") is True:
                continue  # set by the server: never an input
            try:
                if _is_url_name(prop):
                    raise _FreeForm(
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
                    identifier=_looks_like_id(prop),
                )
            except _FreeForm as exc:
                if prop not in required_in:
                    self.warn(exc.pointer, f"optional field {prop!r} is {exc.what}: not offered")
                    continue
                if depth == 0:
                    raise _Refused(
                        exc.pointer,
                        exc.refusal
                        or f"required field {prop!r} is {exc.what}: a generic passthrough",
                    ) from None
                raise _FreeForm(
                    exc.pointer,
                    f"an object whose required field {prop!r} is {exc.what}",
                    refusal=exc.refusal,
                ) from None
        required = [r for r in required_in if r in out]
        return out, required


def _types_of(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    raw = schema.get("type")
    return set(raw) if isinstance(raw, list) else {raw} if isinstance(raw, str) else set()


def _is_null_schema(node: Any) -> bool:
    return isinstance(node, dict) and (
        node.get("type") == "null" or node.get("type") == ["null"] or node.get("enum") == [None]
    )


_ID_NAME = re.compile(r"(^id$|_id$|Id$)")
FIXED_FORMATS = {"date", "date-time", "time", "uuid", "ipv4", "ipv6", "duration"}


def _bounded_pattern(pattern: Any) -> bool:
    """True for an anchored pattern with no unbounded repetition (``^c-[0-9]{1,10}$``)."""
    if not isinstance(pattern, str) or not pattern.startswith("^"):
        return False
    core = re.sub(r"\\.", "x", pattern)  # escaped characters are literals
    core = re.sub(r"\[[^\]]*\]", "x", core)  # so are character classes
    if not core.endswith("$") or "|" in core:
        return False
    return not re.search(r"[*+]|\{\d*,\}", core)


def _looks_like_id(name: str) -> bool:
    return bool(_ID_NAME.search(name))


def _path_input(
    converter: _SchemaConverter, param: dict[str, Any], pointer: str
) -> tuple[str, dict[str, Any]]:
    """A path parameter as a required input: its template-safe name and its schema."""
    pname = param["name"]
    input_name = _identifier(pname)
    if _is_url_name(pname):
        raise _Refused(pointer, f"{pname!r} names a URL: generic passthrough")
    schema = param.get("schema", {"type": "string"})
    try:
        return input_name, converter.convert(
            schema, f"{pointer}/schema", name=input_name, identifier=True
        )
    except _FreeForm as exc:
        if exc.refusal:  # a URL, a pattern that is not linear-time
            raise _Refused(exc.pointer, exc.refusal) from None
        return input_name, converter.convert(
            {"type": "string"}, f"{pointer}/schema", name=input_name, identifier=True
        )


# --- one operation → one proposal --------------------------------------------------------------


@dataclass
class _Draft:
    op: _Operation
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
    check_read: _Draft | None = None
    link_fields: tuple[str, ...] = ()
    card_result_drafted: bool = False
    # After the catalog's checks: "accepted" (to be stored), "kept" (an admin reviewed
    # the stored action, which stays as it is) or "refused".
    outcome: str = ""

    def warn(self, pointer: str, message: str) -> None:
        item = _problem(pointer, message)
        if item not in self.warnings:
            self.warnings.append(item)


def _x_countersign(op: _Operation) -> dict[str, Any]:
    raw = op.node.get("x-countersign")
    if raw is None:
        return {}
    base = f"{op.pointer}/x-countersign"
    validator = Draft202012Validator(X_COUNTERSIGN_SCHEMA)
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        raise _Refused(base + _ptr(*error.absolute_path), f"x-countersign: {error.message}")
    return raw


class _Proposer:
    def __init__(
        self,
        doc: _Document,
        connector: str,
        prefix: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.doc = doc
        self.connector = connector
        self.prefix = prefix
        self.headers = {name.lower(): value for name, value in (headers or {}).items()}
        ops = doc.operations()
        self.operations = ops
        self.gets_by_path = {op.path: op for op in ops if op.method == "get"}
        self.gets_by_id = {op.operation_id: op for op in ops if op.method == "get"}
        # The reads proposed from this document's GETs, by path (filled in before any
        # write is proposed, so that a write can name the read that checks it).
        self.reads: dict[str, _Draft] = {}

    def _name(self, op: _Operation, xc: dict[str, Any], warn) -> str:
        name, from_id = _action_name(op)
        if xc.get("name"):
            name = xc["name"]
        elif not from_id:
            warn(op.pointer, f"no operationId: the name {name!r} was derived from the path")
        if self.prefix:
            name = (self.prefix + name)[:64].rstrip("_-")
        return name

    def propose(self, op: _Operation) -> _Draft:
        warnings: list[dict[str, str]] = []

        def warn(pointer: str, message: str) -> None:
            item = _problem(pointer, message)
            if item not in warnings:
                warnings.append(item)

        xc = _x_countersign(op)
        name = self._name(op, xc, warn)
        method = op.method
        get_op = self.gets_by_path.get(op.path)
        kind = xc.get("kind") or DEFAULT_KIND[method]
        if kind in ("update", "replace", "delete") and get_op is None:
            if kind == "delete":
                raise _Refused(
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
            raise _Refused(
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
        if op.node.get("deprecated") is True:
            warn(op.pointer, "the operation is deprecated")

        converter = _SchemaConverter(self.doc, warn)
        properties: dict[str, Any] = {}
        required: list[str] = []
        target = op.path
        documented = {"if-match": False, "if-none-match": False}
        idempotency_header = ""
        fixed_headers: dict[str, str] = {}
        path_params = set(re.findall(r"\{([^{}]+)\}", op.path))
        for param, pointer in op.parameters():
            pname, where = param["name"], param["in"]
            if where == "path":
                input_name, properties[input_name] = _path_input(converter, param, pointer)
                required.append(input_name)
                if input_name != pname:
                    target = target.replace("{" + pname + "}", "{" + input_name + "}")
                path_params.discard(pname)
            elif where == "query":
                if param.get("required") is True:
                    raise _Refused(
                        pointer,
                        f"required query parameter {pname!r}: catalog writes send no query string",
                    )
                warn(pointer, f"query parameter {pname!r} is not sent (writes have no query)")
            elif where == "header":
                lower = pname.lower()
                if lower in documented:
                    documented[lower] = True
                elif lower in IDEMPOTENCY_HEADERS:
                    idempotency_header = pname
                elif lower not in HANDLED_HEADERS:
                    value = self._fixed_header(pname, param, xc)
                    if value is not None:
                        fixed_headers[pname] = value
                        warn(
                            pointer,
                            f"header {pname!r} is always sent as {value!r} (a fixed value, "
                            "shown to reviewers in the request)",
                        )
                    elif param.get("required") is True:
                        raise _Refused(
                            pointer,
                            f"required header {pname!r} has no value Countersign could send: "
                            f"fix one with --header {pname}=VALUE (or x-countersign: "
                            "{headers: {...}}), or the upstream refuses every request",
                        )
                    else:
                        warn(pointer, f"header {pname!r} is not forwarded by Countersign")
            else:
                warn(pointer, f"cookie parameter {pname!r} is not sent")
        target = _undocumented_path_params(
            path_params, target, properties, required, converter, warn, op.pointer
        )

        precondition_field = xc.get("precondition_field", "")
        body_skip = {precondition_field[1:]} if precondition_field.count("/") == 1 else set()
        body_props, body_required, content_type, has_body, form_style = self._body(
            op, kind, converter, warn, skip=body_skip
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
            "title": self._title(op, name, warn),
            "connector": self.connector,
            "kind": kind,
            "consequence_class": consequence_class,
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
        encoded = _encode_path_literals(target)
        if encoded != target:
            warn(
                op.pointer,
                f"the path is sent percent-encoded ({encoded}): characters such as '@' or "
                "':' are not used raw in catalog paths; check the upstream accepts it",
            )
            target = encoded
        definition["target"] = target

        write: dict[str, Any] = {"method": method.upper()}
        precondition = "none"
        if kind in ("update", "replace", "delete"):
            assert get_op is not None
            definition["read"] = {"path": target}
            version = xc.get("version") or self._version(op, get_op, documented, warn)
            definition["version"] = version
            if version["source"] == "etag":
                precondition = "if_match"
            elif precondition_field:
                precondition = "field"
                write["precondition_field"] = precondition_field
        elif kind == "create":
            # A PUT names the new resource, which can be read; a POST to a collection
            # gets a server-assigned id, and reading the collection would say nothing.
            readable = get_op is not None and method != "post"
            definition["read"] = {"path": target} if readable else None
            if documented["if-none-match"]:
                precondition = "if_none_match"
        if kind != "delete":
            write["body"] = body_template
            write["content_type"] = content_type
            if form_style == "deep_object":
                write["form_style"] = form_style
        elif has_body:
            warn(f"{op.pointer}/requestBody", "the request body of a delete is not sent")
        if precondition != "none":
            write["precondition"] = precondition
        retry = xc.get("retry")
        if retry == "never":
            idempotency_header = ""
        elif isinstance(retry, dict):
            idempotency_header = retry["idempotency_header"]
        if idempotency_header:
            write["idempotency_header"] = idempotency_header
        if fixed_headers:
            write["headers"] = fixed_headers
        definition["write"] = write
        if precondition == "none" and not idempotency_header:
            warn(
                op.pointer,
                f"{method.upper()} with no idempotency key and no conditional write: a "
                "duplicated or retried request could take effect twice, and a timeout "
                "leaves the outcome unknown",
            )
        # What the agent gets back, and the read that checks the work: from a link the
        # document gives (a 202's status read), else the GET of the same path.
        result = self._write_result(op, converter, warn)
        link = self._linked_check(op, properties, result, warn)
        check_read = link.read if link else self._same_path_read(op, kind, definition, properties)
        link_fields: tuple[str, ...] = ()
        if link:
            result, link_fields = link.result, link.added
            definition["check_with"] = {"action": link.read.name, "input": link.inputs}
        elif check_read is not None:
            required_in = check_read.definition["input_schema"].get("required") or []
            definition["check_with"] = {
                "action": check_read.name,
                "input": {key: {"$input": key} for key in required_in},
            }
        if result:
            definition["result"] = result
        status_op = self._status_operation(op, xc, warn, link=link)
        if xc.get("status"):
            definition["status"] = self._status(op, xc["status"], status_op, required)
        definition["card"], drafted = self._card(op, xc, warn, result)
        return _Draft(
            op=op,
            name=name,
            kind=kind,
            consequence_class=consequence_class,
            class_source=class_source,
            class_lowered_from=class_lowered_from,
            definition=definition,
            warnings=warnings,
            status_operation=status_op.describe() if status_op is not None else "",
            check_read=check_read,
            link_fields=link_fields,
            card_result_drafted=drafted,
        )

    def _fixed_header(self, name: str, param: dict[str, Any], xc: dict[str, Any]) -> str | None:
        """The value an action always sends for a documented header: from x-countersign,
        from the import's --header, or the one value the document allows."""
        declared = {k.lower(): v for k, v in _dict(xc.get("headers")).items()}
        if name.lower() in declared:
            return declared[name.lower()]
        if name.lower() in self.headers:
            return self.headers[name.lower()]
        schema = _dict(param.get("schema"))
        if isinstance(schema.get("const"), str):
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and len(enum) == 1 and isinstance(enum[0], str):
            return enum[0]
        return None

    def _title(self, op: _Operation, name: str, warn) -> str:
        summary = op.text("summary").splitlines()
        title = summary[0].strip() if summary else ""
        if not title:
            what = "what it reads" if op.method == "get" else "what changes"
            warn(op.pointer, f"no summary: the title was derived from the name; say {what}")
            title = name.replace("_", " ").capitalize()
        verb = _vague_verb(_first_word(title)) or _vague_verb(
            snake_case(op.operation_id).split("_")[0] if op.operation_id else ""
        )
        if verb:
            warn(
                f"{op.pointer}/summary",
                f"vague verb {verb!r}: say what changes, on which object (one action, one effect)",
            )
        return title[:200]

    def _card(
        self, op: _Operation, xc: dict[str, Any], warn, result: dict[str, Any]
    ) -> tuple[dict[str, str], bool]:
        """The card, and whether its ``result`` sentence was drafted from the declared
        result fields (the other fields but ``effect`` are left to a person)."""
        summary = op.text("summary")
        description = op.text("description")
        effect = summary or re.split(r"(?<=[.!?])\s", description, maxsplit=1)[0]
        card = {"effect": effect[:500], "scope": "", "result": "", "consent": "", "retry": ""}
        card.update(xc.get("card") or {})
        drafted = False
        if not card["result"].strip() and result:
            sentence = result_sentence(result)
            # Never a draft the loader would refuse once enabled (a field "identifier"
            # promises an id that no "..._id" field carries).
            if not result_promise_problem({"result": sentence}, result):
                card["result"], drafted = sentence, True
        promise = result_promise_problem(card, result)
        if promise:
            warn(
                f"{op.pointer}/x-countersign/card/result",
                f"{promise}: the action cannot be enabled until a result field carries it",
            )
        missing = [key for key, value in card.items() if not value.strip()]
        if missing:
            warn(
                op.pointer,
                f"card incomplete ({', '.join(missing)}): an admin completes it before enabling",
            )
        return card, drafted

    def _body(
        self, op: _Operation, kind: str, converter: _SchemaConverter, warn, *, skip: set[str]
    ) -> tuple[dict[str, Any], list[str], str, bool, str]:
        """The body's inputs, the required ones, the media type, whether a body is
        documented, and the form style ("" unless a form)."""
        default_type = "application/merge-patch+json" if kind == "update" else "application/json"
        raw = op.node.get("requestBody")
        if raw is None:
            if kind in ("create", "update", "replace"):
                raise _Refused(op.pointer, f"a {kind} needs a JSON request body; none documented")
            if kind == "invoke":
                warn(op.pointer, "no request body documented: the action sends {}")
            return {}, [], default_type, False, ""
        body, pointer, stack = self.doc.deref(raw, f"{op.pointer}/requestBody")
        if kind == "delete":
            return {}, [], default_type, True, ""
        if not isinstance(body, dict):
            raise _Refused(pointer, "the request body is not a Request Body object")
        content = body.get("content")
        if not isinstance(content, dict) or not content:
            raise _Refused(pointer, "the request body has no content: a generic passthrough")
        media = {m.split(";")[0].strip().lower(): m for m in content}
        preferred = ["application/merge-patch+json", "application/json"]
        if kind != "update":
            preferred.reverse()
        chosen = next((m for m in [*preferred, FORM_CONTENT_TYPE] if m in media), None)
        if chosen is None:
            raise _Refused(
                f"{pointer}/content",
                f"request body types {sorted(media)} cannot be sent: only application/json, "
                "application/merge-patch+json and application/x-www-form-urlencoded objects",
            )
        media_pointer = f"{pointer}/content/{escape_pointer_token(media[chosen])}"
        entry = content[media[chosen]]
        if not isinstance(entry, dict) or "schema" not in entry:
            raise _Refused(media_pointer, "free-form request body (no schema): generic passthrough")
        schema, schema_pointer, stack = self.doc.deref(
            entry["schema"], f"{media_pointer}/schema", stack
        )
        if not isinstance(schema, dict):
            raise _Refused(schema_pointer, "free-form request body: generic passthrough")
        schema = converter.merge_all_of(schema, schema_pointer, stack)
        for combinator in ("oneOf", "anyOf"):
            if combinator in schema:
                raise _Refused(
                    schema_pointer,
                    f"the request body is one of several shapes ({combinator}): import one "
                    "action per shape",
                )
        types = converter._types(schema)
        if types and "object" not in types:
            raise _Refused(
                schema_pointer, f"the request body is {types[0]}, not an object of named fields"
            )
        if not isinstance(schema.get("properties"), dict) or not schema["properties"]:
            raise _Refused(
                schema_pointer,
                "free-form request body (an object with no named fields): generic passthrough",
            )
        if schema.get("additionalProperties") not in (False, None):
            warn(schema_pointer, "extra body fields the document allows are not offered")
        props, required = converter.properties(
            schema, schema_pointer, stack=stack, depth=0, skip=skip
        )
        style = ""
        if chosen == FORM_CONTENT_TYPE:
            style = self._form_style(entry, media_pointer, props, required, warn)
            required = [r for r in required if r in props]
        if not props and any(name not in skip for name in schema["properties"]):
            raise _Refused(schema_pointer, "none of the request body's fields can be offered")
        return props, required, chosen, True, style

    def _form_style(
        self,
        entry: dict[str, Any],
        pointer: str,
        props: dict[str, Any],
        required: list[str],
        warn,
    ) -> str:
        """``deep_object`` when the document encodes any field that way (``a[b]=``, as
        Stripe does), else ``form``, where a field holding an object or an array of
        them has no agreed encoding: dropped when optional, refused when required."""
        encoding = _dict(entry.get("encoding"))
        if any(_dict(e).get("style") == "deepObject" for e in encoding.values()):
            return "deep_object"
        for name in list(props):
            schema = props[name]
            types = _types_of(schema)
            items = _types_of(schema.get("items")) if "array" in types else set()
            if "object" in types or items & {"object", "array"}:
                if name in required:
                    raise _Refused(
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
        self, op: _Operation, get_op: _Operation, documented: dict[str, bool], warn
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
                schema, pointer, stack = self.doc.deref(schema, pointer)
            except _Refused:
                schema = None
            if isinstance(schema, dict):
                schema = _SchemaConverter(self.doc, warn).merge_all_of(schema, pointer, stack)
                props = _dict(schema.get("properties"))
                for candidate in VERSION_FIELDS:
                    if candidate in props:
                        return {"source": "field", "field": f"/{candidate}"}
        warn(
            op.pointer,
            "no ETag and no version field: the target's version is a hash of what is read "
            "(no conditional write)",
        )
        return {"source": "hash"}

    def _status_operation(
        self, op: _Operation, xc: dict[str, Any], warn, *, link: _Link | None
    ) -> _Operation | None:
        """The GET that reports on accepted work: the one a link names, the one
        x-countersign declares, or the created resource's GET when the 202 documents a
        Location. Only a link says which of the answer's fields the GET takes, so only a
        link (or the same path) makes a check_with."""
        responses = op.responses()
        declared = xc.get("status_operation")
        status_op = None
        if declared:
            status_op = self.gets_by_id.get(declared)
            if status_op is None:
                raise _Refused(
                    f"{op.pointer}/x-countersign/status_operation",
                    f"status_operation {declared!r} names no GET operation in this document",
                )
        if link is not None:
            status_op = link.op
        elif status_op is None and "202" in responses and "location" in op.response_headers("202"):
            base = op.path.rstrip("/")
            for candidate in self.gets_by_path.values():
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

    def _status(
        self,
        op: _Operation,
        declared: dict[str, Any],
        status_op: _Operation | None,
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
                path = path.replace("{" + pname + "}", "{" + _identifier(pname) + "}")
            path = _encode_path_literals(path)
            missing = [k for k in re.findall(r"\{([^{}]+)\}", path) if k not in required]
            if missing:
                raise _Refused(
                    where,
                    f"x-countersign status: the 202 documents no Location, and the status "
                    f"operation's path needs {', '.join(missing)}, which this write's input "
                    "does not have",
                )
            out["path"] = path
        else:
            raise _Refused(
                where,
                "x-countersign status: no request to ask (no Location on a 202 and no "
                "status operation)",
            )
        out.update(declared)
        return out

    # --- results and checks ------------------------------------------------------------

    def _write_result(self, op: _Operation, converter: _SchemaConverter, warn) -> dict[str, Any]:
        """The result a write declares: from its 200, 201 or 202 answer, bounded."""
        found = op.json_response(WRITE_RESULT_CODES)
        if found is None:
            return {}
        raw, pointer, code = found
        node, pointer, stack, why, prefix = self._answer(raw, pointer, converter)
        if node is None:
            warn(pointer, f"no result proposed from the {code} answer: {why}")
            return {}
        return self._result(node, pointer, stack, converter, warn, prefix=prefix)

    def _answer(
        self, raw: Any, pointer: str, converter: _SchemaConverter
    ) -> tuple[dict[str, Any] | None, str, tuple[str, ...], str, str]:
        """An answer's object schema (references followed, allOf merged, null unwrapped)
        and the pointer to the record in it, or None and why there is none. A record
        wrapped in an object of its own (``{"incident": {...}}``) is read inside it."""
        try:
            node, pointer, stack = self._object(raw, pointer, (), converter)
            if not isinstance(node, dict):
                return None, pointer, stack, "the answer has no usable schema", ""
            prefix = ""
            properties = _dict(node.get("properties"))
            if len(properties) == 1:
                (key, inner_raw), where = (
                    next(iter(properties.items())),
                    f"{pointer}/properties/{escape_pointer_token(next(iter(properties)))}",
                )
                inner, inner_pointer, inner_stack = self._object(inner_raw, where, stack, converter)
                if isinstance(inner, dict) and "array" in converter._types(inner):
                    return None, pointer, stack, f"the answer is a list (in {key!r})", ""
                if isinstance(inner, dict) and _dict(inner.get("properties")):
                    node, pointer, stack = inner, inner_pointer, inner_stack
                    prefix = "/" + escape_pointer_token(key)
        except _Refused as exc:
            return None, pointer, (), f"its schema cannot be read ({exc.message})", ""
        why = self._no_record(node, pointer, stack, converter)
        return (None if why else node), pointer, stack, why, prefix

    def _object(
        self, raw: Any, pointer: str, stack: tuple[str, ...], converter: _SchemaConverter
    ) -> tuple[Any, str, tuple[str, ...]]:
        node, pointer, stack = self.doc.deref(raw, pointer, stack)
        if isinstance(node, dict):
            node = converter.merge_all_of(node, pointer, stack)
            node, pointer, stack, _ = converter._unwrap_nullable(node, pointer, stack)
        return node, pointer, stack

    def _no_record(
        self,
        node: dict[str, Any],
        pointer: str,
        stack: tuple[str, ...],
        converter: _SchemaConverter,
    ) -> str:
        """Why an answer's schema holds no single record, or ""."""
        properties = _dict(node.get("properties"))
        if "array" in converter._types(node):
            return "the answer is a list"
        if not properties:
            if any(isinstance(node.get(k), list) for k in ("oneOf", "anyOf")):
                return "the answer is one of several shapes"
            return "the answer has no named fields"
        if self._is_page(properties, pointer, stack, converter):
            return "the answer is one page of a list"
        return ""

    def _is_page(
        self,
        properties: dict[str, Any],
        pointer: str,
        stack: tuple[str, ...],
        converter: _SchemaConverter,
    ) -> bool:
        """A list in an envelope: no id, an array of records, paging fields."""
        considered = list(properties.items())[:MAX_RESULT_CANDIDATES]
        names = {snake_case(p) for p, _ in considered}
        if any(_looks_like_id(p) for p, _ in considered) or "id" in names:
            return False
        arrays = set()
        for prop, raw in considered:
            where = f"{pointer}/properties/{escape_pointer_token(prop)}"
            self.doc.budget.spend(where)
            try:
                peek, _, _ = self.doc.deref(raw, where, stack)
            except _Refused:
                continue
            if isinstance(peek, dict) and "array" in converter._types(peek):
                arrays.add(snake_case(prop))
        return bool(arrays) and bool(arrays & LIST_FIELDS or names & PAGE_FIELDS)

    def _result(
        self,
        node: dict[str, Any],
        pointer: str,
        stack: tuple[str, ...],
        converter: _SchemaConverter,
        warn,
        *,
        prefix: str = "",
    ) -> dict[str, Any]:
        """At most MAX_RESULT_FIELDS of the record's top-level scalar fields, ids first;
        nested objects and arrays are never proposed (a person adds what the agent
        needs), nor URLs or what looks like a secret. ``prefix`` points at the record
        inside the answer (``/incident``)."""
        ids: list[tuple[str, dict[str, Any]]] = []
        rest: list[tuple[str, dict[str, Any]]] = []
        nested: list[str] = []
        taken: set[str] = set()
        properties = _dict(node.get("properties"))
        if len(properties) > MAX_RESULT_CANDIDATES:
            warn(
                pointer,
                f"result: the answer documents {len(properties)} fields; only the first "
                f"{MAX_RESULT_CANDIDATES} were considered",
            )
        for prop, raw in list(properties.items())[:MAX_RESULT_CANDIDATES]:
            where = f"{pointer}/properties/{escape_pointer_token(prop)}"
            name = snake_case(prop)[:64].rstrip("_")
            try:
                found = self._result_field(prop, name, raw, where, stack, converter, prefix)
            except _Refused as exc:
                found = f"has a schema that cannot be read ({exc.message})"
            if found is None:
                continue
            if found is _NESTED:
                nested.append(prop)
                continue
            if isinstance(found, str):
                warn(where, f"result: {prop!r} {found}: not returned")
                continue
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name) or name in taken:
                warn(where, f"result: {prop!r} has no name of its own a result can use")
                continue
            taken.add(name)
            is_id = _looks_like_id(prop) or name == "id" or name.endswith("_id")
            (ids if is_id else rest).append((name, found))
        # The record's own id, then the other ids; then what a follow-up reads (status,
        # state, version), then the document's order.
        ids.sort(key=lambda item: item[0] != "id")
        rest.sort(key=lambda item: item[0] not in STATE_FIELDS)
        ordered = ids + rest
        if len(ordered) > MAX_RESULT_FIELDS:
            more = [name for name, _ in ordered[MAX_RESULT_FIELDS:]]
            warn(
                pointer,
                f"result: at most {MAX_RESULT_FIELDS} fields are proposed (ids, then status "
                "and version fields, then the document's order); "
                f"{len(more)} more left out: {_few(more)}",
            )
        if nested:
            warn(
                pointer,
                f"result: nested objects and arrays are never proposed ({_few(nested)}): "
                "add the fields the agent needs by hand (result: {name: {pointer: "
                f"{prefix}/{escape_pointer_token(nested[0])}/<field or index>, type: ...}}}})",
            )
        return dict(ordered[:MAX_RESULT_FIELDS])

    def _result_field(
        self,
        prop: str,
        name: str,
        raw: Any,
        pointer: str,
        stack: tuple[str, ...],
        converter: _SchemaConverter,
        prefix: str,
    ) -> dict[str, Any] | str | None:
        """One field's declaration, _NESTED, a reason it is not returned, or None for a
        field no answer carries (writeOnly). ``name`` is ``prop`` in snake_case."""
        self.doc.budget.spend(pointer)
        node, pointer, stack = self.doc.deref(raw, pointer, stack)
        if not isinstance(node, dict):
            return "has no usable schema"
        if node.get("writeOnly") is True:
            return None
        node = converter.merge_all_of(node, pointer, stack)
        node, pointer, stack, _ = converter._unwrap_nullable(node, pointer, stack)
        types = [t for t in converter._types(node) if t != "null"]
        values: list[Any] | None = None
        if isinstance(node.get("enum"), list):
            values = [v for v in node["enum"] if v is not None]
        elif node.get("const") is not None:
            values = [node["const"]]
        if not types and values:
            types = sorted({_json_type(v) for v in values})
        if {"object", "array"} & set(types) or (
            not types and any(k in node for k in ("oneOf", "anyOf"))
        ):
            return _NESTED
        if len(types) != 1 or types[0] not in RESULT_TYPES:
            return "has no single scalar type"
        kind = types[0]
        fmt = node.get("format")
        if (isinstance(fmt, str) and fmt.lower() in URL_FORMATS) or (
            name in URL_NAMES or name.endswith(URL_SUFFIXES)
        ):
            return "is a URL (results never carry URLs: the filter removes them)"
        if _SECRET_FIELD.search(name):
            return "looks like a secret"
        spec: dict[str, Any] = {
            "pointer": f"{prefix}/{escape_pointer_token(prop)}",
            "type": kind,
        }
        if kind == "string":
            given = node.get("maxLength")
            length = (
                given
                if isinstance(given, int) and not isinstance(given, bool) and given >= 1
                else DEFAULT_MAX_LENGTH
            )
            longest = [len(v) for v in values or [] if isinstance(v, str)]
            spec["max_length"] = min(max([length, *longest]), MAX_RESULT_LENGTH)
        if (
            values
            and kind != "number"
            and len(values) <= MAX_RESULT_ENUM
            and all(_json_type(v) == kind for v in values)
            and not any(isinstance(v, int) and abs(v) > SAFE_INTEGER for v in values)
        ):
            spec["enum"] = list(dict.fromkeys(values))
        return spec

    def _linked_check(
        self, op: _Operation, properties: dict[str, Any], result: dict[str, Any], warn
    ) -> _Link | None:
        """The read a link on the 202 (or 201) names, with its input taken from this
        write's input and answer. A link that cannot be followed exactly is said and not
        used: nothing is guessed."""
        responses = op.responses()
        for code in ("202", "201"):
            if code not in responses:
                continue
            response, response_pointer = responses[code]
            links = _dict(response.get("links"))
            found = op.json_response((code,)) if links else None

            def documented(pointer: str, found=found) -> str:
                return self._type_at(found[0], found[1], pointer) if found else ""

            for link_name, raw in links.items():
                where = f"{response_pointer}/links/{escape_pointer_token(link_name)}"
                self.doc.budget.spend(where)
                try:
                    link, where, _ = self.doc.deref(raw, where)
                except _Refused as exc:
                    warn(where, f"link {link_name!r}: {exc.message}")
                    continue
                if not isinstance(link, dict):
                    continue
                target = self._link_target(link, link_name, where, warn)
                if target is None:
                    continue
                read = self.reads.get(target.path)
                if read is None:
                    warn(
                        where,
                        f"link {link_name!r}: {target.describe()} is not proposed as a read "
                        "in this import: check_with not wired",
                    )
                    continue
                wired = self._link_inputs(
                    link, link_name, where, read, properties, result, warn, documented
                )
                if wired is not None:
                    inputs, fields, added = wired
                    return _Link(link_name, target, read, inputs, fields, added)
        return None

    def _type_at(self, raw: Any, schema_pointer: str, pointer: str) -> str:
        """What the answer's schema says is at ``pointer``: a result type, "nested", or
        "" when it does not say."""
        converter = _SchemaConverter(self.doc, lambda *_: None)
        try:
            node, where, stack = self._object(raw, schema_pointer, (), converter)
            for raw_token in pointer[1:].split("/"):
                token = raw_token.replace("~1", "/").replace("~0", "~")
                self.doc.budget.spend(where)
                if not isinstance(node, dict):
                    return ""
                if "array" in converter._types(node) and token.isdigit():
                    child, child_where = node.get("items"), f"{where}/items"
                else:
                    props = _dict(node.get("properties"))
                    if token not in props:
                        return ""
                    child = props[token]
                    child_where = f"{where}/properties/{escape_pointer_token(token)}"
                node, where, stack = self._object(child, child_where, stack, converter)
        except _Refused:
            return ""
        if not isinstance(node, dict):
            return ""
        types = [t for t in converter._types(node) if t != "null"]
        if {"object", "array"} & set(types):
            return "nested"
        return types[0] if len(types) == 1 and types[0] in RESULT_TYPES else ""

    def _link_target(self, link: dict[str, Any], name: str, where: str, warn) -> _Operation | None:
        op_id, op_ref = link.get("operationId"), link.get("operationRef")
        target = None
        if isinstance(op_id, str):
            target = self.gets_by_id.get(op_id)
            named = repr(op_id)
        elif isinstance(op_ref, str):
            target = self._operation_ref(op_ref)
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

    def _operation_ref(self, ref: str) -> _Operation | None:
        """``#/paths/~1jobs~1{id}/get`` → that GET; nothing outside the document."""
        if not ref.startswith("#/paths/"):
            return None
        tokens = ref[2:].split("/")
        if len(tokens) != 3 or tokens[2] != "get":
            return None
        path = unquote(tokens[1]).replace("~1", "/").replace("~0", "~")
        return self.gets_by_path.get(path)

    def _link_inputs(
        self,
        link: dict[str, Any],
        link_name: str,
        where: str,
        read: _Draft,
        properties: dict[str, Any],
        result: dict[str, Any],
        warn,
        documented,
    ) -> tuple[dict[str, Any], dict[str, Any], tuple[str, ...]] | None:
        """check_with's input for every input the read requires, from the link's
        parameters; the result fields with the fields it needs added."""
        given: dict[str, Any] = {}
        for key, expression in _dict(link.get("parameters")).items():
            location, _, pname = str(key).rpartition(".")
            if location and location != "path":
                warn(where, f"link {link_name!r}: {key!r} is not sent by a read: not used")
                continue
            given[_identifier(pname)] = expression
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
            source = self._link_source(
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
        self,
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
            name = _identifier(text.removeprefix("$request.path."))
            return {"$input": name} if name in properties else f"{text} is no input of this write"
        if text.startswith("$request.body#/"):
            token = text.removeprefix("$request.body#/").replace("~1", "/").replace("~0", "~")
            if token in properties and "/" not in text.removeprefix("$request.body#/"):
                return {"$input": token}
            return f"{text} is no top-level input of this write"
        wanted = _scalar_type(param_schema)
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
        self, op: _Operation, kind: str, definition: dict[str, Any], properties: dict[str, Any]
    ) -> _Draft | None:
        """The read of the very GET a change already reads (update, replace, delete, a
        readable create): it checks an unknown outcome with the same input."""
        if kind == "invoke" or not isinstance(definition.get("read"), dict):
            return None
        read = self.reads.get(op.path)
        if read is None:
            return None
        needed = read.definition["input_schema"].get("required") or []
        return read if all(key in properties for key in needed) else None

    # --- reads ---------------------------------------------------------------------------

    def propose_read(self, op: _Operation) -> _Draft | str:
        """A GET that reads one resource as a disabled read action, or why it is not
        proposed (a list, a search, no JSON answer)."""
        warnings: list[dict[str, str]] = []

        def warn(pointer: str, message: str) -> None:
            item = _problem(pointer, message)
            if item not in warnings:
                warnings.append(item)

        xc = _x_countersign(op)
        base = f"{op.pointer}/x-countersign"
        if "kind" in xc:
            raise _Refused(f"{base}/kind", "x-countersign kind is for writes: a GET is a read")
        if xc.get("class", "observation") != "observation":
            raise _Refused(
                f"{base}/class",
                f"x-countersign declares a GET {xc['class']}: a read is an observation",
            )
        for key in ("version", "precondition_field", "retry", "status_operation", "status"):
            if key in xc:
                warn(f"{base}/{key}", f"x-countersign {key} is for writes: not used by a read")
        placeholders = re.findall(r"\{([^{}]+)\}", op.path)
        if not placeholders:
            return "no path parameter names one resource: lists and searches are not proposed"
        found = op.json_response(("200",))
        if found is None:
            return "no JSON 200 answer: nothing to return"
        converter = _SchemaConverter(self.doc, warn)
        raw, answer_pointer, _ = found
        node, answer_pointer, stack, why, prefix = self._answer(raw, answer_pointer, converter)
        if node is None:
            return f"{why}: not proposed"
        properties: dict[str, Any] = {}
        required: list[str] = []
        target = op.path
        path_params = set(placeholders)
        for param, pointer in op.parameters():
            pname, where = param["name"], param["in"]
            if where == "path":
                input_name, properties[input_name] = _path_input(converter, param, pointer)
                required.append(input_name)
                if input_name != pname:
                    target = target.replace("{" + pname + "}", "{" + input_name + "}")
                path_params.discard(pname)
            elif where == "query":
                if param.get("required") is True:
                    return (
                        f"required query parameter {pname!r}: a search is not proposed "
                        "(a catalog read's target has no query string)"
                    )
                warn(
                    pointer,
                    f"query parameter {pname!r} is not sent (a catalog read's target has no "
                    "query string)",
                )
            elif where == "header":
                if pname.lower() in HANDLED_HEADERS | {"if-none-match", "if-match"}:
                    continue
                if param.get("required") is True:
                    raise _Refused(
                        pointer, f"required header {pname!r}: a read sends no headers of its own"
                    )
                warn(pointer, f"header {pname!r} is not sent by a read")
            else:
                warn(pointer, f"cookie parameter {pname!r} is not sent")
        target = _undocumented_path_params(
            path_params, target, properties, required, converter, warn, op.pointer
        )
        result = self._result(node, answer_pointer, stack, converter, warn, prefix=prefix)
        if not result:
            return "the answer has no top-level field a result can declare: not proposed"
        if op.node.get("deprecated") is True:
            warn(op.pointer, "the operation is deprecated")
        name = self._name(op, xc, warn)
        definition: dict[str, Any] = {
            "title": self._title(op, name, warn),
            "connector": self.connector,
            "kind": "read",
            "consequence_class": "observation",
            "enabled": False,
        }
        description = op.text("description")
        if description:
            definition["description"] = description[:2000]
        definition["card"], drafted = self._card(op, xc, warn, result)
        definition["input_schema"] = {
            "type": "object",
            "additionalProperties": False,
            "required": list(dict.fromkeys(required)),
            "properties": properties,
        }
        encoded = _encode_path_literals(target)
        if encoded != target:
            warn(
                op.pointer,
                f"the path is sent percent-encoded ({encoded}): characters such as '@' or "
                "':' are not used raw in catalog paths; check the upstream accepts it",
            )
        definition["target"] = encoded
        definition["result"] = result
        warn(
            op.pointer,
            "a read: if what it returns is private, mark it sensitive: true (a reviewer "
            "then approves every call); add scope rules for the records an agent may see",
        )
        return _Draft(
            op=op,
            name=name,
            kind="read",
            consequence_class="observation",
            class_source="x-countersign" if "class" in xc else "method",
            class_lowered_from="",
            definition=definition,
            warnings=warnings,
            status_operation="",
            card_result_drafted=drafted,
        )


_NESTED = object()  # a field holding an object or an array: never proposed


@dataclass
class _Link:
    """An OpenAPI link from a write's answer to the read that checks it."""

    name: str
    op: _Operation
    read: _Draft
    inputs: dict[str, Any]
    result: dict[str, Any]  # the write's result fields, with those the check needs
    added: tuple[str, ...]


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if isinstance(value, str) else "other"


def _scalar_type(schema: dict[str, Any]) -> str:
    """The result type of a value an input schema takes (string unless it says)."""
    types = [t for t in sorted(_types_of(schema)) if t != "null"]
    return types[0] if len(types) == 1 and types[0] in RESULT_TYPES else "string"


def _few(names: list[str], count: int = 8) -> str:
    shown = ", ".join(names[:count])
    return shown + (f" and {len(names) - count} more" if len(names) > count else "")


def result_sentence(result: dict[str, Any]) -> str:
    """The card's ``result`` drafted from the declared fields: it names them all, or as
    many as a card line holds."""
    head, names = "Only these fields of the upstream's answer: ", list(result)
    shown: list[str] = []
    for name in names:
        if len(head) + len(", ".join([*shown, name])) > 440:
            break
        shown.append(name)
    more = len(names) - len(shown)
    return head + ", ".join(shown) + (f" and {more} more" if more else "") + "."


# --- the import -----------------------------------------------------------------------------


def import_openapi(
    text: str,
    *,
    connector: str,
    actor: str,
    source_name: str = "<upload>",
    dry_run: bool = False,
    create_connector: bool = False,
    prefix: str = "",
    only: list[str] | None = None,
    tags: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> ImportReport:
    """Propose one disabled action per write operation and per GET of one resource;
    store them all or none.

    ``prefix`` is put before every proposed name (names are unique in the catalog, and
    two APIs often use the same ones); ``only`` (operationIds) and ``tags`` select the
    operations considered; ``headers`` gives the values of documented headers an action
    always sends (a ``From`` the upstream requires).

    Raises OpenAPIImportError when the document as a whole is refused (not OpenAPI 3,
    references outside the document, unknown connector). Single operations that cannot
    become a narrow action are listed in ``report.refused`` and not stored.
    """
    budget = _Budget()
    try:
        return _import(
            text,
            budget,
            connector=connector,
            actor=actor,
            source_name=source_name,
            dry_run=dry_run,
            create_connector=create_connector,
            prefix=prefix,
            only=only,
            tags=tags,
            headers=headers or {},
        )
    except _Exhausted as exc:
        raise OpenAPIImportError([CatalogProblem(exc.pointer, exc.message)], source_name) from None
    except RecursionError:
        # Every walk is bounded in depth; this is the backstop, never a traceback.
        raise OpenAPIImportError(
            [CatalogProblem("", "the document is nested too deeply to import")], source_name
        ) from None


def _import(
    text: str,
    budget: _Budget,
    *,
    connector: str,
    actor: str,
    source_name: str,
    dry_run: bool,
    create_connector: bool,
    prefix: str,
    only: list[str] | None,
    tags: list[str] | None,
    headers: dict[str, str],
) -> ImportReport:
    for name, value in headers.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,63}", name) or not re.fullmatch(
            r"[\x20-\x7E]{0,200}", value
        ):
            raise OpenAPIImportError(
                [CatalogProblem("", f"header {name!r}: a token name and printable ASCII value")],
                source_name,
            )
    if prefix and not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", prefix):
        raise OpenAPIImportError(
            [CatalogProblem("", f"prefix {prefix!r}: lowercase letters, digits and _ only")],
            source_name,
        )
    root = _parse(text, source_name, budget)
    notes: list[str] = []
    if root.get("swagger") == "2.0":
        root, notes = swagger_to_openapi(root)
        notes.insert(0, "converted from Swagger 2.0 to OpenAPI 3.0 before importing")
    doc = _Document(root, source_name, budget)
    report = ImportReport(connector=connector, source_name=source_name, dry_run=dry_run)
    report.warnings.extend(_problem("/swagger", note) for note in notes)
    for key in ("webhooks", "x-countersign"):
        if key in doc.root:
            report.warnings.append(_problem(f"/{key}", f"{key} at the top level is not imported"))
    proposer = _Proposer(doc, connector, prefix, headers)
    selected = _selected(doc, proposer.operations, only=only, tags=tags)

    def attempt(op: _Operation, make) -> _Draft | str | None:
        try:
            return make(op)
        except _Refused as exc:
            reasons = [_problem(exc.pointer, exc.message)]
        except (TypeError, AttributeError, ValueError, KeyError) as exc:
            # A part of the operation that is not shaped as OpenAPI says (a list where a
            # mapping belongs, ...): refuse the operation rather than guess.
            reasons = [_problem(op.pointer, f"the operation is malformed ({type(exc).__name__})")]
        report.refused.append(RefusedOperation(op.label, _action_name(op)[0], reasons))
        return None

    # Reads first, so that a write can name the read that checks it.
    drafts: list[_Draft] = []
    for op in selected:
        budget.check_time(op.pointer)
        if op.method == "head":
            report.reads.append(
                ListedRead(op.describe(), "a HEAD answers without a body: not proposed")
            )
        elif op.method == "get":
            made = attempt(op, proposer.propose_read)
            if isinstance(made, str):
                report.reads.append(ListedRead(op.describe(), made))
            elif made is not None:
                drafts.append(made)
                proposer.reads[op.path] = made
    for op in selected:
        budget.check_time(op.pointer)
        if op.method in ("get", "head"):
            continue
        if op.method not in WRITE_METHODS:
            report.refused.append(
                RefusedOperation(
                    op.label,
                    op.operation_id,
                    [_problem(op.pointer, f"{op.method.upper()} is not an action")],
                )
            )
            continue
        made = attempt(op, proposer.propose)
        if isinstance(made, _Draft):
            drafts.append(made)
    order = {op.pointer: i for i, op in enumerate(selected)}
    drafts.sort(key=lambda d: order[d.op.pointer])
    names: dict[str, str] = {}
    unique: list[_Draft] = []
    for draft in drafts:
        if draft.name in names:
            report.refused.append(
                RefusedOperation(
                    draft.op.label,
                    draft.name,
                    [
                        _problem(
                            draft.op.pointer,
                            f"the name {draft.name!r} is already {names[draft.name]}",
                        )
                    ],
                )
            )
            draft.outcome = "refused"
            continue
        names[draft.name] = f"proposed for {draft.op.label}"
        unique.append(draft)

    with transaction.atomic():
        report.connector_created = _ensure_connector(doc, connector, create_connector)
        # The reads are checked first: a write names only a read that is proposed.
        accepted = _check_drafts([d for d in unique if d.kind == "read"], report, budget)
        accepted += _check_drafts([d for d in unique if d.kind != "read"], report, budget)
        report.proposed.sort(key=lambda p: order[p.pointer])
        if not dry_run:
            _store(accepted, actor=actor)
        stored_names = {p.name for p in report.proposed if p.stored in ("created", "updated")}
        if not dry_run and (stored_names or report.connector_created):
            audit_record(
                kind="openapi.imported",
                actor=actor,
                data={
                    "source": source_name,
                    "connector": connector,
                    "connector_created": report.connector_created,
                    "stored": sorted(stored_names),
                    "refused": sorted(r.operation for r in report.refused),
                },
            )
        if dry_run:
            transaction.set_rollback(True)
    return report


def _selected(
    doc: _Document, operations: list[_Operation], *, only: list[str] | None, tags: list[str] | None
) -> list[_Operation]:
    """The operations an import considers: all, or those named (operationIds) or tagged.
    A name that matches nothing refuses the import: a typo must not import nothing."""
    if not only and not tags:
        return operations
    wanted_ids = set(only or [])
    wanted_tags = set(tags or [])
    unknown = sorted(wanted_ids - {op.operation_id for op in operations})
    if unknown:
        doc._refuse("/paths", f"--only names no operation of this document: {', '.join(unknown)}")
    known_tags = {t for op in operations for t in _names(op.node.get("tags"))}
    missing_tags = sorted(wanted_tags - known_tags)
    if missing_tags:
        doc._refuse("/paths", f"--tag names no tag of this document: {', '.join(missing_tags)}")
    return [
        op
        for op in operations
        if op.operation_id in wanted_ids or wanted_tags & set(_names(op.node.get("tags")))
    ]


def _ensure_connector(doc: _Document, name: str, create: bool) -> bool:
    if Connector.objects.filter(name=name).exists():
        return False
    if not create:
        doc._refuse("", f"unknown connector {name!r}: create it first (or pass --create-connector)")
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", name):
        doc._refuse("", f"{name!r} is not a connector name (lowercase slug)")
    servers = doc.root.get("servers") or []
    server = servers[0] if isinstance(servers, list) and servers else {}
    url = server.get("url", "") if isinstance(server, dict) else ""
    for var, spec in _dict(_dict(server).get("variables")).items():
        if isinstance(spec, dict) and isinstance(spec.get("default"), str):
            url = url.replace("{" + var + "}", spec["default"])
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^/?#@{}]+(/[^?#{}]*)?", url):
        doc._refuse(
            "/servers/0/url",
            f"cannot create connector {name!r}: servers[0].url ({url!r}) is not an absolute "
            "http(s) URL",
        )
    Connector.objects.create(name=name, base_url=url.rstrip("/"))
    return True


def _check_drafts(
    drafts: list[_Draft], report: ImportReport, budget: _Budget
) -> list[tuple[_Draft, ProposedAction]]:
    """Validate every proposal with the catalog's own checks; refuse what fails."""
    accepted = []
    existing = {
        a.name: a
        for a in Action.objects.filter(name__in=[d.name for d in drafts]).select_related(
            "connector"
        )
    }
    for draft in drafts:
        budget.check_time(draft.op.pointer)
        draft.outcome = "refused"
        problems = _follow_up_checked(draft)
        if problems:
            report.refused.append(
                RefusedOperation(
                    draft.op.label,
                    draft.name,
                    [_problem(draft.op.pointer, f"proposed definition {p}") for p in problems],
                )
            )
            continue
        current = existing.get(draft.name)
        if current is not None and current.source != Action.Source.OPENAPI:
            report.refused.append(
                RefusedOperation(
                    draft.op.label,
                    draft.name,
                    [
                        _problem(
                            draft.op.pointer,
                            f"an action named {draft.name!r} already exists (from "
                            f"{current.get_source_display().lower()}): rename it with "
                            "x-countersign: {name: ...}",
                        )
                    ],
                )
            )
            continue
        if current is not None and current.connector.name != report.connector:
            # Names are unique in the catalog. Another API's action of the same name is
            # never re-pointed here: that would be a new action wearing a reviewed name.
            report.refused.append(
                RefusedOperation(
                    draft.op.label,
                    draft.name,
                    [
                        _problem(
                            draft.op.pointer,
                            f"an action named {draft.name!r} already exists for connector "
                            f"{current.connector.name!r}: names are unique in the catalog; "
                            f"import with a prefix (--prefix {report.connector}_)",
                        )
                    ],
                )
            )
            continue
        proposed = ProposedAction(
            name=draft.name,
            operation=draft.op.label,
            kind=draft.kind,
            consequence_class=draft.consequence_class,
            warnings=draft.warnings,
            class_source=draft.class_source,
            class_lowered_from=draft.class_lowered_from,
            status_operation=draft.status_operation,
            definition=draft.definition,
            pointer=draft.op.pointer,
        )
        report.proposed.append(proposed)
        draft.outcome = "accepted"
        if current is not None and (current.enabled or current.class_confirmed):
            draft.outcome = "kept"
            try:
                same = digest(normalize(draft.definition)) == current.digest
            except CanonicalJSONError:
                same = False
            if same:
                proposed.stored = "unchanged"
            else:
                proposed.warnings.append(
                    _problem(
                        draft.op.pointer,
                        "not stored: an admin has reviewed this action; apply changes from "
                        "the document by hand",
                    )
                )
            continue
        accepted.append((draft, proposed))
    return accepted


def _follow_up_checked(draft: _Draft) -> list[CatalogProblem]:
    """The catalog's problems with a draft. Its check_with names a read proposed with it
    (checked against that proposal), or one an admin keeps in the catalog; when that read
    is not proposed after all, or does not take the input, the check is dropped and said."""
    read = draft.check_read
    targets: dict[str, dict[str, Any]] = {}
    if read is not None and "check_with" in draft.definition:
        if read.outcome == "accepted":
            targets = {read.name: read.definition}
        elif read.outcome != "kept":
            _drop_check_with(draft, f"the read {read.name} is not proposed")
    problems = validate_action_definition(draft.name, draft.definition, follow_up_targets=targets)
    wrong = [p for p in problems if p.pointer.startswith("/check_with")]
    if wrong:
        _drop_check_with(draft, "; ".join(f"{p.pointer}: {p.message}" for p in wrong))
        problems = validate_action_definition(draft.name, draft.definition)
    return problems


def _drop_check_with(draft: _Draft, why: str) -> None:
    definition = draft.definition
    check = definition.pop("check_with", None) or {}
    result = definition.get("result") or {}
    for name in draft.link_fields:
        result.pop(name, None)
    if not result:
        definition.pop("result", None)
    if draft.card_result_drafted:
        definition["card"]["result"] = result_sentence(result) if result else ""
    draft.check_read, draft.link_fields = None, ()
    draft.warn(draft.op.pointer, f"check_with {check.get('action', '')} not wired: {why}")


def _store(accepted: list[tuple[_Draft, ProposedAction]], *, actor: str) -> None:
    for draft, proposed in accepted:
        _, change = action_define(
            name=draft.name,
            definition=draft.definition,
            actor=actor,
            source=Action.Source.OPENAPI,
            # The document's author may declare a class, but only a person here confirms it.
            class_confirmed=False,
            lint=draft.warnings,
        )
        proposed.stored = change
