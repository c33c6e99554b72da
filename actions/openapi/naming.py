"""Naming and linting: the proposed action's name and title, the names of inputs, and
what a name or a summary says that a reviewer should hear about (a vague verb, a URL)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from .operations import Operation

# Verbs that say "something happens" without saying what: a summary built on one hides
# the effect from the reviewer and from the agent.
VAGUE_VERBS = {"manage", "process", "handle", "do", "execute", "perform", "administer"}
URL_NAMES = {"url", "uri", "href", "endpoint", "callback", "webhook"}
URL_SUFFIXES = ("_url", "_uri", "_endpoint", "_href")
_ID_NAME = re.compile(r"(^id$|_id$|Id$)")


def snake_case(text: str) -> str:
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", text)
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    text = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()
    return re.sub(r"_+", "_", text)


def action_name(op: Operation) -> tuple[str, bool]:
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


def is_url_name(name: str) -> bool:
    snake = snake_case(name)
    return snake in URL_NAMES or snake.endswith(URL_SUFFIXES) or snake in {"callback_url"}


_PATH_LITERAL = re.compile(r"%(?![0-9A-Fa-f]{2})|[^A-Za-z0-9_.~/%-]")


def encode_path_literals(path: str) -> str:
    """Percent-encode what a catalog path template does not take raw (``/users/@me`` ->
    ``/users/%40me``); the ``{field}`` placeholders are left as they are."""
    parts = re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", path)
    return "".join(
        part if i % 2 else _PATH_LITERAL.sub(lambda m: quote(m.group(0), safe=""), part)
        for i, part in enumerate(parts)
    )


def encoded_target(op: Operation, target: str, warn) -> str:
    """The target with its literals percent-encoded, said when that changes it."""
    encoded = encode_path_literals(target)
    if encoded != target:
        warn(
            op.pointer,
            f"the path is sent percent-encoded ({encoded}): characters such as '@' or "
            "':' are not used raw in catalog paths; check the upstream accepts it",
        )
    return encoded


def input_name_of(name: str) -> str:
    """A path-template-safe input name for a path parameter."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return name
    return snake_case(name) or "id"


def looks_like_id(name: str) -> bool:
    return bool(_ID_NAME.search(name))


def proposed_name(op: Operation, xc: dict[str, Any], prefix: str, warn) -> str:
    """The name x-countersign declares, else the one derived, after the import's prefix."""
    name, from_id = action_name(op)
    if xc.get("name"):
        name = xc["name"]
    elif not from_id:
        warn(op.pointer, f"no operationId: the name {name!r} was derived from the path")
    if prefix:
        name = (prefix + name)[:64].rstrip("_-")
    return name


def proposed_title(op: Operation, name: str, warn) -> str:
    """The summary's first line (derived from the name when there is none), linted."""
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
