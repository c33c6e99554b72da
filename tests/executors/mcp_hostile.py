"""The hostile stdio MCP server (tests/mcp/upstreams/hostile.py) as a connector whose
plans the worker executes: a note file written by ``write_note`` and read by
``read_note``, every ``tools/call`` the server receives appended to a log the tests
count, and the server's misbehaviour aimed at the write tool only (``FAULT_TOOL``) so
the paired read stays clean unless a test wants otherwise.

``note_write`` replaces the note, previewed by its paired read; ``note_send`` calls the
same tool with no preview (an invoke a person always decides)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actions.catalog import load_catalog
from actions.connectors.mcp.pins import tools_confirm
from actions.connectors.mcp.reading import McpReader
from actions.models import Connector, Credential
from actions.services import agent_create, credential_set
from approvals.models import Plan
from approvals.services import plan_submit
from tests.executors.mcp_catalogs import CARD

HOSTILE = str(Path(__file__).resolve().parent.parent / "mcp" / "upstreams" / "hostile.py")
TEXT = {"type": "string", "maxLength": 2000}


def notes_catalog(
    mode: str,
    env: dict[str, str],
    *,
    read_timeout: float = 10.0,
    command: str = sys.executable,
) -> dict[str, Any]:
    read = {"tool": "read_note", "arguments": {}, "result": "text"}
    common = {
        "connector": "notes",
        "tool": "write_note",
        "card": CARD,
        "arguments": {"text": {"$input": "text"}},
        "input_schema": {
            "type": "object",
            "additionalProperties": False,
            "required": ["text"],
            "properties": {"text": TEXT},
        },
    }
    return {
        "version": 1,
        "connectors": {
            "notes": {
                "mcp": {"command": command, "args": [HOSTILE, mode], "env": env},
                "timeouts": {"connect": 5, "read": read_timeout},
            }
        },
        "actions": {
            "note_write": {
                **common,
                "title": "Replace the note",
                "kind": "replace",
                "consequence_class": "reversible",
                "target": "note",
                "preview": {"recipe": "paired_read", "read": read, "document": {"$input": "text"}},
            },
            "note_send": {
                **common,
                "title": "Send the note (no preview)",
                "kind": "invoke",
                "consequence_class": "external",
                "preview": {"recipe": "none"},
            },
        },
    }


@dataclass
class Notes:
    """A loaded hostile connector: its note file and the log of calls it received."""

    note: Path
    calls_log: Path
    agent: Any
    token: str

    @property
    def connector(self) -> Connector:
        return Connector.objects.get(name="notes")

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        """Every tools/call the server received (of ``tool``, if given), in order."""
        if not self.calls_log.exists():
            return []
        calls = [json.loads(line) for line in self.calls_log.read_text().splitlines()]
        return [c for c in calls if tool is None or c["tool"] == tool]

    def submit(self, text: str, action: str = "note_write") -> Plan:
        plan, _ = plan_submit(agent=self.agent, action_name=action, input={"text": text}, reason="")
        return plan


def notes_load(
    tmp_path: Path,
    mode: str = "ok",
    *,
    fault_tool: str | None = "write_note",
    env: dict[str, str] | None = None,
    read_timeout: float = 10.0,
    confirm: bool = True,
    command: str = sys.executable,
    credentials: dict[str, dict[str, str]] | None = None,
) -> Notes:
    """Load the catalog for ``mode``, store ``credentials`` ({role: env}: ``env``
    credentials), confirm the tools (as an admin would) and make an agent."""
    note, calls_log = tmp_path / "note.txt", tmp_path / "calls.jsonl"
    note.write_text("before\n")
    server_env = {"NOTE_FILE": str(note), "CALL_LOG": str(calls_log), **(env or {})}
    if fault_tool:
        server_env["FAULT_TOOL"] = fault_tool
    document = notes_catalog(mode, server_env, read_timeout=read_timeout, command=command)
    load_catalog(json.dumps(document))
    agent, token = agent_create(name="noter", action_names=["note_write", "note_send"], active=True)
    notes = Notes(note=note, calls_log=calls_log, agent=agent, token=token)
    for role, values in (credentials or {}).items():
        env_credential(notes.connector, role, values)
    if confirm:
        with McpReader(notes.connector) as reader:
            tools_confirm(notes.connector, reader.tools(), names=None, actor="admin")
    return notes


def env_credential(connector: Connector, role: str, env: dict[str, str]) -> Credential:
    """A stdio server's credential: environment variables (the newest one is used)."""
    return credential_set(
        connector=connector, role=role, scheme=Credential.Scheme.ENV, secret={"env": env}
    )
