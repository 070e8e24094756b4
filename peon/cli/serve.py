"""``peon serve``: the session's tools over MCP Streamable HTTP (:mod:`peon.serve`).

Promise: bad usage of ``peon serve`` is a :class:`~peon.cli.common.UsageError` (one sentence, exit
status 2), like any command's; the options and the server are :mod:`peon.serve.options`'.
"""

from __future__ import annotations

import argparse

from peon.cli.common import UsageError


def cmd_serve(options: argparse.Namespace) -> int:
    from peon.serve.options import ServeUsageError, command

    try:
        return command(options)
    except ServeUsageError as exc:
        raise UsageError(str(exc)) from None
