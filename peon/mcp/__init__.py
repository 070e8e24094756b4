"""Peon as a Model Context Protocol server on stdin/stdout (``peon mcp``).

:mod:`peon.mcp.protocol` decides what every message means and what to answer, without I/O;
:mod:`peon.mcp.server` runs one :class:`peon.Session` and moves the bytes. See ``docs/mcp.md``.
"""
