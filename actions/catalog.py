"""Loading catalog files: validate everything first, then write all of it or nothing."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.contrib.auth.models import Group
from django.db import transaction
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from actions.lib.audit import audit_record

from .lib.canonical import CanonicalJSONError, digest, escape_pointer_token, normalize
from .lib.formats import schema_format_problems
from .lib.http import FORM_CONTENT_TYPE
from .models import Action, ActionVersion, Connector, DecisionRule
from .policy.engine import catalog_types, policy_may_match
from .policy.reviewers import reviewers_problems, section_groups, section_rules
from .policy.schema import action_types, document_problems
from .policy.sources import MAX_TEXT_CHARS, PARTS, check_texts, part_text
from .policy.versions import policies_in_force, policy_set_replace, policy_version_current
from .rules import rule_problem
from .spec import VERIFIABLE_KINDS, pattern_problem
from .text import ENGLISH, languages_of, localized

SCHEMA_PATH = Path(__file__).with_name("catalog.schema.json")
_PATH_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class CatalogProblem:
    pointer: str
    message: str
    line: int | None = None
    # For a problem inside an inline text (a policy's Cedar): its line in that text.
    text_line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.pointer or '/'}: {self.message}"


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
    # The decision rules now in force, when the file has a ``reviewers:`` section (None:
    # it has none, and the rules in force were left as they were).
    decision_rules: list[str] | None = None
    groups_created: list[str] = field(default_factory=list)
    # The policy set's version in force after the load, when the file has a
    # ``policies:`` section (None: it has none, and the set in force was left as it
    # was); ``policies_changed``: the load made that version.
    policies: int | None = None
    policies_changed: bool = False


def catalog_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


@functools.cache
def _catalog_validator() -> Draft202012Validator:
    """Built once a process: the schema file ships with the code."""
    return Draft202012Validator(catalog_schema())


# libyaml's safe loader when PyYAML was built with it: the same documents, ~10x faster.
_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):
    """Safe loading that refuses duplicate keys: YAML would silently keep the last one,
    and a catalog whose meaning depends on which duplicate wins is not reviewable."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _StrictLoader.construct_mapping
)


MAX_CATALOG_BYTES = 2 * 1024 * 1024


def _refuse_aliases(text: str) -> None:
    """Aliases let a few bytes expand into millions of nodes ("billion laughs"); a catalog
    has no need for them, so they are refused before anything is built."""
    for event in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases are not allowed in a catalog", event.start_mark
            )


def parse_catalog_text(
    text: str, source: str, *, allow_aliases: bool = False, max_bytes: int = MAX_CATALOG_BYTES
) -> dict[str, Any]:
    """Parse YAML strictly. ``allow_aliases`` and ``max_bytes`` are for callers that bound
    the document's size themselves (the OpenAPI importer counts nodes)."""
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise CatalogError(
            source, [CatalogProblem("", f"the file is larger than {max_bytes // 2**20} MiB")]
        )
    try:
        if not allow_aliases:
            _refuse_aliases(text)
        document = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise CatalogError(
            source,
            [
                CatalogProblem(
                    "",
                    f"not valid YAML at {where}: {getattr(exc, 'problem', exc)}",
                    mark.line + 1 if mark else None,
                )
            ],
        ) from None
    if not isinstance(document, dict):
        raise CatalogError(source, [CatalogProblem("", "the file must hold a mapping")])
    return document


def line_of(text: str, pointer: str) -> int | None:
    """The 1-based line where ``pointer`` (or its nearest existing parent) starts."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for token in [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == token), None)
            if node is None:
                # Point at the mapping that lacks the key.
                return line
        elif (
            isinstance(node, yaml.SequenceNode) and token.isdigit() and int(token) < len(node.value)
        ):
            node = node.value[int(token)]
        else:
            break
    if node is not None:
        line = node.start_mark.line + 1
    return line


def _pointer(path) -> str:
    return "".join(f"/{escape_pointer_token(p)}" for p in path)


def _closest(error):
    """For "none of the alternatives fit" (oneOf, anyOf), the alternative's own error that
    says most precisely what is wrong (``approvers: 0 is less than 1``, not "not valid
    under any of the given schemas")."""
    while error.validator in ("oneOf", "anyOf") and error.context:
        # The alternative that got furthest into the value is the one that was meant (a
        # mapping was not meant to be the string "none").
        error = max(error.context, key=lambda e: len(e.relative_path))
    return error


def validate_catalog(
    document: dict[str, Any],
    source: str,
    *,
    follow_up_targets: dict[str, dict[str, Any]] | None = None,
    policy_origins: dict[tuple[str, int], str] | None = None,
) -> None:
    """Raise CatalogError with every problem found; return quietly if the file is sound.

    ``follow_up_targets`` are definitions about to be stored beside this document (an
    import's proposed reads): a ``check_with`` may name one of them. ``policy_origins``:
    the ``.cedar`` file each policy text came from (``catalog_document`` reads them),
    by (part, position), so a problem names the file and its line."""
    problems: list[CatalogProblem] = []
    validator = _catalog_validator()
    for error in sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path)):
        error = _closest(error)
        problems.append(CatalogProblem(_pointer(error.absolute_path), error.message))
    if problems:
        raise CatalogError(source, problems)

    known_connectors = set(document.get("connectors", {})) | set(
        Connector.objects.values_list("name", flat=True)
    )
    for name, action in (document.get("actions") or {}).items():
        base = f"/actions/{escape_pointer_token(name)}"
        problems.extend(_check_action(base, action, known_connectors))
    actions = document.get("actions") or {}
    problems.extend(_check_follow_ups(document, follow_up_targets or {}))
    if "reviewers" in document:
        problems.extend(_check_reviewers(document, known_connectors))
    if "policies" in document:
        problems.extend(_check_policies(document, policy_origins or {}))
    elif actions:
        problems.extend(_check_policies_in_force(document))
    for i, name in enumerate(document.get("unconfirmed_classes") or []):
        if name not in actions:
            problems.append(
                CatalogProblem(f"/unconfirmed_classes/{i}", f"{name!r} is no action of this file")
            )
        elif actions[name].get("enabled", True):
            problems.append(
                CatalogProblem(
                    f"/actions/{escape_pointer_token(name)}/enabled",
                    "an action whose class is unconfirmed cannot be enabled",
                )
            )
    if problems:
        raise CatalogError(source, problems)


def _check_reviewers(document: dict[str, Any], connectors: set[str]) -> list[CatalogProblem]:
    """The ``reviewers:`` section against this file's actions and the stored ones, and the
    groups there are (actions/policy/reviewers.py)."""
    section = document["reviewers"] or {}
    actions = dict(Action.objects.values_list("name", "definition"))
    actions.update(document.get("actions") or {})
    wanted = section_groups(section)
    existing = set(Group.objects.filter(name__in=wanted).values_list("name", flat=True))
    return [
        CatalogProblem(pointer, message)
        for pointer, message in reviewers_problems(
            section, actions=actions, connectors=connectors, groups_existing=existing
        )
    ]


def _merged_actions(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The stored actions' definitions, with this file's over them."""
    actions = dict(Action.objects.values_list("name", "definition"))
    actions.update(document.get("actions") or {})
    return actions


def _check_policies(
    document: dict[str, Any], origins: dict[tuple[str, int], str]
) -> list[CatalogProblem]:
    """The ``policies:`` section against this file's actions and the stored ones, and
    the groups there are or will be (actions/policy/sources.py): each problem with its
    line, in the file it came from or in the catalog."""
    section = document["policies"] or {}
    out: list[CatalogProblem] = []
    texts = []
    for part in PARTS:
        for i, item in enumerate(section.get(part) or []):
            if "text" not in item:
                out.append(
                    CatalogProblem(
                        f"/policies/{part}/{i}/file",
                        "policy files are read relative to the catalog file: load the "
                        "catalog from its file (manage.py load_catalog FILE)",
                    )
                )
                continue
            texts.append((part, i, item["text"], origins.get((part, i), "")))
    if out:
        return out
    declared = set(section.get("groups") or [])
    declared |= set(((document.get("reviewers") or {}).get("groups")) or [])

    def groups_existing(wanted: set[str]) -> set[str]:
        return declared | set(Group.objects.filter(name__in=wanted).values_list("name", flat=True))

    checked = check_texts(
        texts, types=catalog_types(_merged_actions(document)), groups_existing=groups_existing
    )
    for problem in checked.problems:
        if problem.origin:
            where = (
                f"{problem.origin}, line {problem.line}: "
                if problem.line
                else f"{problem.origin}: "
            )
            out.append(
                CatalogProblem(
                    f"/policies/{problem.part}/{problem.item}/file", where + problem.message
                )
            )
        else:
            out.append(
                CatalogProblem(
                    f"/policies/{problem.part}/{problem.item}/text",
                    problem.message,
                    text_line=problem.line,
                )
            )
    return out


# What of an action the policies' types are made of.
_TYPED_KEYS = ("kind", "consequence_class", "input_schema", "document")


def _check_policies_in_force(document: dict[str, Any]) -> list[CatalogProblem]:
    """A file without ``policies:`` leaves the set in force as it is: the actions it
    defines must not break it (a field a policy reads, removed from a document). Only
    when they could: an action whose types are unchanged, or a new one no policy's scope
    can reach, is not checked again (an import proposes hundreds)."""
    current = policy_version_current()
    if current is None or not (current.enforce.strip() or current.shadow.strip()):
        return []
    stored = dict(Action.objects.values_list("name", "definition"))
    touched = {
        name: definition
        for name, definition in (document.get("actions") or {}).items()
        if name not in stored
        or any(stored[name].get(key) != definition.get(key) for key in _TYPED_KEYS)
    }
    if not touched:
        return []
    compiled = policies_in_force()
    if not compiled.problem and compiled.version == current.number:
        changed = [n for n in touched if n in stored]
        new = [action_types(n, touched[n]) for n in touched if n not in stored]
        reached = any(
            policy_may_match(policy.est, action)
            for policy in compiled.policies.values()
            for action in new
        )
        if not changed and not reached:
            return []
    checked = check_texts(
        [(part, None, getattr(current, part), "") for part in PARTS],
        types=catalog_types({**stored, **(document.get("actions") or {})}),
    )
    return [
        CatalogProblem(
            "",
            f"the policies in force (version {current.number}) would not hold with these "
            f"actions: {p.part}, line {p.line}: {p.message} (load a policies: section that "
            "fits them)",
        )
        for p in checked.problems
    ]


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
    write = action.get("write") or {}
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
    out.extend(_check_input_strictness(base, schema, path_fields=_path_fields(action)))
    out.extend(_check_patterns(base, schema))
    # A format with no strict check would refuse every value: say so now, not at a plan.
    for where, message in sorted(schema_format_problems(schema, "/input_schema")):
        problem(where, message)
    card = action.get("card") or {}
    if action.get("enabled", True):
        for key in ("effect", "scope", "result", "consent", "retry"):
            texts = card.get(key)
            texts = list(texts.values()) if isinstance(texts, dict) else [texts or ""]
            if not all(str(text).strip() for text in texts):
                problem(f"/card/{key}", "an enabled action needs a complete card")
    out.extend(_check_reads_and_results(base, action, properties))
    if "document" in action:
        for where, message in document_problems(kind, action["document"]):
            problem(f"/document{where}", message)
        for where, message in sorted(schema_format_problems(action["document"], "/document")):
            problem(where, message)
    out.extend(_check_languages(base, action))
    approval = action.get("approval") or {}
    if (
        isinstance(approval, dict)
        and approval.get("session_grant")
        and action["consequence_class"] not in ("observation", "reversible")
    ):
        problem(
            "/approval/session_grant",
            "only observation and reversible actions may run under a session grant",
        )
    for key in ("scope", "eligibility"):
        for i, rule in enumerate(action.get(key) or []):
            if (why := rule_problem(rule)) is not None:
                problem(f"/{key}/{i}", why)
    if action.get("eligibility") and (
        kind in ("invoke", "create") or action.get("read", {}) is None
    ):
        problem("/eligibility", "eligibility rules need a target that is read before the change")
    if (write.get("retry") or {}).get("max_retries") and not write.get("idempotency_header"):
        problem(
            "/write/retry",
            "re-sending is only safe with an idempotency key the upstream honours "
            "(set idempotency_header)",
        )
    status = action.get("status")
    if status:
        if bool(status.get("path")) == bool(status.get("from_location")):
            problem("/status", "give exactly one of path or from_location")
        for key in ("done_when", "failed_when"):
            if key in status and (why := rule_problem(status[key])) is not None:
                problem(f"/status/{key}", why)
        for key in _PATH_FIELD.findall(status.get("path", "")):
            if key not in required:
                problem("/status/path", f"path field {key!r} must be a required input property")
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
    content_type = write.get("content_type")
    if content_type == FORM_CONTENT_TYPE:
        body = write.get("body")
        if kind != "delete" and not isinstance(body, dict):
            problem("/write/body", "a form body is an object of fields")
        elif isinstance(body, dict) and write.get("form_style", "form") == "form":
            for key, value in body.items():
                if _nests(value, properties):
                    problem(
                        f"/write/body/{escape_pointer_token(key)}",
                        "a form field holds an object or nested array: only form_style "
                        "deep_object nests",
                    )
    elif "form_style" in write:
        problem("/write/form_style", f"form_style is for {FORM_CONTENT_TYPE} bodies")
    for name in write.get("headers") or {}:
        lowered = name.lower()
        if lowered in _RESERVED_HEADERS or lowered == write.get("idempotency_header", "").lower():
            problem(
                f"/write/headers/{escape_pointer_token(name)}",
                f"{name} is set by Countersign itself (credentials, conditions, the "
                "idempotency key, the body's type): an action cannot fix it",
            )
        elif _SECRET_HEADER.search(lowered):
            problem(
                f"/write/headers/{escape_pointer_token(name)}",
                f"{name} looks like a credential: catalog values are not secret; store it "
                "with set_credential",
            )
    return out


def _check_languages(base: str, action: dict[str, Any]) -> list[CatalogProblem]:
    """A text given per language has an English one: the agent API, the MCP server and
    the stored plan speak English, and the pages fall back to it."""
    texts = [(f"/{key}", action.get(key)) for key in ("title", "summary", "label", "button")]
    texts += [(f"/card/{key}", text) for key, text in (action.get("card") or {}).items()]
    return [
        CatalogProblem(base + where, f"a text given per language needs an {ENGLISH!r} one")
        for where, text in texts
        if languages_of(text) and ENGLISH not in {tag.lower() for tag in languages_of(text)}
    ]


# Headers the write client, the executor or HTTP itself set: a fixed header may not.
_RESERVED_HEADERS = {
    "authorization",
    "proxy-authorization",
    "cookie",
    "host",
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "accept",
    "user-agent",
    "idempotency-key",
    "x-idempotency-key",
}


_SECRET_HEADER = re.compile(r"key|token|secret|auth|passw|session|signature|cookie|credential")


def _schema_types(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    types = schema.get("type")
    out = set(types) if isinstance(types, list) else {types} if isinstance(types, str) else set()
    if "properties" in schema:
        out.add("object")
    return out


def _nests(value: Any, properties: dict[str, Any]) -> bool:
    """Whether a form field would hold an object, or an array of arrays or objects."""
    if isinstance(value, dict) and set(value) == {"$input"}:
        schema = properties.get(value["$input"])
        types = _schema_types(schema)
        if "object" in types:
            return True
        if "array" in types:
            items = _schema_types((schema or {}).get("items"))
            return bool(items & {"object", "array"}) or not items
        return False
    if isinstance(value, dict):
        return True
    if isinstance(value, list):
        return any(
            isinstance(item, list)
            or (isinstance(item, dict) and set(item) != {"$input"})
            or (
                isinstance(item, dict)
                and _schema_types(properties.get(item["$input"])) & {"object", "array"}
            )
            for item in value
        )
    return False


# A card that promises an identifier ("a reminder id", "the release ID") must declare a
# result field that carries one.
_PROMISES_ID = re.compile(r"(?i)\b(ids?|identifiers?)\b")
_RESULT_ID = re.compile(r"(^|_)id$")


def result_promise_problem(card: dict[str, Any], result: dict[str, Any]) -> str:
    """Why the card's ``result`` promises what ``result`` does not declare, or "".

    At least: a card that names an id needs a result field that carries one."""
    promised = _PROMISES_ID.search(localized(card.get("result", "")))
    if promised and not any(_RESULT_ID.search(name) for name in result):
        return (
            f"the card promises {promised.group(0)!r} but no result field carries one "
            "(declare e.g. an '..._id' field)"
        )
    return ""


def _check_reads_and_results(
    base: str, action: dict[str, Any], properties: dict[str, Any]
) -> list[CatalogProblem]:
    """Reads (kind read), declared results, verification and follow-up reads."""
    out: list[CatalogProblem] = []

    def problem(where: str, message: str) -> None:
        out.append(CatalogProblem(base + where, message))

    kind = action["kind"]
    cls_name = action["consequence_class"]
    approval = action.get("approval")
    sensitive = bool(action.get("sensitive", False))
    result = action.get("result") or {}
    if kind == "read":
        if cls_name != "observation":
            problem("/consequence_class", "a read is an observation: it changes nothing")
        if not result:
            problem("/result", "a read returns only the fields it declares: declare them")
        for key in ("status", "eligibility", "version"):
            if key in action:
                problem(f"/{key}", f"a read has no {key}")
        if "write" in action:
            problem("/write", "a read sends only the GET of its target: it has no write")
    elif sensitive:
        problem("/sensitive", "only a read can be sensitive")
    if approval == "none":
        if kind != "read" or cls_name != "observation":
            problem("/approval", "only an observation read may run without a per-call approval")
        elif sensitive:
            problem("/approval", "a sensitive read needs a reviewer for every call")
    if sensitive and isinstance(approval, dict) and approval.get("session_grant"):
        problem("/approval/session_grant", "a sensitive read needs a reviewer for every call")
    if action.get("verify") is True and kind not in VERIFIABLE_KINDS:
        problem("/verify", f"a {kind} has no readable effect to verify")
    for name, spec in result.items():
        where = f"/result/{escape_pointer_token(name)}"
        if "max_length" in spec and spec["type"] != "string":
            problem(f"{where}/max_length", "max_length is for string fields")
    promise = result_promise_problem(action.get("card") or {}, result)
    if action.get("enabled", True) and promise:
        problem("/result", promise)
    check = action.get("check_with")
    if check:
        if kind == "read":
            problem("/check_with", "a read is itself the check")
        for field_name, source in (check.get("input") or {}).items():
            where = f"/check_with/input/{escape_pointer_token(field_name)}"
            if "$input" in source and source["$input"] not in properties:
                problem(where, f"{source['$input']!r} is no input property of this action")
            if "$result" in source and source["$result"] not in result:
                problem(where, f"{source['$result']!r} is no result field of this action")
    return out


def _check_follow_ups(
    document: dict[str, Any], targets: dict[str, dict[str, Any]]
) -> list[CatalogProblem]:
    """Each ``check_with`` names a read action, in this file, among ``targets`` or already
    in the catalog, whose required inputs it provides."""
    out = []
    actions = document.get("actions") or {}
    for name, action in actions.items():
        check = action.get("check_with")
        if not check:
            continue
        where = f"/actions/{escape_pointer_token(name)}/check_with"
        target = actions.get(check["action"]) or targets.get(check["action"])
        if target is None:
            stored = Action.objects.filter(name=check["action"]).first()
            target = stored.definition if stored is not None else None
        if target is None:
            out.append(CatalogProblem(where + "/action", f"no action named {check['action']!r}"))
            continue
        if target.get("kind") != "read":
            out.append(CatalogProblem(where + "/action", f"{check['action']!r} is not a read"))
            continue
        schema = target.get("input_schema") or {}
        given = set(check.get("input") or {})
        missing = sorted(set(schema.get("required") or []) - given)
        unknown = sorted(given - set(schema.get("properties") or {}))
        if missing:
            out.append(
                CatalogProblem(where + "/input", f"{check['action']} needs {', '.join(missing)}")
            )
        if unknown:
            out.append(
                CatalogProblem(
                    where + "/input", f"{check['action']} has no input {', '.join(unknown)}"
                )
            )
    return out


def _path_fields(action: dict[str, Any]) -> set[str]:
    templates = [action["target"], (action.get("write") or {}).get("path", "")]
    if isinstance(action.get("read"), dict):
        templates.append(action["read"].get("path", ""))
    return {key for template in templates for key in _PATH_FIELD.findall(template)}


_ID_NAME = re.compile(r"(^id$|_id$|Id$)")


def _check_input_strictness(
    base: str, schema: dict[str, Any], *, path_fields: set[str], where: str = "/input_schema"
) -> list[CatalogProblem]:
    """Inputs must be narrow: closed objects, bounded strings and arrays, constrained ids.

    A string without a bound or an identifier without a pattern is how a "narrow"
    action quietly becomes a generic one.
    """
    out: list[CatalogProblem] = []
    if not isinstance(schema, dict):
        return out
    types = schema.get("type")
    types = set(types) if isinstance(types, list) else {types}
    constrained = any(k in schema for k in ("enum", "const"))
    if "object" in types or "properties" in schema:
        if schema.get("additionalProperties") is not False and where != "/input_schema":
            out.append(
                CatalogProblem(
                    f"{base}{where}/additionalProperties",
                    "nested objects must also set additionalProperties: false",
                )
            )
        for name, sub in (schema.get("properties") or {}).items():
            sub_where = f"{where}/properties/{escape_pointer_token(name)}"
            if isinstance(sub, dict) and (name in path_fields or _ID_NAME.search(name)):
                if not any(k in sub for k in ("pattern", "enum", "const", "format")) and (
                    sub.get("type") == "string"
                ):
                    out.append(
                        CatalogProblem(
                            f"{base}{sub_where}",
                            f"identifier {name!r} needs a pattern or an enum",
                        )
                    )
            out.extend(_check_input_strictness(base, sub, path_fields=set(), where=sub_where))
    if "string" in types and not constrained and "maxLength" not in schema:
        out.append(CatalogProblem(f"{base}{where}", "strings need a maxLength (or an enum)"))
    if "array" in types:
        if "maxItems" not in schema and not constrained:
            out.append(CatalogProblem(f"{base}{where}", "arrays need a maxItems"))
        out.extend(
            _check_input_strictness(
                base, schema.get("items"), path_fields=set(), where=f"{where}/items"
            )
        )
    return out


# Keywords whose values are data, not schemas: a "pattern" key inside them is no pattern.
_DATA_KEYWORDS = {"enum", "const", "default", "examples", "example"}


def _check_patterns(base: str, schema: Any, where: str = "/input_schema") -> list[CatalogProblem]:
    """Every pattern must be one RE2 can match in linear time (spec.InputValidator uses
    RE2); ``patternProperties`` are refused: the fields of an input are named."""
    out: list[CatalogProblem] = []
    stack: list[tuple[Any, str]] = [(schema, where)]
    while stack:
        node, here = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{here}/{i}") for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("pattern"), str):
            problem = pattern_problem(node["pattern"])
            if problem:
                out.append(
                    CatalogProblem(
                        f"{base}{here}/pattern",
                        f"the pattern cannot be matched in linear time: {problem}",
                    )
                )
        if "patternProperties" in node:
            out.append(
                CatalogProblem(
                    f"{base}{here}/patternProperties",
                    "patternProperties are not allowed: name every field an input may have",
                )
            )
        for key, value in node.items():
            if key not in _DATA_KEYWORDS and key not in ("pattern", "patternProperties"):
                stack.append((value, f"{here}/{escape_pointer_token(key)}"))
    return sorted(out, key=lambda p: p.pointer)


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
    text: str,
    *,
    source: str = "<catalog>",
    base_urls: dict[str, str] | None = None,
    actor: str = "catalog",
    base_dir: Path | None = None,
) -> LoadReport:
    """Validate and apply a catalog file in one transaction.

    An action whose definition changed gets a new version (and digest): plans previewed
    under the old definition can no longer be approved or executed. ``base_dir``: the
    catalog file's directory, where the ``.cedar`` files its ``policies:`` names are.
    """
    return catalog_apply(
        catalog_document(text, source=source, base_urls=base_urls, base_dir=base_dir),
        actor=actor,
    )


def catalog_document(
    text: str,
    *,
    source: str = "<catalog>",
    base_urls: dict[str, str] | None = None,
    base_dir: Path | None = None,
) -> dict[str, Any]:
    """A catalog file parsed and validated (CatalogError with every problem, each with its
    line), ready for ``catalog_apply``; ``base_urls`` override the connectors' addresses.
    The ``.cedar`` files the ``policies:`` section names are read (from ``base_dir``) and
    put in the document as text: what is applied is exactly what was validated."""
    document = parse_catalog_text(text, source)
    for name, url in (base_urls or {}).items():
        document.setdefault("connectors", {}).setdefault(name, {})["base_url"] = url
    try:
        origins = _read_policy_files(document, base_dir, source)
        validate_catalog(document, source, policy_origins=origins)
    except CatalogError as exc:
        for problem in exc.problems:
            if problem.line:
                continue
            if problem.text_line:
                problem.line = _line_in_text(text, problem.pointer, problem.text_line)
            else:
                problem.line = line_of(text, problem.pointer)
        raise
    return document


MAX_POLICY_FILES = 200


def _read_policy_files(
    document: dict[str, Any], base_dir: Path | None, source: str
) -> dict[tuple[str, int], str]:
    """Replace each ``{file: NAME}`` of the ``policies:`` section by ``{text: …}``, the
    file's content; returns the file each text came from. A file must be a ``.cedar``
    file inside the catalog file's directory. Without ``base_dir`` the items are left as
    they are (validation says the catalog must be loaded from its file)."""
    section = document.get("policies")
    origins: dict[tuple[str, int], str] = {}
    if not isinstance(section, dict) or base_dir is None:
        return origins
    problems: list[CatalogProblem] = []
    root = Path(base_dir).resolve()
    for part in PARTS:
        items = section.get(part)
        if not isinstance(items, list):
            continue
        for i, item in enumerate(items):
            if (
                not isinstance(item, dict)
                or set(item) != {"file"}
                or not isinstance(item["file"], str)
            ):
                continue  # the schema says what is wrong with it
            name = item["file"]
            pointer = f"/policies/{part}/{i}/file"
            path = (root / name).resolve()
            if (
                not name.endswith(".cedar")
                or ".." in Path(name).parts
                or not path.is_relative_to(root)
            ):
                problems.append(
                    CatalogProblem(
                        pointer, "a policy file is a .cedar file inside the catalog's directory"
                    )
                )
                continue
            if len(origins) >= MAX_POLICY_FILES:
                problems.append(CatalogProblem(pointer, f"at most {MAX_POLICY_FILES} policy files"))
                continue
            try:
                content = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                problems.append(CatalogProblem(pointer, f"cannot read {name}: {why}"))
                continue
            if len(content) > MAX_TEXT_CHARS:
                problems.append(
                    CatalogProblem(pointer, f"{name} is longer than {MAX_TEXT_CHARS // 1024} KiB")
                )
                continue
            items[i] = {"text": content}
            origins[(part, i)] = name
    if problems:
        raise CatalogError(source, problems)
    return origins


def _line_in_text(text: str, pointer: str, offset: int) -> int | None:
    """The catalog line of line ``offset`` of the string at ``pointer`` (a policy's Cedar
    written inline): a block scalar's content starts on the line after its ``|``."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    for token in [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == token), None)
        elif (
            isinstance(node, yaml.SequenceNode) and token.isdigit() and int(token) < len(node.value)
        ):
            node = node.value[int(token)]
        else:
            node = None
        if node is None:
            return line_of(text, pointer)
    first = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
        first += 1
    return first + offset - 1


def catalog_apply(document: dict[str, Any], *, actor: str = "catalog") -> LoadReport:
    """Store a document ``catalog_document`` validated, in one transaction."""
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
        unconfirmed = set(document.get("unconfirmed_classes") or [])
        for name, definition in (document.get("actions") or {}).items():
            # A file that says a class is unconfirmed keeps it so (an export of actions
            # imported and not yet reviewed); otherwise its writer has stated the class.
            _, change = action_define(
                name=name,
                definition=definition,
                actor=actor,
                class_confirmed=False if name in unconfirmed else None,
            )
            getattr(report, change).append(name)
        if "reviewers" in document:
            decision_rules_replace(document["reviewers"] or {}, actor=actor, report=report)
        if "policies" in document:
            policies_replace(document["policies"] or {}, actor=actor, report=report)
    return report


def policies_replace(section: dict[str, Any], *, actor: str, report: LoadReport) -> None:
    """Put a validated ``policies:`` section in force as a whole (its files already read
    into text): a new version when the text of either part changed, audited; declared
    groups that do not exist are made (empty, without permissions). Runs inside the
    caller's transaction."""
    for name in sorted(section.get("groups") or []):
        _group, made = Group.objects.get_or_create(name=name)
        if made and name not in report.groups_created:
            report.groups_created.append(name)
    texts = {part: part_text(item["text"] for item in section.get(part) or []) for part in PARTS}
    version = policy_set_replace(enforce=texts["enforce"], shadow=texts["shadow"], actor=actor)
    current = version or policy_version_current()
    report.policies = current.number if current else 0
    report.policies_changed = version is not None


def decision_rules_replace(
    section: dict[str, Any], *, actor: str, report: LoadReport | None = None
) -> list[str]:
    """Put a validated ``reviewers:`` section in force as a whole: rules it lacks are
    removed, declared groups that do not exist are made (empty, without permissions).
    Audited when anything changed. Runs inside the caller's transaction."""
    report = report if report is not None else LoadReport()
    for name in sorted(section.get("groups") or []):
        _group, made = Group.objects.get_or_create(name=name)
        if made:
            report.groups_created.append(name)
    rules = section_rules(section)
    stored = {r.name: r for r in DecisionRule.objects.select_for_update()}
    changed = bool(set(stored) - {r["name"] for r in rules}) or bool(report.groups_created)
    DecisionRule.objects.exclude(name__in=[r["name"] for r in rules]).delete()
    for position, rule in enumerate(rules):
        definition = normalize({k: v for k, v in rule.items() if k != "name"})
        rule_digest = digest(definition)
        old = stored.get(rule["name"])
        if old is not None and old.digest == rule_digest and old.position == position:
            continue
        changed = True
        DecisionRule.objects.update_or_create(
            name=rule["name"],
            defaults={
                "position": position,
                "definition": definition,
                "digest": rule_digest,
                "updated_by": actor,
            },
        )
    report.decision_rules = [r["name"] for r in rules]
    if changed:
        audit_record(
            kind="decision_rules.replaced",
            actor=actor,
            data={
                "rules": report.decision_rules,
                "digest": digest(normalize(section)),
                "groups_created": report.groups_created,
            },
        )
    return report.decision_rules


def validate_action_definition(
    name: str,
    definition: dict[str, Any],
    *,
    follow_up_targets: dict[str, dict[str, Any]] | None = None,
) -> list[CatalogProblem]:
    """Every check the file loader makes, for one action (the admin and importers use it).

    Pointers are relative to the action (``/input_schema/...``). ``follow_up_targets``:
    read actions stored with this one, which its ``check_with`` may name.
    """
    document = {"version": 1, "actions": {name: definition}}
    try:
        validate_catalog(document, name, follow_up_targets=follow_up_targets)
    except CatalogError as exc:
        prefix = f"/actions/{escape_pointer_token(name)}"
        return [CatalogProblem(p.pointer.removeprefix(prefix), p.message) for p in exc.problems]
    return []


def action_define(
    *,
    name: str,
    definition: dict[str, Any],
    actor: str,
    source: str = "catalog",
    class_confirmed: bool | None = None,
    lint: list[dict[str, str]] | None = None,
) -> tuple[Action, str]:
    """Create or change one action from an already validated definition.

    Returns the action and ``"created"``, ``"updated"`` or ``"unchanged"``. A changed
    definition gets the next version number; every version is kept with who made it.
    """
    definition = normalize(definition)
    new_digest = digest(definition)
    connector = Connector.objects.get(name=definition["connector"])
    fields = {
        # The column holds the English title (search, the admin, the API).
        "title": localized(definition["title"]),
        "description": definition.get("description", ""),
        "connector": connector,
        "kind": definition["kind"],
        "consequence_class": definition["consequence_class"],
        "definition": definition,
        "digest": new_digest,
        "enabled": definition.get("enabled", True),
        "source": source,
        "class_confirmed": class_confirmed,
        "updated_by": actor,
    }
    if lint is not None:
        fields["lint"] = lint
    with transaction.atomic():
        existing = Action.objects.select_for_update().filter(name=name).first()
        if existing is not None and existing.digest == new_digest:
            return existing, "unchanged"
        if class_confirmed is None:
            # Loading a file never confirms a class nobody confirmed (an imported action
            # stays under review until someone confirms it in the admin).
            fields["class_confirmed"] = existing.class_confirmed if existing else True
        if fields["enabled"] and not fields["class_confirmed"]:
            raise CatalogError(
                name,
                [
                    CatalogProblem(
                        "/enabled",
                        "the consequence class must be confirmed by a person before the "
                        "action is enabled (admin: Confirm class and enable)",
                    )
                ],
            )
        if existing is None:
            action = Action.objects.create(name=name, version=1, **fields)
            change = "created"
        else:
            action = existing
            for key, value in fields.items():
                setattr(action, key, value)
            action.version = existing.version + 1
            action.save()
            change = "updated"
        ActionVersion.objects.create(
            action=action,
            version=action.version,
            definition=definition,
            digest=new_digest,
            changed_by=actor,
        )
        audit_record(
            kind=f"action.{change}",
            actor=actor,
            data={
                "action": name,
                "version": action.version,
                "digest": new_digest,
                "source": source,
            },
        )
    return action, change


def action_confirm_class(*, name: str, actor: str) -> Action:
    """A person confirms an action's consequence class (imported actions need this)."""
    with transaction.atomic():
        action = Action.objects.select_for_update().get(name=name)
        if not action.class_confirmed:
            Action.objects.filter(pk=action.pk).update(class_confirmed=True, updated_by=actor)
            action.class_confirmed = True
            audit_record(
                kind="action.class_confirmed",
                actor=actor,
                data={"action": name, "consequence_class": action.consequence_class},
            )
    return action
