"""The MCP servers the benchmarks start over stdio: ``peon mcp`` of this interpreter and the peers that
``bench/install_peers`` installs, the environment each of them gets, and the client that reaches one.

Owns where each server's command is, whether a peer is installed (and what an absent one needs), and
where the servers' stderr goes: :data:`SERVER_LOG`'s file, which a benchmark points at a log of its run
and prints only when the run fails. Which servers a benchmark compares, and what it asks them, is the
benchmark's.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.client import Client

BENCH = Path(__file__).resolve().parents[1]
PEON = Path(sys.executable).parent / "peon"  # the `peon` installed with the interpreter running the benchmark
FILESYSTEM = BENCH / "js" / "node_modules" / ".bin" / "mcp-server-filesystem"
SHELL_SERVER = BENCH / "peers" / "venv" / "bin" / "mcp-shell-server"
# What an absent peer needs, by the peer's name.
NEEDS = {"server-filesystem": "run bench/install_peers; needs node and npm",
         "mcp-shell-server": "run bench/install_peers"}
# Where every server's stderr goes (banners, per-request logs): a file of the run, not the report.
SERVER_LOG: dict[str, Any] = {"file": sys.stderr}


def absent() -> dict[str, str]:
    """The peers that are not installed here, by name, each with what it needs."""
    missing = {}
    if shutil.which("node") is None or not FILESYSTEM.exists():
        missing["server-filesystem"] = NEEDS["server-filesystem"]
    if not SHELL_SERVER.exists():
        missing["mcp-shell-server"] = NEEDS["mcp-shell-server"]
    return missing


def server_env(home: Path) -> dict[str, str]:
    """The environment every server of a run gets, the same for each: a clean ``HOME``, so that ``bash -l``
    reads no developer's profile."""
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
            "XDG_STATE_HOME": str(home / ".local" / "state"), "XDG_CONFIG_HOME": str(home / ".config")}


def connect(command: list[str], env: dict[str, str], cwd: Path) -> Client:
    """A client of the server that ``command`` starts in ``cwd`` (the official MCP SDK's, in legacy mode:
    the peers speak no 2026-07-28), to be entered; the SDK is loaded on the first call, not with this module."""
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=str(cwd))
    return Client(stdio_client(params, errlog=SERVER_LOG["file"]), mode="legacy")
