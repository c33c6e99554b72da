"""Reads: a GET that reads one resource as a proposed, disabled read action.

A list or a search (no path parameter naming one resource, a required query) is listed
in the report with why, not proposed: a catalog read's target has no query string.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from .document import Refused
from .naming import encoded_target, proposed_name, proposed_title
from .operations import Operation
from .proposal import HANDLED_HEADERS, Draft, Setting, add_warning, x_countersign
from .results import answer, result_of
from .schemas import SchemaConverter, inputs_from_parameters
from .text import draft_card


def propose_read(setting: Setting, op: Operation) -> Draft | str:
    """A GET that reads one resource as a disabled read action, or why it is not
    proposed (a list, a search, no JSON answer)."""
    warnings: list[dict[str, str]] = []
    warn = partial(add_warning, warnings)

    xc = x_countersign(op)
    base = f"{op.pointer}/x-countersign"
    if "kind" in xc:
        raise Refused(f"{base}/kind", "x-countersign kind is for writes: a GET is a read")
    if xc.get("class", "observation") != "observation":
        raise Refused(
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
    converter = SchemaConverter(setting.doc, warn)
    raw, answer_pointer, _ = found
    node, answer_pointer, stack, why, prefix = answer(raw, answer_pointer, converter)
    if node is None:
        return f"{why}: not proposed"
    walked = inputs_from_parameters(op, converter, warn, partial(_not_sent, warn))
    if isinstance(walked, str):
        return walked
    properties, required, target = walked
    result = result_of(node, answer_pointer, stack, converter, warn, prefix=prefix)
    if not result:
        return "the answer has no top-level field a result can declare: not proposed"
    if op.node.get("deprecated") is True:
        warn(op.pointer, "the operation is deprecated")
    name = proposed_name(op, xc, setting.prefix, warn)
    definition: dict[str, Any] = {
        "title": proposed_title(op, name, warn),
        "connector": setting.connector,
        "kind": "read",
        "consequence_class": "observation",
        "enabled": False,
    }
    description = op.text("description")
    if description:
        definition["description"] = description[:2000]
    definition["card"], drafted = draft_card(op, xc, warn, result)
    definition["input_schema"] = {
        "type": "object",
        "additionalProperties": False,
        "required": list(dict.fromkeys(required)),
        "properties": properties,
    }
    definition["target"] = encoded_target(op, target, warn)
    definition["result"] = result
    warn(
        op.pointer,
        "a read: if what it returns is private, mark it sensitive: true (a reviewer "
        "then approves every call); add scope rules for the records an agent may see",
    )
    return Draft(
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


def _not_sent(warn, param: dict[str, Any], pointer: str) -> str:
    """A query, header or cookie parameter, which a read never sends; why the GET is not
    proposed, if that is why (a search)."""
    pname, where = param["name"], param["in"]
    if where == "query":
        if param.get("required") is True:
            return (
                f"required query parameter {pname!r}: a search is not proposed "
                "(a catalog read's target has no query string)"
            )
        warn(
            pointer,
            f"query parameter {pname!r} is not sent (a catalog read's target has no query string)",
        )
    elif where == "header":
        if pname.lower() in HANDLED_HEADERS | {"if-none-match", "if-match"}:
            return ""
        if param.get("required") is True:
            raise Refused(pointer, f"required header {pname!r}: a read sends no headers of its own")
        warn(pointer, f"header {pname!r} is not sent by a read")
    else:
        warn(pointer, f"cookie parameter {pname!r} is not sent")
    return ""
