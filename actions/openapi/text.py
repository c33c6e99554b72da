"""Text: summaries and descriptions as plain text (some documents write HTML), and the
card drafted from them and from the declared result."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any, Protocol

from actions.catalog import result_promise_problem

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


class Described(Protocol):
    """What a card is drafted from: an operation (operations.Operation) as this module
    sees it, so that the operations, which read their text through ``plain_text``, are
    not also imported here (no circle between the two files)."""

    pointer: str

    def text(self, key: str) -> str: ...


def draft_card(
    op: Described, xc: dict[str, Any], warn, result: dict[str, Any]
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
