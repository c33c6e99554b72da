"""The agent API as a Model Context Protocol server (official ``mcp`` SDK, 2.x):
``protocol.py`` (the server over HTTP and stdio, and its handlers), ``boundary.py`` (what
every request passes), ``tools.py`` and ``resource_calls.py`` (the tools and the
resources as an agent calls them), ``resources.py``, ``consent.py`` and ``tasks.py``, and
``rendering.py`` (what a client shows of plans, refusals and cards)."""
