"""Catalog text that may be written in several languages.

An action's ``title``, card fields, ``summary``, ``label`` and ``button`` are either one
string or a mapping from language tags to strings::

    title: Delete one contact permanently
    title: {en: Delete one contact permanently, pt-BR: Excluir um contato permanentemente}

The agent API, the MCP server and the stored plan speak English (machines read them);
the reviewers' pages ask for the reader's language. A language that is missing falls
back to its primary subtag (``pt`` for ``pt-BR``) or another region of it, then to
English, then to the first language given, so a catalog never needs every language.
"""

from __future__ import annotations

import re
from typing import Any

from .lib.canonical import resolve_pointer

ENGLISH = "en"


def localized(value: Any, language: str | None = ENGLISH) -> str:
    """``value`` in ``language``: a plain string as it is; a per-language mapping by its
    best match (see the module's text); anything else as an empty string."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict) or not value:
        return ""
    by_tag = {str(tag).lower(): text for tag, text in value.items() if isinstance(text, str)}
    wanted = (language or ENGLISH).lower().replace("_", "-")
    primary = wanted.split("-")[0]
    for tag in (wanted, primary):
        if tag in by_tag:
            return by_tag[tag]
    # Another region of the same language ("pt" asked, only "pt-BR" given).
    for tag, text in by_tag.items():
        if tag.split("-")[0] == primary:
            return text
    return by_tag.get(ENGLISH) or next(iter(by_tag.values()), "")


def languages_of(value: Any) -> list[str]:
    """The language tags a catalog text is written in (none for a plain string)."""
    return list(value) if isinstance(value, dict) else []


def localized_card(card: Any, language: str | None = ENGLISH) -> dict[str, str]:
    """Every field of an action card in ``language``."""
    if not isinstance(card, dict):
        return {}
    return {key: localized(text, language) for key, text in card.items()}


# A label template: "{/name}", or several fields ("{/customer_id}, {/amount} {/currency}").
_FIELD = re.compile(r"\{(/[^{}]*)\}")
MAX_LABEL_CHARS = 120


def render_label(template: str, record: Any, *, target_id: str = "") -> str:
    """A catalog label filled in from ``record`` (the target as read, or as it would be
    created or sent). A bare pointer (``/name``) is the same as ``{/name}``; ``{id}`` is
    the target's own id (the last segment of its path). Fields the record lacks are left
    out; only scalars are shown. Plain text out: the page escapes it like anything else
    an upstream or an agent wrote."""
    if not template:
        return ""
    if template.startswith("/") and "{" not in template:
        template = "{" + template + "}"
    template = template.replace("{id}", target_id.replace("{", "").replace("}", ""))

    def field(match: re.Match[str]) -> str:
        try:
            value = resolve_pointer(record, match.group(1))
        except (KeyError, IndexError, TypeError, ValueError):
            return ""
        if isinstance(value, bool) or value is None or isinstance(value, dict | list):
            return ""
        return str(value)

    text = " ".join(_FIELD.sub(field, template).split()).strip(" ,·-")
    if len(text) > MAX_LABEL_CHARS:
        text = text[: MAX_LABEL_CHARS - 1].rstrip() + "…"
    return text
