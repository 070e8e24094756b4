"""VS Code: ``peon mcp`` in its ``mcp.json``; its built-in tools are chosen in the chat, not in a file.

Promises:

* the server is ``servers.peon`` (``"type": "stdio"``) of the user profile's ``mcp.json``
  (``$XDG_CONFIG_HOME/Code/User/mcp.json``, ``~/.config/Code/User/mcp.json`` by default) or of the
  project's ``.vscode/mcp.json``, with the workspace as VS Code's own ``${workspaceFolder}``, every other
  server and the ``inputs`` kept; a file with comments (VS Code allows them) is refused, not rewritten;
* VS Code's built-in tools are chosen per chat (Configure Tools) or by a custom agent's ``tools`` list, never
  by a file Peon could edit: the plan's notes and :func:`status` say so.

This module owns what Peon knows of VS Code's files; :mod:`peon.cli.clients.files` reads and writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from peon.cli.clients.base import SERVER_NAME, Plan, Status, Target, found_by, is_peon_server, lookup
from peon.cli.clients.files import json_entry_step, load_json, read_text

TITLE = "VS Code"
BUILTINS = ("VS Code's built-in tools (terminal, file edits, search) cannot be turned off from a file: deselect "
            "them under Configure Tools in the chat, or use a custom agent whose tools are ['peon/*']")


def user_dir(home: Path, env: Mapping[str, str]) -> Path:
    config = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return config / "Code" / "User"


def mcp_files(project: Path, home: Path, env: Mapping[str, str]) -> dict[str, Path]:
    return {"user": user_dir(home, env) / "mcp.json", "project": project / ".vscode" / "mcp.json"}


def installed(home: Path, env: Mapping[str, str]) -> str | None:
    return found_by(("code",), (user_dir(home, env),), env)


def plan(target: Target) -> Plan:
    result = Plan(TITLE, target.scope)
    argv = target.server_argv("${workspaceFolder}")
    registration = json_entry_step(mcp_files(target.project, target.home, target.env)[target.scope], "servers",
                                   SERVER_NAME, {"type": "stdio", "command": argv[0], "args": argv[1:]})
    if registration is not None:
        result.steps.append(registration)
    result.notes.append(f"{BUILTINS}.")
    return result


def status(project: Path, home: Path, env: Mapping[str, str], found: str) -> Status:
    registered: dict[str, str | None] = {}
    for scope, path in mcp_files(project, home, env).items():
        server = lookup(load_json(path, read_text(path)), "servers", SERVER_NAME)
        registered[scope] = str(path) if is_peon_server(server) else None
    return Status(TITLE, found, registered, BUILTINS, None)
