"""What a reviewer is shown of a plan, so the decision takes seconds: the object's own
name (the action's ``label``), its id, the fields of the change as rows (changed ones
first, unchanged ones as context), an invoke's message, and what an irreversible plan
asks the reviewer to type.

Plain data out. Every value here was written by an agent or an upstream: templates
render it autoescaped, and only ``render_markdown`` (nh3-sanitized) is ever marked safe.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import markdown
import nh3

from actions.models import Action
from actions.text import localized, localized_card, render_label
from actions.textdiff import is_multiline_change, line_diff

from ..models import Plan
from .diffs import is_long_text, word_diff

RENDERED_TAGS = {
    "p",
    "strong",
    "em",
    "code",
    "pre",
    "ul",
    "ol",
    "li",
    "br",
    "blockquote",
    "h3",
    "h4",
}
# An invoke's body field holding the message itself, rendered as the recipient reads it.
MESSAGE_FIELDS = ("message", "body", "text", "content", "markdown")
# Rows shown per table; a record with more fields says how many were left out.
MAX_ROWS = 200


def render_markdown(text: str) -> str:
    """Markdown to HTML, then sanitized: whatever the source, only harmless tags survive."""
    html = markdown.markdown(text or "", extensions=["fenced_code"], output_format="html")
    return nh3.clean(html, tags=RENDERED_TAGS, attributes={}, link_rel=None)


def value_text(value: Any) -> str:
    """A value as a reviewer reads it: text as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    return json.dumps(value, ensure_ascii=False)


def _row(path: str, value: Any) -> dict[str, Any]:
    return {"path": path, "text": value_text(value), "empty": value == "" or value is None}


def _field_path(key: str) -> str:
    return "/" + key.replace("~", "~0").replace("/", "~1")


def field_rows(record: Any) -> list[dict[str, Any]]:
    """A record's top-level fields as rows (a non-object record is one row, ``/``)."""
    if not isinstance(record, dict):
        return [] if record is None else [_row("/", record)]
    return [_row(_field_path(key), record[key]) for key in sorted(record)][:MAX_ROWS]


def change_rows(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for c in changes[:MAX_ROWS]:
        row = {
            **c,
            "before_text": value_text(c["before"]),
            "after_text": value_text(c["after"]),
            "before_empty": c["before"] == "",
            "after_empty": c["after"] == "",
        }
        if c["op"] == "replace" and is_multiline_change(c["before"], c["after"]):
            row["text_diff"] = line_diff(c["before"], c["after"])
        elif c["op"] == "replace" and is_long_text(c["before"], c["after"]):
            row["word_diff"] = word_diff(c["before"], c["after"])
        rows.append(row)
    return rows


def unchanged_rows(before: Any, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fields of the record that the change leaves alone: context for the reviewer."""
    if not isinstance(before, dict):
        return []
    touched = {c["path"].split("/")[1] for c in changes if c["path"] != "/"}
    touched = {t.replace("~1", "/").replace("~0", "~") for t in touched}
    return [row for row in field_rows(before) if row["path"][1:] not in touched]


def message_of(body: Any) -> tuple[str, list[dict[str, Any]]]:
    """An invoke's message as sanitized HTML, and the other fields (its recipients, the
    channel, the time) as rows. Without a message field every field is a row."""
    if not isinstance(body, dict):
        return "", field_rows(body)
    for name in MESSAGE_FIELDS:
        if isinstance(body.get(name), str) and body[name].strip():
            rest = {k: v for k, v in body.items() if k != name}
            return render_markdown(body[name]), field_rows(rest)
    return "", field_rows(body)


def target_id(plan: Plan) -> str:
    """The target's own id: the last segment of its path (``c-1002``)."""
    last = (plan.target or {}).get("path", "").rstrip("/").rsplit("/", 1)[-1]
    return unquote(last)


def record_of(plan: Plan) -> Any:
    """The object the plan is about: as read, or as it would be created or sent."""
    return plan.before if plan.before is not None else plan.after


def plan_label(plan: Plan, language: str | None) -> str:
    """The action's ``label`` for this plan's object ("Grace Hopper"), or ``""``."""
    template = localized(plan.action.definition.get("label"), language)
    return render_label(template, record_of(plan), target_id=target_id(plan))


def approve_words(plan: Plan, language: str | None) -> str:
    """The words of an external action's approve button ("Send invoice inv-2001"), or
    ``""`` for the plain "Approve" and the short code."""
    if plan.consequence_class != "external":
        return ""
    template = localized(plan.action.definition.get("button"), language)
    return render_label(template, record_of(plan), target_id=target_id(plan))


def action_texts(action: Action, language: str | None) -> dict[str, Any]:
    """The action's title and card in the reader's language."""
    definition = action.definition
    return {
        "title": localized(definition.get("title"), language) or action.title,
        "card": localized_card(definition.get("card"), language) or action.spec.card,
    }


def plan_summary_html(plan: Plan, language: str | None) -> str:
    """The action's own summary sentence in the reader's language, sanitized."""
    template = localized(plan.action.definition.get("summary"), language)
    if not template:
        return ""
    return render_markdown(plan.action.spec.render_summary(plan.input, template))


# --- typing to confirm --------------------------------------------------------------------


# An irreversible plan is approved only by a reviewer who typed what it destroys.
TYPED_CONFIRMATION_CLASSES = frozenset({"irreversible"})


def needs_typed_confirmation(plan: Plan) -> bool:
    return plan.consequence_class in TYPED_CONFIRMATION_CLASSES


def confirmation_words(plan: Plan) -> list[str]:
    """What the reviewer may type: the target's id, or its label in any language."""
    words = [target_id(plan)]
    label = plan.action.definition.get("label")
    for template in label.values() if isinstance(label, dict) else [label]:
        if isinstance(template, str):
            words.append(render_label(template, record_of(plan), target_id=words[0]))
    return [w for i, w in enumerate(words) if w and w not in words[:i]]


def _folded(text: str) -> str:
    return " ".join(str(text).split()).casefold()


def confirmation_matches(plan: Plan, typed: str) -> bool:
    wanted = {_folded(w) for w in confirmation_words(plan)}
    return bool(typed) and _folded(typed) in wanted
