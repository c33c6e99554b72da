"""Tool pinning: the defence against a server that changes a tool after a person
approved using it (a "rug pull": a new description that instructs the model, a widened
schema, a read-only hint dropped).

A tool's definition is what a client is told about it: its name, title, description,
input and output schemas and annotations. Its digest is the SHA-256 of their canonical
JSON. A person confirms a definition (actions.models.ToolPin); every plan carries the
digests of the tools it uses, and both submission and the worker, right before the
call, compare them with what the server serves now. A difference refuses the plan with
a readable reason and records what the server now serves, for an admin to review and
confirm."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from actions.cache import cached
from actions.models import Action, ToolPin
from actions.toolpins import (  # noqa: F401 - re-exported for the MCP kind
    DEFINITION_FIELDS,
    pin_set,
    record_seen,
    tool_definition,
    tool_digest,
)

from ..base import PreviewError


class ToolChanged(PreviewError):
    status = 409
    type = "tool-changed"
    title = "The MCP tool changed since it was confirmed"


class ToolNotConfirmed(PreviewError):
    status = 409
    type = "tool-not-confirmed"
    title = "The MCP tool has not been confirmed by a person"


def pins_of(connector) -> dict[str, ToolPin]:
    """The connector's pins by tool, as of the catalog generation (actions/cache.py)."""
    return cached(
        "tool_pins",
        connector.pk,
        lambda: {pin.tool: pin for pin in ToolPin.objects.filter(connector_id=connector.pk)},
    )


def pinned_digests(
    connector,
    names: tuple[str, ...],
    served: list[dict[str, Any]],
    pins: dict[str, ToolPin] | None = None,
) -> dict:
    """The confirmed digest of each tool in ``names``, checked against ``served`` (the
    server's tools/list as this process's session holds it). Raises ToolChanged or
    ToolNotConfirmed, after recording what is served for an admin to review. ``pins``:
    the connector's pins as the caller's catalog snapshot saw them (else looked up)."""
    by_name = {tool.get("name"): tool for tool in served}
    pins = pins_of(connector) if pins is None else pins
    out: dict[str, str] = {}
    for name in names:
        tool = by_name.get(name)
        if tool is None:
            raise ToolChanged(
                f"the MCP server of {connector.name} no longer offers the tool {name}; "
                "nothing was sent"
            )
        digest = tool_digest(tool)
        pin = pins.get(name)
        if pin is None or not pin.digest:
            record_seen(connector, tool, digest)
            raise ToolNotConfirmed(
                f"the tool {name} of {connector.name} has not been confirmed: an admin "
                "reviews its definition and confirms it (admin: MCP tools, or "
                "manage.py confirm_tools) before plans use it"
            )
        if digest != pin.digest:
            record_seen(connector, tool, digest)
            raise ToolChanged(
                f"the tool {name} of {connector.name} changed since it was confirmed "
                "(its description, schemas or annotations); plans that use it are "
                "refused until an admin reviews the difference and confirms it"
            )
        out[name] = digest
    return out


def tools_confirm(
    connector, served: list[dict[str, Any]], *, names: list[str] | None, actor: str
) -> list[str]:
    """A person confirms the definitions ``served`` (the server's tools/list as read
    now) of the tools ``names`` (None: every tool the connector's actions use), which
    plans then carry. Audited; returns the tools whose pin changed."""
    by_name = {tool.get("name"): tool for tool in served}
    if names is None:
        names = sorted(
            {
                tool
                for action in Action.objects.filter(connector_id=connector.pk)
                if action.spec.mcp is not None
                for tool in action.spec.mcp.tools
            }
        )
    missing = [name for name in names if name not in by_name]
    if missing:
        raise ToolChanged(f"the server of {connector.name} offers no tool {', '.join(missing)}")
    changed = []
    with transaction.atomic():
        for name in names:
            definition = tool_definition(by_name[name])
            pin, _ = (
                ToolPin.objects.select_for_update()
                .select_related("connector")
                .get_or_create(connector_id=connector.pk, tool=name)
            )
            if pin.digest == tool_digest(definition):
                continue
            pin_set(pin, definition, actor=actor, seen=True)
            changed.append(name)
    return changed
