"""Catalog documents for the real upstream MCP servers (tests/mcp/upstreams), as a team
fronting them would write: the filesystem, memory and git servers over stdio, the
"everything" server over Streamable HTTP. Each action says how its preview is made."""

from __future__ import annotations

from typing import Any

CARD = {
    "effect": "Changes what the MCP server keeps.",
    "scope": "One target, named by the input.",
    "result": "The server's own answer, as declared.",
    "consent": "A reviewer approves each call.",
    "retry": "Propose again after a stale or refused plan.",
}


def action(
    connector: str,
    tool: str,
    kind: str,
    cls: str,
    properties: dict[str, Any],
    *,
    required: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "title": f"{tool} on {connector}",
        "connector": connector,
        "tool": tool,
        "kind": kind,
        "consequence_class": cls,
        "card": CARD,
        "input_schema": {
            "type": "object",
            "additionalProperties": False,
            "required": sorted(properties) if required is None else required,
            "properties": properties,
        },
        **extra,
    }


PATH = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[A-Za-z0-9_./-]+$"}
TEXT = {"type": "string", "maxLength": 20000}


def filesystem_catalog(command: str, args: list[str]) -> dict[str, Any]:
    read = {
        "tool": "read_text_file",
        "arguments": {"path": {"$input": "path"}},
        "result": "text",
        "absent_when": {"error_matches": "ENOENT"},
    }
    return {
        "version": 1,
        "connectors": {"files": {"mcp": {"command": command, "args": args}}},
        "actions": {
            "fs_read": action(
                "files",
                "read_text_file",
                "read",
                "observation",
                {"path": PATH},
                result={"content": {"type": "string", "pointer": "/content", "max_length": 4000}},
                card={**CARD, "result": "The file's text (content)."},
            ),
            "fs_write": action(
                "files",
                "write_file",
                "replace",
                "reversible",
                {"path": PATH, "content": TEXT},
                target="{path}",
                preview={"recipe": "paired_read", "read": read, "document": {"$input": "content"}},
            ),
            "fs_create": action(
                "files",
                "write_file",
                "create",
                "reversible",
                {"path": PATH, "content": TEXT},
                target="{path}",
                preview={"recipe": "paired_read", "read": read, "document": {"$input": "content"}},
            ),
            "fs_edit": action(
                "files",
                "edit_file",
                "update",
                "reversible",
                {
                    "path": PATH,
                    "edits": {
                        "type": "array",
                        "maxItems": 20,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["oldText", "newText"],
                            "properties": {"oldText": TEXT, "newText": TEXT},
                        },
                    },
                },
                target="{path}",
                preview={"recipe": "dry_run", "argument": "dryRun"},
            ),
        },
    }
