"""Tool pins as data: a tool's definition and its digest, and a person confirming a
definition the server was seen serving. Kind-neutral (the catalog and the admin use it,
and they never import a connector kind); the MCP kind's checks at submission and at the
worker are in actions/connectors/mcp/pins.py."""

from __future__ import annotations

import difflib
import hashlib
import json
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from actions.lib.audit import audit_record
from actions.models import Action, ToolPin
from actions.spec import ActionSpec

DEFINITION_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def tool_definition(tool: dict[str, Any]) -> dict[str, Any]:
    """The parts of a served tool a pin covers (absent and null parts left out)."""
    return {key: tool[key] for key in DEFINITION_FIELDS if tool.get(key) is not None}


def tool_digest(tool: dict[str, Any]) -> str:
    """SHA-256 of the definition's canonical JSON (sorted keys, no spaces, UTF-8): the
    same bytes whatever order the server sent its keys in."""
    text = json.dumps(
        tool_definition(tool), ensure_ascii=False, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def record_seen(connector, tool: dict[str, Any], digest: str) -> None:
    """Keep what the server serves now beside the confirmed definition, for review (one
    conditional UPDATE or INSERT; nothing when it is already recorded).

    A pin nobody confirmed yet keeps the definition it first saw (an import's): the
    person confirming an imported action pins what they reviewed, and a server that
    changed meanwhile is caught at the next plan, against that pin."""
    name = tool["name"]
    now = timezone.now()
    updated = (
        ToolPin.objects.filter(connector_id=connector.pk, tool=name)
        .filter(Q(digest__gt="") | Q(seen_digest=""))
        .exclude(seen_digest=digest)
        .update(seen_definition=tool_definition(tool), seen_digest=digest, seen_at=now)
    )
    if not updated and not ToolPin.objects.filter(connector_id=connector.pk, tool=name).exists():
        ToolPin.objects.get_or_create(
            connector_id=connector.pk,
            tool=name,
            defaults={
                "seen_definition": tool_definition(tool),
                "seen_digest": digest,
                "seen_at": now,
            },
        )


def pin_set(pin: ToolPin, definition: dict[str, Any], *, actor: str, **audited: Any) -> None:
    """Confirm ``definition`` on ``pin`` (locked by the caller, in its transaction): the
    one place a pin changes, audited as ``tool.confirmed`` with the digest it had.
    ``seen=True``: the definition was just read from the server, so it is also what was
    last seen served."""
    seen = audited.pop("seen", False)
    previous = pin.digest
    pin.definition = definition
    pin.digest = tool_digest(definition)
    pin.confirmed_by = actor
    pin.confirmed_at = timezone.now()
    fields = ["definition", "digest", "confirmed_by", "confirmed_at"]
    if seen:
        pin.seen_definition, pin.seen_digest, pin.seen_at = definition, pin.digest, pin.confirmed_at
        fields += ["seen_definition", "seen_digest", "seen_at"]
    pin.save(update_fields=fields)
    audit_record(
        kind="tool.confirmed",
        actor=actor,
        data={
            "connector": pin.connector.name,
            "tool": pin.tool,
            "digest": pin.digest,
            "previous": previous or None,
            **audited,
        },
    )


def tools_confirm_seen(connector, names: tuple[str, ...] | list[str], *, actor: str) -> list[str]:
    """A person confirms an imported MCP action: the tools it uses are pinned to what the
    import saw (``seen_definition``), not to a fresh read, so a server that changed
    between the import and this confirmation is caught at the next plan. A tool already
    confirmed keeps its pin (a later difference is reviewed on its own, in the admin's
    MCP tool pins or with confirm_tools). Audited; returns the tools pinned now."""
    pinned = []
    with transaction.atomic():
        for name in names:
            pin = (
                ToolPin.objects.select_for_update()
                .select_related("connector")
                .filter(connector_id=connector.pk, tool=name)
                .first()
            )
            if pin is None or pin.digest or not pin.seen_definition:
                continue
            pin_set(pin, pin.seen_definition, actor=actor, **{"from": "import"})
            pinned.append(name)
    return pinned


def pin_confirm_seen(pin: ToolPin, *, actor: str, shown: str | None = None) -> bool:
    """A person confirms the definition a pin last saw served (the admin's "Confirm this
    definition"). ``shown``: the digest of the definition the person was shown; when the
    server's definition moved on since, nothing is confirmed. Audited; False when
    nothing was confirmed."""
    with transaction.atomic():
        pin = ToolPin.objects.select_for_update().select_related("connector").get(pk=pin.pk)
        if not pin.seen_definition or pin.seen_digest == pin.digest:
            return False
        if shown is not None and shown != pin.seen_digest:
            # What the person was shown is no longer what was served: they confirm nothing
            # they did not see.
            return False
        pin_set(pin, pin.seen_definition, actor=actor)
    return True


def definition_text(definition: dict[str, Any] | None) -> list[str]:
    """A definition as pretty-printed JSON lines, for a unified diff a person reads."""
    if not definition:
        return []
    # ASCII only: a hostile description's control or bidi characters are shown escaped.
    return json.dumps(definition, ensure_ascii=True, sort_keys=True, indent=2).splitlines()


def definition_diff(confirmed: dict[str, Any] | None, seen: dict[str, Any] | None) -> str:
    """The unified diff from the confirmed definition to the one served (plain text: the
    caller escapes it)."""
    lines = difflib.unified_diff(
        definition_text(confirmed),
        definition_text(seen),
        fromfile="confirmed",
        tofile="served",
        lineterm="",
    )
    return "\n".join(lines)


def confirm_action_tools(action: Action, *, actor: str) -> list[str]:
    """For an MCP action whose class a person just confirmed: pin its tools to what the
    import saw (tools_confirm_seen). Nothing for an HTTP action."""
    mcp = ActionSpec.from_definition(action.name, action.definition).mcp
    if mcp is None:
        return []
    return tools_confirm_seen(action.connector, mcp.tools, actor=actor)
