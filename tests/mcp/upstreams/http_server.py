"""A Streamable HTTP MCP server for the tests: the SDK's own ``MCPServer`` (both protocol
eras) under uvicorn on 127.0.0.1, behind a check of a header credential.

Run it as ``python http_server.py PORT [json]``: every request to ``/mcp`` must carry
``Authorization: Bearer <MCP_TOKEN>`` (environment), else 401. ``json`` answers with
JSON bodies instead of event streams. Tools:

- ``echo(text)``: the text back;
- ``big(size)``: a text of ``size`` bytes (to test the limits on what is read);
- ``whoami()``: the bearer token the request carried (a server that echoes its
  credential).
"""

from __future__ import annotations

import os
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

TOKEN = os.environ["MCP_TOKEN"]
server = MCPServer("countersign-test-upstream")


@server.tool()
def echo(text: str) -> str:
    """The text back."""
    return text


@server.tool()
def big(size: int) -> str:
    """A text of ``size`` bytes."""
    return "y" * size


@server.tool()
def whoami() -> str:
    """The bearer token the request carried."""
    return f"you sent {TOKEN}"


def guarded(app):
    async def check(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no"})
                return
        await app(scope, receive, send)

    return check


if __name__ == "__main__":
    port = int(sys.argv[1])
    json_response = len(sys.argv) > 2 and sys.argv[2] == "json"
    app = server.streamable_http_app(json_response=json_response)
    uvicorn.run(guarded(app), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
