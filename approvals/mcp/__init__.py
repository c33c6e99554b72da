"""The agent API as a Model Context Protocol server (official ``mcp`` SDK, 2.x):
``protocol.py`` (tools, resources, the server over HTTP and stdio) and ``rendering.py``
(what a client shows of plans, refusals and cards)."""
