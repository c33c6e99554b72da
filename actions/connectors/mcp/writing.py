"""The one tool call, from the worker, through a session started with the write
credential the worker opened (its own server process for a stdio server: the preview
side's never sees that credential).

What is shown is what is sent: the plan's request is ``{"method": "tools/call", "path":
<tool>, "body": <arguments>}``, and a dry-run tool's flag is sent explicitly set to "do
it", never left to the server's default. An MCP call carries no fence the server checks:
every write is guarded by the worker's re-read (the paired read, or the dry run again)
right before it, as an HTTP upstream with no conditional write is."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from actions.lib.canonical import CanonicalJSONError, loads_strict
from actions.lib.exceptions import UpstreamError

from ..base import Read
from .pins import ToolChanged, ToolNotConfirmed, pinned_digests
from .servers import McpAuth, server_spec
from .sessions import McpCallLost, McpError, McpUnavailable, session_for


@dataclass
class McpAnswer:
    """A tool's answer as the core records it (actions.connectors.base.Answer)."""

    is_error: bool
    text: str
    structured: Any
    body: bytes
    elapsed_ms: int
    secret_echoed: bool
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    reauthenticated: bool = False

    @classmethod
    def of(cls, result) -> McpAnswer:
        # What is kept for people (filtered by the core) is the tool's text, its lines as
        # the server wrote them, so the filter cuts a stack trace's lines and keeps the
        # rest; the result's one-line JSON would be cut whole. No text: the JSON.
        return cls(
            is_error=result.is_error,
            text=result.text,
            structured=result.structured,
            body=result.text.encode("utf-8", "surrogatepass") if result.text else result.raw,
            elapsed_ms=result.elapsed_ms,
            secret_echoed=result.secret_echoed,
        )

    def json(self) -> Any:
        """The result's document: its structured content, or its text parsed as JSON."""
        if self.structured is not None:
            return self.structured
        try:
            return loads_strict(self.text)
        except (CanonicalJSONError, ValueError) as exc:
            raise ValueError("the tool's text is not JSON") from exc

    def header(self, name: str) -> str | None:
        return None


def precondition(spec, read: Read | None, *, absent: bool) -> dict[str, Any]:
    if spec.mcp.recipe == "none" or read is None:
        return {"kind": "none", "expected": None, "enforced_by": "none"}
    if absent:
        return {"kind": "absent", "expected": None, "enforced_by": "reread"}
    source = "dry_run" if spec.mcp.recipe == "dry_run" else spec.version.source
    return {"kind": "version", "source": source, "expected": read.version, "enforced_by": "reread"}


def write_request(spec, values: dict[str, Any]) -> dict[str, Any]:
    return {"method": "tools/call", "path": spec.mcp.tool, "body": spec.mcp.real_arguments(values)}


def read_request(spec, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "method": "tools/call",
        "path": spec.mcp.tool,
        "body": spec.mcp.render_arguments(values),
    }


class Writer:
    """The write session for one plan (workers only)."""

    def __init__(self, connector, spec, auth: McpAuth) -> None:
        self.connector = connector
        self.spec = spec
        self.auth = auth
        self._server = server_spec(connector, auth)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def close(self) -> None:
        pass  # the session is kept for the next plan

    def session(self):
        return session_for((self.connector.pk, "write"), self._server)

    def recorded(self, request: dict[str, Any], *, key: str) -> dict[str, Any]:
        """The call as recorded before it is made: the tool and its arguments (the
        credential is the server's environment or headers, recorded by name only)."""
        return {
            "method": "tools/call",
            "tool": request["path"],
            "arguments": request["body"],
            "credential": sorted(self.auth.env) or sorted(self.auth.headers),
        }

    def refusal(self, target: dict[str, Any]) -> str | None:
        """Why the call may not be made now: a tool the plan uses is no longer the one
        approved, or no longer the one confirmed (None: it may). A server that cannot be
        asked (it does not start, it fails its tools/list) is no reason to give the plan
        up: UpstreamError, nothing sent, the worker tries again later."""
        try:
            tools = self.session().list_tools()
            now = pinned_digests(self.connector, self.spec.mcp.tools, tools)
        except (ToolChanged, ToolNotConfirmed) as exc:
            return exc.detail
        except McpError as exc:
            raise UpstreamError(
                f"the MCP server could not be asked for its tools: {exc}", sent=False
            ) from None
        approved = target.get("tools") or {}
        for name, digest in now.items():
            if approved.get(name) != digest:
                return (
                    f"the tool {name} is not the one this plan was approved with "
                    "(it was confirmed again since); propose again"
                )
        return None

    def send(self, request: dict[str, Any], *, key: str) -> McpAnswer:
        started = time.monotonic()
        try:
            session = self.session()
        except McpUnavailable as exc:
            raise UpstreamError(f"the MCP server could not be started: {exc}", sent=False) from None
        try:
            result = session.call_tool(
                request["path"], request["body"], timeout=self.connector.read_timeout
            )
        except McpUnavailable as exc:
            raise UpstreamError(f"the MCP server could not be reached: {exc}", sent=False) from None
        except McpCallLost as exc:
            raise UpstreamError(
                f"the request left but no answer came: {exc}", sent=True, timeout=True
            ) from None
        except McpError as exc:
            raise UpstreamError(
                f"the server misbehaved: {exc}", sent=getattr(exc, "sent", True)
            ) from None
        answer = McpAnswer.of(result)
        answer.elapsed_ms = answer.elapsed_ms or int((time.monotonic() - started) * 1000)
        return answer
