"""``peon mcp``: the session's tools over MCP on stdin and stdout.

Promise: the supervisor's interpreter starts before this one loads the MCP server, so the two start-ups
overlap; the session adopts that process when nothing differs, and it is stopped otherwise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from peon.cli.common import open_session


def cmd_mcp(options: argparse.Namespace) -> int:
    from peon.client.spawn import launch

    # The supervisor's interpreter starts now, while this one loads the MCP server: the two start-ups
    # overlap, and the session adopts the process (it starts its own if anything here differs).
    workspace = Path(options.workspace).expanduser().resolve()
    early = launch(workspace) if workspace.is_dir() else None
    try:
        import peon
        from peon.mcp.instructions import server_instructions
        from peon.mcp.protocol import ServerIdentity
        from peon.mcp.stdio import serve

        # initialize is answered before the session has started (peon.mcp.stdio): the instructions say
        # where each result tells the sandbox, rather than guess it.
        identity = ServerIdentity(name="peon", version=peon.__version__, title="Peon",
                                  instructions=server_instructions(str(workspace), None))
        from peon.client.config.front_ends import MCP_DEFAULTS

        return serve(lambda approver: open_session(options, MCP_DEFAULTS, approver=approver, launch=early), identity)
    finally:
        if early is not None:
            early.abandon()  # a no-op once the session adopted it
