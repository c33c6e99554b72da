"""MCP servers the tests run as upstreams."""
