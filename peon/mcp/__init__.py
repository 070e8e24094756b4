"""Peon as a Model Context Protocol server (``peon mcp`` on stdin/stdout).

The protocol is sans I/O, one idea per module: :mod:`~peon.mcp.jsonrpc` (messages),
:mod:`~peon.mcp.revisions` (revisions and eras), :mod:`~peon.mcp.tools` (descriptors and results),
:mod:`~peon.mcp.progress`, :mod:`~peon.mcp.elicitation` (approval) and :mod:`~peon.mcp.connection`
(the per-connection state machine); :mod:`peon.mcp.protocol` gathers their public names for a
transport. :mod:`peon.mcp.calls` keeps the calls in flight for both transports; :mod:`peon.mcp.stdio` runs
one :class:`peon.Session` and moves the bytes. See ``docs/mcp.md``.
"""
