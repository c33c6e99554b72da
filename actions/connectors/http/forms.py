"""A form body (``application/x-www-form-urlencoded``) as the exact pairs an HTTP write
sends: a concern of the HTTP kind alone."""

from __future__ import annotations

import json
from typing import Any

from actions.spec import TemplateError

MAX_FORM_DEPTH = 8


def form_pairs(body: Any, style: str = "form") -> list[list[str]]:
    """A form body as the exact ``[name, value]`` pairs the write sends, in order.

    Values: strings as they are, numbers as JSON writes them, ``true``/``false``, and
    null as an empty value (how form APIs clear a field). In the ``form`` style an array
    repeats its field (``tag=a&tag=b``) and an object is refused; in ``deep_object``
    fields nest with brackets (``address[city]=Paris``, ``tags[0]=a``).
    """
    if not isinstance(body, dict):
        raise TemplateError("a form body is an object of fields")
    pairs: list[list[str]] = []
    for name, value in body.items():
        _form_field(pairs, str(name), value, style, 0)
    return pairs


def _form_field(pairs: list[list[str]], name: str, value: Any, style: str, depth: int) -> None:
    if depth > MAX_FORM_DEPTH:
        raise TemplateError(f"form field {name!r} is nested too deeply")
    if isinstance(value, dict):
        if style != "deep_object":
            raise TemplateError(f"form field {name!r} is an object: only deep_object forms nest")
        for key, item in value.items():
            _form_field(pairs, f"{name}[{key}]", item, style, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if style == "deep_object":
                _form_field(pairs, f"{name}[{i}]", item, style, depth + 1)
            elif isinstance(item, dict | list):
                raise TemplateError(f"form field {name!r} holds a nested value")
            else:
                pairs.append([name, _form_value(item)])
    else:
        pairs.append([name, _form_value(value)])


def _form_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return _json_text(value)


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
