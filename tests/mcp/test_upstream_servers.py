"""The real upstream MCP servers the upstream-connector tests run against start, answer
the official client, and still serve the tools (with the required arguments) those
tests rely on: an upgrade that renames a tool or an argument fails here, by name.

The versions are pinned in tests/mcp/upstreams/package.json and requirements.lock; this
also checks that what is installed is what is pinned (a stale node_modules would
otherwise test something else)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.mcp.upstreams import servers

pytestmark = pytest.mark.e2e

# tool -> the required arguments the suite passes (compared as sets).
FILESYSTEM = {
    "read_text_file": {"path"},
    "write_file": {"path", "content"},
    "edit_file": {"path", "edits"},
    "list_allowed_directories": set(),
}
MEMORY = {
    "create_entities": {"entities"},
    "add_observations": {"observations"},
    "delete_entities": {"entityNames"},
    "open_nodes": {"names"},
    "read_graph": set(),
}
GIT = {
    "git_status": {"repo_path"},
    "git_diff_staged": {"repo_path"},
    "git_commit": {"repo_path", "message"},
    "git_create_branch": {"repo_path", "branch_name"},
    "git_branch": {"repo_path", "branch_type"},
    "git_log": {"repo_path"},
}
EVERYTHING = {"echo": {"message"}}


async def served(target: Any) -> tuple[str, dict[str, set[str]]]:
    """The negotiated protocol version and each tool's required arguments."""
    with anyio.fail_after(15):
        async with Client(target, mode="auto", read_timeout_seconds=10) as client:
            listed = await client.list_tools()
            tools = {t.name: set(t.input_schema.get("required") or ()) for t in listed.tools}
            return client.protocol_version, tools


def assert_serves(tools: dict[str, set[str]], expected: dict[str, set[str]]) -> None:
    missing = sorted(set(expected) - set(tools))
    assert not missing, f"tools gone upstream: {missing} (served: {sorted(tools)})"
    for name, required in expected.items():
        got = sorted(tools[name])
        assert tools[name] == required, f"{name} requires {got}, not {sorted(required)}"


def test_installed_versions_are_the_pinned_ones() -> None:
    servers.require_node_servers()
    pinned = json.loads((servers.HERE / "package.json").read_text())["dependencies"]
    for package in servers.NODE_PACKAGES:
        meta = json.loads((servers.SCOPE / package / "package.json").read_text())
        assert meta["version"] == pinned[f"@modelcontextprotocol/{package}"], package


def test_upstream_servers_serve_the_tools_the_suite_uses(tmp_path: Path) -> None:
    root = tmp_path / "files"
    root.mkdir()
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)

    async def main() -> None:
        version, tools = await served(servers.filesystem_server(root).params())
        assert version and version.startswith("20"), version
        assert_serves(tools, FILESYSTEM)

        _, tools = await served(servers.memory_server(tmp_path / "memory.jsonl").params())
        assert_serves(tools, MEMORY)

        _, tools = await served(servers.git_server(repo).params())
        assert_serves(tools, GIT)

        _, tools = await served(servers.everything_stdio().params())
        assert_serves(tools, EVERYTHING)

    anyio.run(main)


def test_everything_answers_over_streamable_http() -> None:
    async def main(url: str) -> None:
        _, tools = await served(url)
        assert_serves(tools, EVERYTHING)
        with anyio.fail_after(10):
            async with Client(url, mode="auto", read_timeout_seconds=10) as client:
                result = await client.call_tool("echo", {"message": "countersign"})
        assert [c.text for c in result.content] == ["Echo: countersign"]

    with servers.everything_http() as url:
        assert url.startswith("http://127.0.0.1:")
        anyio.run(main, url)
