"""A small MCP server built with the Python standard library only."""
