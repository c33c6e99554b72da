"""An upstream MCP server as a connector kind."""
