"""The typed form of one action's catalog definition, and its templates.

Templates are deliberately small. A path template names input fields in braces
(``/contacts/{contact_id}``) and every value is percent-encoded as a single path
segment, so an input can never add segments, a query or another host. A body template
is JSON in which ``{"$input": "field"}`` stands for an input value (kept with its
type; the key is dropped when an optional field is absent). Nothing else is
evaluated: free text never selects a resource, a method or a host.
"""

from __future__ import annotations

import functools
import json
import re
import string
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import re2
from django.conf import settings
from jsonschema import Draft202012Validator, ValidationError, validators

from .lib.formats import FORMAT_CHECKER
from .text import localized, localized_card

_PATH_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ABSENT = object()


# --- patterns --------------------------------------------------------------------------
#
# An agent's input is checked against patterns written in catalogs or imported from
# OpenAPI documents. Python's ``re`` backtracks: ``^(a+)+$`` takes seconds on thirty
# characters and doubles with each one more. RE2 matches in time linear in the input,
# whatever the pattern; it refuses what it cannot do that way (backreferences,
# lookaround), and so does the catalog loader, before any input is seen.

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is reported to the caller, not to stderr
MAX_PATTERN_CHARS = 1000


class PatternError(ValueError):
    pass


@functools.lru_cache(maxsize=2048)
def compile_pattern(pattern: str):
    """The RE2 program for a JSON Schema pattern (searched, not anchored, as JSON Schema
    says). Raises PatternError when RE2 cannot take it."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(f"RE2 refuses it: {reason}") from None


def pattern_problem(pattern: str) -> str:
    """Why a pattern cannot be used for input validation, or ``""``."""
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        return str(exc)
    return ""


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not compile_pattern(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        program = compile_pattern(pattern)
        for key, value in instance.items():
            if program.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


# Draft 2020-12 with every pattern matched by RE2. (``additionalProperties`` and
# ``unevaluatedProperties`` would match ``patternProperties`` with ``re``; the catalog
# refuses ``patternProperties`` in input schemas, so they never do.)
InputValidator = validators.extend(
    Draft202012Validator,
    {"pattern": _pattern, "patternProperties": _pattern_properties},
)


def input_validator_for(schema: Any) -> Draft202012Validator:
    """The validator for an agent's input (or any value an input field takes): RE2
    patterns, and every ``format`` checked strictly (actions/lib/formats.py), never
    passed unchecked."""
    return InputValidator(schema, format_checker=FORMAT_CHECKER)


# The change kinds whose effect a re-read can show (an invoke has no readable state).
VERIFIABLE_KINDS = frozenset({"create", "update", "replace", "delete"})


class TemplateError(ValueError):
    pass


@dataclass(frozen=True)
class VersionSource:
    source: str  # "etag" | "field" | "hash"
    field: str = ""  # JSON pointer into the read body, for source == "field"


@dataclass(frozen=True)
class ReadSpec:
    path: str
    not_found: tuple[int, ...] = (404,)


@dataclass(frozen=True)
class WriteSpec:
    method: str
    path: str
    body: Any = None
    precondition: str = "none"  # "if_match" | "if_none_match" | "field" | "none"
    precondition_field: str = ""  # JSON pointer into the body, for precondition == "field"
    content_type: str = "application/json"
    # For FORM_CONTENT_TYPE: "form" (arrays repeat the field, no nesting) or "deep_object"
    # (``a[b]=`` and ``a[0]=``, as Stripe and Rails read forms).
    form_style: str = "form"
    # Header values the action always sends (a ``From`` some upstreams require); never
    # a credential, a condition or the idempotency key (the loader refuses those).
    headers: dict[str, str] = field(default_factory=dict)
    idempotency_header: str = ""
    # A 2xx answer whose body has this value at this pointer is a domain refusal: some
    # upstreams report "nothing changed" inside a 200. {"pointer": ..., "equals": ...}
    rejected_when: dict[str, Any] | None = None
    on_conflict: str = "rejected"  # what a 409 means: "rejected" | "already_in_desired_state"
    # Re-sends allowed after 429, 5xx or a lost answer; never without an idempotency key.
    max_retries: int = 0


@dataclass(frozen=True)
class StatusSpec:
    """How to follow accepted work (202) and look up an outcome that is unknown."""

    done_when: dict[str, Any]
    failed_when: dict[str, Any] | None = None
    path: str = ""  # a template over the input; or
    from_location: bool = False  # the Location header of the 202
    max_checks: int = 10


@dataclass(frozen=True)
class ApprovalSpec:
    approvers: int
    approval_ttl: int  # seconds an approval stays usable
    plan_ttl: int  # seconds a plan may wait for a decision
    session_grant: bool = False  # may a reviewer's session grant stand in for per-call consent
    # "per_call", or "none": a plain observation read an admin lets run at once (still
    # recorded, rate-limited and fingerprinted; the loader allows it for nothing else).
    mode: str = "per_call"
    # Approvals must be WebAuthn assertions over the plan's fingerprint
    # (approvals/identity/passkeys.py).
    signed: bool = False


@dataclass(frozen=True)
class ResultField:
    """One field the agent receives in ``outcome.result``, from the upstream's answer."""

    name: str
    type: str  # "string" | "integer" | "number" | "boolean"
    pointer: str = ""  # into the answer's body; or
    header: str = ""  # a response header; or
    status: bool = False  # the answer's HTTP status; or
    text: bool = False  # the answer's whole text (an MCP tool's text content)
    max_length: int = 200  # strings longer than this are not returned
    enum: tuple[Any, ...] = ()


@dataclass(frozen=True)
class CheckWith:
    """The read action that checks accepted work or an unknown outcome, with its input
    taken from this plan's input (``$input``) or result (``$result``)."""

    action: str
    input: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PairedRead:
    """An MCP write's paired read: a read tool on the same server, called with arguments
    taken from the input; its result (``result``: the text as it is, the text parsed as
    JSON, or the structured content; then ``pointer`` into it) is the target's document.
    The target is absent when the pointer finds nothing, when the tool's error text
    matches ``error_matches``, or when its text matches ``text_matches`` (RE2)."""

    tool: str
    arguments: Any
    result: str = "text"  # "text" | "json" | "structured"
    pointer: str = ""
    error_matches: str = ""
    text_matches: str = ""


@dataclass(frozen=True)
class McpSpec:
    """An action that calls one tool of an MCP server (actions/connectors/mcp/).

    ``recipe`` is how its preview is made: ``paired_read`` (a read tool gives the target
    before; the after is computed from the change kind), ``dry_run`` (the tool itself,
    called with ``dry_argument`` set to ``dry_value``, shows what it would do), ``none``
    (the exact call is shown, nothing computed), or ``read`` for an observation."""

    tool: str
    arguments: Any  # a template over the input; None: the input as it is
    recipe: str
    paired: PairedRead | None = None
    merge: str = "patch"  # how an update's document joins the target: "patch" | "append"
    dry_argument: str = ""
    dry_value: bool = True

    @property
    def tools(self) -> tuple[str, ...]:
        """Every tool a plan of this action calls: each is pinned (ToolPin)."""
        return (self.tool, self.paired.tool) if self.paired else (self.tool,)

    def render_arguments(self, values: dict[str, Any]) -> dict[str, Any]:
        if self.arguments is None:
            return dict(values)
        rendered = _render(self.arguments, values)
        return {} if rendered is _ABSENT else rendered

    def render_read_arguments(self, values: dict[str, Any]) -> dict[str, Any]:
        rendered = _render(self.paired.arguments, values) if self.paired else _ABSENT
        return {} if rendered is _ABSENT else rendered

    def dry_arguments(self, values: dict[str, Any]) -> dict[str, Any]:
        """The call that only shows: the write's arguments with the dry-run flag set."""
        return {**self.render_arguments(values), self.dry_argument: self.dry_value}

    def real_arguments(self, values: dict[str, Any]) -> dict[str, Any]:
        """The call that writes: a dry-run flag is sent set the other way, never left out."""
        arguments = self.render_arguments(values)
        if self.recipe == "dry_run":
            arguments[self.dry_argument] = not self.dry_value
        return arguments


@dataclass(frozen=True)
class ActionSpec:
    name: str
    title: str
    description: str
    connector: str
    kind: str
    consequence_class: str
    card: dict[str, str]
    input_schema: dict[str, Any]
    target: str
    read: ReadSpec | None
    version: VersionSource | None
    write: WriteSpec
    summary: str = ""
    approval: ApprovalSpec = field(default_factory=lambda: ApprovalSpec(1, 900, 3600))
    status: StatusSpec | None = None
    result: tuple[ResultField, ...] = ()
    # A read of private data: every call needs a reviewer.
    sensitive: bool = False
    # Re-read the target after a 2xx to a change and compare it with the plan.
    verify: bool = False
    check_with: CheckWith | None = None
    # An MCP action: the tool it calls and how its preview is made (None: HTTP).
    mcp: McpSpec | None = None

    @classmethod
    def from_definition(cls, name: str, d: dict[str, Any]) -> ActionSpec:
        """Build from a definition already validated against the catalog schema."""
        if "tool" in d:
            return _mcp_spec(cls, name, d)
        kind = d["kind"]
        target = d["target"]
        read = None
        if kind not in ("invoke", "read") and d.get("read", {}) is not None:
            r = d.get("read") or {}
            read = ReadSpec(path=r.get("path", target), not_found=tuple(r.get("not_found", [404])))
        if kind == "read":
            r = d.get("read") or {}
            read = ReadSpec(path=r.get("path", target), not_found=tuple(r.get("not_found", [404])))
        version = None
        if read is not None and kind not in ("create", "read"):
            v = d.get("version") or {"source": "hash"}
            version = VersionSource(source=v["source"], field=v.get("field", ""))
        # A read sends one GET of its target and nothing else: its "write" is that GET.
        w = {"path": read.path} if kind == "read" else d["write"]
        default_method = {
            "create": "PUT",
            "update": "PATCH",
            "replace": "PUT",
            "delete": "DELETE",
            "invoke": "POST",
            "read": "GET",
        }[kind]
        default_ct = "application/merge-patch+json" if kind == "update" else "application/json"
        write = WriteSpec(
            method=w.get("method", default_method).upper(),
            path=w.get("path", target),
            body=w.get("body"),
            precondition=w.get("precondition", "none"),
            precondition_field=w.get("precondition_field", ""),
            content_type=w.get("content_type", default_ct),
            form_style=w.get("form_style", "form"),
            headers=dict(w.get("headers") or {}),
            idempotency_header=w.get("idempotency_header", ""),
            rejected_when=w.get("rejected_when"),
            on_conflict=w.get("on_conflict", "rejected"),
            max_retries=int(
                (w.get("retry") or {}).get("max_retries", 2 if w.get("idempotency_header") else 0)
            )
            if w.get("idempotency_header")
            else 0,
        )
        st = d.get("status")
        status = (
            StatusSpec(
                done_when=st["done_when"],
                failed_when=st.get("failed_when"),
                path=st.get("path", ""),
                from_location=bool(st.get("from_location", False)),
                max_checks=int(st.get("max_checks", 10)),
            )
            if st
            else None
        )
        approval = _approval(d, kind)
        result = _results(d)
        cw = d.get("check_with")
        check_with = (
            CheckWith(action=cw["action"], input=dict(cw.get("input") or {})) if cw else None
        )
        # Verification needs a readable target: the change kinds that have one.
        verify = bool(d.get("verify", True)) and kind in VERIFIABLE_KINDS and read is not None
        return cls(
            name=name,
            # The English text (agents, the stored plan); the pages localize from the
            # definition (actions/text.py).
            title=localized(d["title"]),
            description=d.get("description", ""),
            connector=d["connector"],
            kind=kind,
            consequence_class=d["consequence_class"],
            card=localized_card(d["card"]),
            input_schema=d["input_schema"],
            target=target,
            read=read,
            version=version,
            write=write,
            summary=localized(d.get("summary", "")),
            approval=approval,
            status=status,
            result=result,
            sensitive=bool(d.get("sensitive", False)),
            verify=verify,
            check_with=check_with,
        )

    def render_label(self, values: dict[str, Any]) -> str:
        """An MCP action's target label (``target:``), for reviewers."""
        return render_label(self.target, values) if self.target else ""

    @property
    def previewed(self) -> bool:
        """Is what a plan would change computed before it is approved? Every action but
        an MCP write with no preview (``preview: {recipe: none}``), which a person always
        decides: no policy, grant or rule approves a call nobody could preview."""
        return self.mcp is None or self.mcp.recipe != "none"

    # --- input -----------------------------------------------------------------

    def input_validator(self) -> Draft202012Validator:
        return input_validator_for(self.input_schema)

    def format_errors_as_sent(self, values: Any) -> list[ValidationError]:
        """The ``format`` errors of an input as the agent sent it, before its strings are
        put in Unicode normal form (NFC): a value whose normal form passes but that was
        sent in another spelling (a Kelvin sign for a K, a decomposed accent) is refused
        with the reason, never mapped into what the policies and the upstream would see."""
        return [e for e in self.input_validator().iter_errors(values) if e.validator == "format"]

    # --- templates ---------------------------------------------------------------

    def render_path(self, template: str, values: dict[str, Any]) -> str:
        def sub(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in values or values[key] is None:
                raise TemplateError(f"path needs input field {key!r}")
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise TemplateError(f"input field {key!r} must be a string or integer")
            text = str(value)
            if text in {"", ".", ".."}:
                raise TemplateError(f"input field {key!r} is not a usable path segment")
            # safe="" encodes "/" too: one value, one segment.
            return quote(text, safe="")

        return _PATH_FIELD.sub(sub, template)

    def render_body(self, template: Any, values: dict[str, Any]) -> Any:
        rendered = _render(template, values)
        return None if rendered is _ABSENT else rendered

    def render_summary(self, values: dict[str, Any], template: str | None = None) -> str:
        """The action's own markdown sentence (or ``template``, the same sentence in
        another language), with input values escaped as code."""
        template = self.summary if template is None else template
        if not template:
            return ""
        fields = {key: markdown_code(value) for key, value in values.items()}
        try:
            return string.Formatter().vformat(template, (), _Missing(fields))
        except (ValueError, IndexError, AttributeError):
            return template


def _approval(d: dict[str, Any], kind: str) -> ApprovalSpec:
    a = d.get("approval") or {}
    cls_name = d["consequence_class"]
    sensitive = bool(d.get("sensitive", False))
    defaults = settings.COUNTERSIGN_APPROVAL_POLICY[cls_name]
    # No per-call approval only for a plain observation read, whatever the file says
    # (the loader refuses it otherwise).
    mode = (
        "none"
        if a == "none" and kind == "read" and cls_name == "observation" and not sensitive
        else "per_call"
    )
    a = a if isinstance(a, dict) else {}
    return ApprovalSpec(
        approvers=int(a.get("approvers", defaults["approvers"])),
        approval_ttl=int(a.get("approval_ttl", defaults["approval_ttl"])),
        plan_ttl=int(a.get("plan_ttl", settings.COUNTERSIGN_PLAN_TTL_SECONDS)),
        # Never for external or irreversible actions, a sensitive read, or an action
        # whose approvals must be signed (a grant signs nothing), whatever the file says.
        session_grant=bool(a.get("session_grant", defaults["session_grant"]))
        and not a.get("signed", cls_name in settings.COUNTERSIGN_SIGNED_APPROVAL_CLASSES)
        and cls_name in ("observation", "reversible")
        and not sensitive
        and mode == "per_call",
        mode=mode,
        signed=mode == "per_call"
        and bool(a.get("signed", cls_name in settings.COUNTERSIGN_SIGNED_APPROVAL_CLASSES)),
    )


def _results(d: dict[str, Any]) -> tuple[ResultField, ...]:
    return tuple(
        ResultField(
            name=name,
            type=f["type"],
            pointer=f.get("pointer", ""),
            header=f.get("header", ""),
            status=bool(f.get("status", False)),
            text=bool(f.get("text", False)),
            max_length=int(f.get("max_length", 200)),
            enum=tuple(f.get("enum") or ()),
        )
        for name, f in sorted((d.get("result") or {}).items())
    )


def _mcp_spec(cls, name: str, d: dict[str, Any]) -> ActionSpec:
    """The typed form of an MCP action (``tool:`` in the catalog). Its "write" is the tool
    call (method ``CALL``, path the tool's name), its body the document the target should
    be after it (a paired read's ``document``) or, with no document to compute, the
    arguments; its "read" is the paired read tool, or the dry run of the tool itself."""
    kind = d["kind"]
    preview = d.get("preview") or {}
    recipe = "read" if kind == "read" else preview.get("recipe", "none")
    paired = None
    if recipe == "paired_read":
        r = preview["read"]
        absent = r.get("absent_when") or {}
        paired = PairedRead(
            tool=r["tool"],
            arguments=r.get("arguments"),
            result=r.get("result", "text"),
            pointer=r.get("pointer", ""),
            error_matches=absent.get("error_matches", ""),
            text_matches=absent.get("text_matches", ""),
        )
    mcp = McpSpec(
        tool=d["tool"],
        arguments=d.get("arguments"),
        recipe=recipe,
        paired=paired,
        merge=preview.get("merge", "patch"),
        dry_argument=preview.get("argument", ""),
        dry_value=bool(preview.get("value", True)),
    )
    read = None
    version = None
    body: Any = None
    if recipe == "paired_read":
        read = ReadSpec(path=paired.tool)
        if kind not in ("create", "invoke"):
            v = d.get("version") or {"source": "hash"}
            version = VersionSource(source=v["source"], field=v.get("field", ""))
        body = preview.get("document")
    elif recipe in ("dry_run", "read"):
        read = ReadSpec(path=mcp.tool)
        version = VersionSource(source="hash")
    if recipe in ("none", "dry_run"):
        # Nothing computed: what is shown is the exact call.
        body = mcp.arguments if mcp.arguments is not None else {"$input_all": True}
    write = WriteSpec(method="CALL", path=mcp.tool, body=body)
    verify = bool(d.get("verify", True)) and kind in VERIFIABLE_KINDS and recipe == "paired_read"
    return cls(
        name=name,
        title=localized(d["title"]),
        description=d.get("description", ""),
        connector=d["connector"],
        kind=kind,
        consequence_class=d["consequence_class"],
        card=localized_card(d["card"]),
        input_schema=d["input_schema"],
        target=d.get("target", ""),
        read=read,
        version=version,
        write=write,
        summary=localized(d.get("summary", "")),
        approval=_approval(d, kind),
        result=_results(d),
        sensitive=bool(d.get("sensitive", False)),
        verify=verify,
        mcp=mcp,
    )


def render_label(template: str, values: dict[str, Any], limit: int = 300) -> str:
    """An MCP action's target label for reviewers: input values put in as they are (no
    encoding: a label is shown, never sent), cut to ``limit`` characters."""

    def sub(match: re.Match[str]) -> str:
        value = values.get(match.group(1))
        if value is None:
            return "—"
        return value if isinstance(value, str) else _json_text(value)

    text = _PATH_FIELD.sub(sub, template)
    return text if len(text) <= limit else text[:limit] + "…"


class _Missing(dict):
    def __missing__(self, key: str) -> str:
        return "—"


def markdown_code(value: Any) -> str:
    """Render a value as an inline code span that no backtick in it can close early."""
    text = value if isinstance(value, str) else _json_text(value)
    text = text.replace("\n", " ")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown_block(value: Any) -> str:
    """Render a value as a fenced code block that no fence inside it can close."""
    text = value if isinstance(value, str) else _json_text(value)
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _render(template: Any, values: dict[str, Any]) -> Any:
    if isinstance(template, dict):
        if template == {"$input_all": True}:
            return dict(values)
        if set(template) == {"$input"}:
            key = template["$input"]
            return values.get(key, _ABSENT)
        out = {}
        for key, item in template.items():
            rendered = _render(item, values)
            if rendered is not _ABSENT:
                out[key] = rendered
        return out
    if isinstance(template, list):
        return [item for item in (_render(i, values) for i in template) if item is not _ABSENT]
    return template
