"""The MCP stdio server (see server.py)."""
