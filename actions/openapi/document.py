"""The document and its limits: the text parsed into a fresh tree of plain JSON values,
bounded in size, depth and work, and the errors that refuse a document or an operation.

Every stage of the import spends from one ``Budget`` (schema nodes visited and seconds),
so that no document can hold a process.
"""

from __future__ import annotations

import json
import re
import time
from datetime import date, datetime
from typing import Any, NoReturn

import yaml

from actions.catalog import CatalogError, CatalogProblem, parse_catalog_text
from actions.lib.canonical import escape_pointer_token

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


class OpenAPIImportError(Exception):
    """The whole document is refused; nothing was stored."""

    def __init__(self, problems: list[CatalogProblem], source: str = "<upload>") -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: " + "; ".join(str(p) for p in problems))


class _Pointed(Exception):
    """A problem at one place of the document."""

    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(message)
        self.pointer = pointer
        self.message = message


class Refused(_Pointed):
    """The operation at hand is refused (the others are still imported)."""


class FreeForm(Exception):
    """A value that cannot be offered to an agent (free-form, a URL, a pattern that is not
    linear-time); the caller decides whether to drop it (optional) or refuse (required).
    ``refusal`` is the message when it refuses the operation, if more than ``what``."""

    def __init__(self, pointer: str, what: str, refusal: str = "") -> None:
        super().__init__(what)
        self.pointer = pointer
        self.what = what
        self.refusal = refusal


def ptr(*tokens: str | int) -> str:
    return "".join(f"/{escape_pointer_token(t)}" for t in tokens)


def problem_at(pointer: str, message: str) -> dict[str, str]:
    return {"pointer": pointer, "message": message}


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_names(value: Any) -> list[str]:
    return [item for item in as_list(value) if isinstance(item, str)]


# --- limits ---------------------------------------------------------------------------------


class Exhausted(_Pointed):
    """The document needs more work than an import may spend: refuse all of it."""


class Budget:
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
            raise Exhausted(
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
            raise Exhausted(
                pointer,
                f"importing the document takes longer than {self.seconds:g} seconds: refused",
            )


# A JSON string, quotes and escapes included; possessive, so it never backtracks.
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"')
_STARTS_JSON = re.compile(r"\s*[\[{]")


def parse_document(text: str, source: str, budget: Budget) -> dict[str, Any]:
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
    except Refused as exc:
        raise OpenAPIImportError([CatalogProblem(exc.pointer, exc.message)], source) from None


def _yaml_within_bounds(text: str, budget: Budget) -> bool:
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


def _plain(value: Any, pointer: str, depth: int, nodes: list[int], budget: Budget) -> Any:
    """A fresh tree of plain JSON values: string keys (YAML reads ``202:`` as an int),
    dates as ISO strings, no shared or recursive nodes, bounded in size."""
    nodes[0] -= 1
    if nodes[0] < 0 or depth > MAX_DOCUMENT_DEPTH:
        raise Refused(
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
                raise Refused(pointer, f"key {key!r} is not a string; quote it")
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
