"""Placeholder: the session pool's interface (replaced by the real pool)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServerSpec:
    transport: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    connect_timeout: float = 10.0
    call_timeout: float = 30.0
    secrets: tuple[str, ...] = ()


@dataclass
class ToolResult:
    is_error: bool
    structured: Any | None
    text: str
    content: list[dict]
    raw: bytes
    elapsed_ms: int
    secret_echoed: bool


class McpError(Exception):
    sent = False


class McpUnavailable(McpError):
    sent = False


class McpCallLost(McpError):
    sent = True


class McpProtocolError(McpError):
    sent = True


def session_for(key: Hashable, spec: ServerSpec):
    raise McpUnavailable("the MCP session pool is not available")
