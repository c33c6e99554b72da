"""One action's definition checked on its own terms: its connector, requests, versions,
results, follow-ups, input schema and card (validation.py puts them together)."""

from __future__ import annotations

import re
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from ..lib.canonical import CanonicalJSONError, escape_pointer_token, normalize
from ..lib.formats import schema_format_problems
from ..lib.http import FORM_CONTENT_TYPE
from ..models import Action
from ..policy.schema import document_problems
from ..rules import rule_problem
from ..spec import VERIFIABLE_KINDS, pattern_problem
from ..text import ENGLISH, languages_of, localized
from .mcp import check_mcp_action, template_inputs
from .problems import CatalogProblem

_PATH_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def check_action(
    base: str, action: dict[str, Any], connectors: set[str], mcp_connectors: set[str] = frozenset()
) -> list[CatalogProblem]:
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
    if "tool" in action:
        out.extend(check_mcp_action(base, action, properties, mcp_connectors))
    elif action["connector"] in mcp_connectors:
        problem("/connector", "an MCP server is called by tool: give tool, not write")
    paths = (
        []
        if "tool" in action
        else [("/target", action["target"]), ("/write/path", write.get("path", ""))]
    )
    if isinstance(action.get("read"), dict) and "tool" not in action:
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
        kind in ("invoke", "create")
        or action.get("read", {}) is None
        or ("tool" in action and (action.get("preview") or {}).get("recipe") != "paired_read")
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
    if "tool" in action:
        return out  # what follows is about HTTP requests
    body_fields = template_inputs(write.get("body"))
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
        if spec.get("text") and spec["type"] != "string":
            problem(f"{where}/type", "the answer's text is a string field")
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


def check_follow_ups(
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
    if "tool" in action:
        return set()  # an MCP action has no path: its label is shown, never sent
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
