"""The MCP kind: an upstream that is an MCP server, over stdio or Streamable HTTP
(docs/mcp-upstreams.md). Its tools are actions: a read tool is an observation; a write
tool is previewed by a paired read tool on the same server, by its own dry run, or not at
all (the exact call is shown and a person always decides). Every tool a plan uses is
pinned (pins.py): a server that changes a tool after it was confirmed has its plans
refused at submission and again at the worker, until a person confirms the change.

Sessions are kept per process and role (sessions.py): the preview side's server runs
with the read credential, the worker's with the write credential it opened."""

from __future__ import annotations

from typing import Any

from ..base import STRONG, WEAK, ConnectorKind, Features, Read, StatusRead, Verdict
from . import outcomes, reading, writing
from .pins import pinned_digests
from .servers import NO_AUTH, credential_auth

RECIPES = {
    # recipe: (strength, what the page and the API say)
    "paired_read": (STRONG, "computed from a read of the target"),
    "dry_run": (WEAK, "from the tool's own dry run: the server promises it writes nothing"),
    "none": ("none", "no preview: the exact call is shown"),
    "read": ("none", "a read: nothing changes"),
}


class MCPKind(ConnectorKind):
    name = "mcp"
    # No fence the server checks, no idempotency key, no 202; a local server may take
    # no credential at all (the reader's refusal of undeclared tools is the boundary).
    features = Features(write_credential_optional=True)

    def reader(self, connector):
        return reading.McpReader(connector)

    def read(self, reader, spec, values: dict[str, Any]) -> Read:
        return reading.read_target(reader, spec, values)

    def target(self, reader, spec, values: dict[str, Any]) -> dict[str, Any]:
        """The connector, the server's address, a label for reviewers, the digests of
        the confirmed tools the plan uses (checked against what the server serves now:
        ToolChanged or ToolNotConfirmed otherwise) and the preview's recipe."""
        connector = reader.connector
        mcp = spec.mcp
        tools = pinned_digests(connector, mcp.tools, reader.tools(), reader.pins)
        strength, says = RECIPES[mcp.recipe]
        preview: dict[str, Any] = {"recipe": mcp.recipe, "strength": strength, "says": says}
        if mcp.paired is not None:
            preview["read_tool"] = mcp.paired.tool
        label = spec.render_label(values) or mcp.tool
        return {
            "connector": connector.name,
            "base_url": connector.base_url,
            "path": label,
            "tool": mcp.tool,
            "tools": tools,
            "preview": preview,
        }

    def precondition(self, spec, read: Read | None, *, absent: bool) -> dict[str, Any]:
        return writing.precondition(spec, read, absent=absent)

    def write_request(
        self, spec, values: dict[str, Any], body: Any, precondition: dict, read: Read | None
    ) -> dict[str, Any]:
        return writing.write_request(spec, values)

    def read_request(self, spec, values: dict[str, Any]) -> dict[str, Any]:
        return writing.read_request(spec, values)

    def not_a_read(self, request: dict[str, Any]) -> str | None:
        # The reader refuses any tool not declared a read (reading.read_refusal).
        return None if request.get("method") == "tools/call" else "refused: not a tool call"

    def observe(self, reader, request: dict[str, Any]):
        return writing.McpAnswer.of(reader.call(request["path"], request["body"]))

    def recorded_read(self, reader, request: dict[str, Any]) -> dict[str, Any]:
        return {"method": "tools/call", "tool": request["path"], "arguments": request["body"]}

    def authenticate(self, credential, secret: dict[str, Any]):
        return NO_AUTH if credential is None else credential_auth(credential, secret)

    def writer(self, connector, spec, auth) -> writing.Writer:
        return writing.Writer(connector, spec, auth)

    def refusal_before_send(self, writer, spec, target: dict[str, Any]) -> str | None:
        return writer.refusal(target)

    def classify(
        self, spec, answer, precondition: dict[str, Any], *, repeat: bool = False
    ) -> Verdict:
        return outcomes.verdict(spec, answer)

    def read_refusal(self, spec, answer) -> str | None:
        return outcomes.read_refusal(spec, answer)

    def status_path(self, connector, spec, values: dict[str, Any], answer) -> str:
        return ""

    def read_status(self, reader, path: str) -> StatusRead:
        raise NotImplementedError("an MCP server has no status request")
