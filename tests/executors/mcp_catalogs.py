"""Catalog documents for the real upstream MCP servers (tests/mcp/upstreams), as a team
fronting them would write: the filesystem, memory and git servers over stdio, the
"everything" server over Streamable HTTP. Each action says how its preview is made."""

from __future__ import annotations

import json
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


NAME = {"type": "string", "minLength": 1, "maxLength": 100, "pattern": "^[A-Za-z0-9 _.-]+$"}
# Unique: the memory server dedupes what it adds against what it stores, not within one
# call, while the preview's append merge repeats no item; the two agree only without
# repeats in the input.
OBSERVATIONS = {
    "type": "array",
    "maxItems": 20,
    "uniqueItems": True,
    "items": {"type": "string", "minLength": 1, "maxLength": 500},
}


def memory_catalog(command: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The knowledge-graph memory server: one entity per plan. Its write tools take lists
    (``{"entities": [...]}``); the actions take one entity and build the list. Every write
    is previewed by ``open_nodes`` on the entity's name: an unknown name answers
    ``{"entities": [], ...}``, so the pointer ``/entities/0`` finds nothing (absent)."""
    read = {
        "tool": "open_nodes",
        "arguments": {"names": [{"$input": "name"}]},
        "result": "structured",
        "pointer": "/entities/0",
    }
    return {
        "version": 1,
        "connectors": {"memory": {"mcp": {"command": command, "args": args, "env": env}}},
        "actions": {
            "memory_create": action(
                "memory",
                "create_entities",
                "create",
                "reversible",
                {"name": NAME, "entityType": NAME, "observations": OBSERVATIONS},
                target="entity {name}",
                arguments={
                    "entities": [
                        {
                            "name": {"$input": "name"},
                            "entityType": {"$input": "entityType"},
                            "observations": {"$input": "observations"},
                        }
                    ]
                },
                preview={
                    "recipe": "paired_read",
                    "read": read,
                    "document": {
                        "name": {"$input": "name"},
                        "entityType": {"$input": "entityType"},
                        "observations": {"$input": "observations"},
                    },
                },
            ),
            "memory_observe": action(
                "memory",
                "add_observations",
                "update",
                "reversible",
                {"name": NAME, "contents": OBSERVATIONS},
                target="entity {name}",
                arguments={
                    "observations": [
                        {"entityName": {"$input": "name"}, "contents": {"$input": "contents"}}
                    ]
                },
                preview={
                    "recipe": "paired_read",
                    "read": read,
                    "document": {"observations": {"$input": "contents"}},
                    "merge": "append",
                },
            ),
            "memory_delete": action(
                "memory",
                "delete_entities",
                "delete",
                "irreversible",
                {"name": NAME},
                target="entity {name}",
                arguments={"entityNames": [{"$input": "name"}]},
                preview={"recipe": "paired_read", "read": read},
            ),
        },
    }


BRANCH = {
    "type": "string",
    "minLength": 1,
    "maxLength": 100,
    "pattern": "^[A-Za-z0-9_][A-Za-z0-9_/-]*$",
}
MESSAGE = {"type": "string", "minLength": 1, "maxLength": 2000}


def git_catalog(command: str, args: list[str]) -> dict[str, Any]:
    """The git server, limited to one repository: creating a branch has no preview (the
    exact call is shown); a commit is previewed by the staged diff, as a delete of what is
    staged: after it, nothing is staged (``Staged changes:`` and nothing else: absent)."""
    return {
        "version": 1,
        "connectors": {"git": {"mcp": {"command": command, "args": args}}},
        "actions": {
            "git_branch": action(
                "git",
                "git_create_branch",
                "invoke",
                "external",
                {"repo_path": PATH, "branch_name": BRANCH},
                target="{repo_path} branch {branch_name}",
                preview={"recipe": "none"},
            ),
            # A read tool that answers plain text: the agent receives that text, as the
            # one string field it declares (filtered and cut like any other).
            "git_status": action(
                "git",
                "git_status",
                "read",
                "observation",
                {"repo_path": PATH},
                result={"status": {"type": "string", "text": True, "max_length": 2000}},
                approval="none",
                card={**CARD, "result": "The working tree's status (status)."},
            ),
            "git_commit": action(
                "git",
                "git_commit",
                "delete",
                "reversible",
                {"repo_path": PATH, "message": MESSAGE},
                target="{repo_path} staged changes",
                preview={
                    "recipe": "paired_read",
                    "read": {
                        "tool": "git_diff_staged",
                        "arguments": {"repo_path": {"$input": "repo_path"}},
                        "result": "text",
                        "absent_when": {"text_matches": "^Staged changes:\\s*$"},
                    },
                },
            ),
        },
    }


CITY = {"type": "string", "enum": ["New York", "Chicago", "Los Angeles"]}


def everything_catalog(url: str, headers: dict[str, str]) -> dict[str, Any]:
    """The "everything" reference server over Streamable HTTP: a read
    (``get-structured-content``, with declared result fields from its structured content;
    ``echo`` and ``get-sum`` answer plain text, which a result field's pointer cannot
    reach) and a harmless write with no preview (``toggle-simulated-logging``: it starts
    or stops log messages to the calling session only)."""
    return {
        "version": 1,
        "connectors": {"everything": {"mcp": {"url": url, "headers": headers}}},
        "actions": {
            "ev_weather": action(
                "everything",
                "get-structured-content",
                "read",
                "observation",
                {"location": CITY},
                result={
                    "temperature": {"type": "number", "pointer": "/temperature"},
                    "conditions": {"type": "string", "pointer": "/conditions", "max_length": 100},
                    "humidity": {"type": "number", "pointer": "/humidity"},
                },
                card={**CARD, "result": "The weather (temperature, conditions, humidity)."},
            ),
            "ev_logging": action(
                "everything",
                "toggle-simulated-logging",
                "invoke",
                "external",
                {},
                required=[],
                preview={"recipe": "none"},
            ),
        },
    }


def load_confirmed(document: dict[str, Any], connector: str):
    """Load ``document`` and confirm, as an admin would, every tool its actions on
    ``connector`` use, as the server serves them now; returns the connector and the
    tools pinned."""
    from actions.catalog import load_catalog
    from actions.connectors.mcp.pins import tools_confirm
    from actions.connectors.mcp.reading import McpReader
    from actions.models import Connector

    load_catalog(json.dumps(document))
    row = Connector.objects.get(name=connector)
    with McpReader(row) as reader:
        pinned = tools_confirm(row, reader.tools(), names=None, actor="admin")
    return row, pinned
