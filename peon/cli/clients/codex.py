"""Codex: ``[mcp_servers.peon]`` in its ``config.toml``, its shell tool off and its own writes read-only.

Promises:

* the server is the table ``[mcp_servers.peon]`` of ``$CODEX_HOME/config.toml`` (``~/.codex/config.toml``)
  for the user scope, or of the project's ``.codex/config.toml`` (which Codex reads only in a project you
  trust); keys the user added to that table (``env``, ``env_vars``, a ``tool_timeout_sec`` of their own)
  are kept, and every other line and comment of the file is left as it was (tomlkit);
* ``features.shell_tool = false`` takes away Codex's shell tools (``shell``, ``exec_command`` and
  ``write_stdin``: Codex offers no shell when it is off), and ``sandbox_mode = "read-only"`` leaves its
  ``apply_patch`` — which no setting removes for the models that have it — unable to write without asking;
* :func:`status` reads the same files, the project's over the user's, as Codex layers them.

This module owns what Peon knows of Codex's configuration; :mod:`peon.cli.clients.files` reads and writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomlkit

from peon.cli.clients.base import SERVER_NAME, Plan, Status, Step, Target, found_by, is_peon_server, lookup
from peon.cli.clients.files import ConfigFileError, parse_toml, read_text

TITLE = "Codex"
# Codex stops waiting for a tool call after tool_timeout_sec (60 s by default): above Peon's longest command
# (limits.max_timeout_seconds, 600 s by default) plus the time a person takes to answer an approval.
TOOL_TIMEOUT_SECONDS = 900
SANDBOX_MODE = "read-only"
KEPT = ("apply_patch stays (no setting removes it), but with sandbox_mode = \"read-only\" its writes ask you "
        "first; view_image and web search stay on")


def home_dir(home: Path, env: Mapping[str, str]) -> Path:
    return Path(env["CODEX_HOME"]).expanduser() if env.get("CODEX_HOME") else home / ".codex"


def config_files(project: Path, home: Path, env: Mapping[str, str]) -> dict[str, Path]:
    return {"user": home_dir(home, env) / "config.toml", "project": project / ".codex" / "config.toml"}


def installed(home: Path, env: Mapping[str, str]) -> str | None:
    return found_by(("codex",), (home_dir(home, env),), env)


def plan(target: Target) -> Plan:
    result = Plan(TITLE, target.scope)
    path = config_files(target.project, target.home, target.env)[target.scope]
    before = read_text(path)
    document = parse_toml(path, before)
    argv = target.server_argv(".")
    try:
        set_server(document, argv[0], argv[1:])
        turn_off_builtins(document)
    except (TypeError, KeyError, ValueError) as exc:  # a key of the wrong kind: a table where a value is, ...
        raise ConfigFileError(f"{path}: cannot set Peon's keys ({exc}); fix the file first") from None
    after = tomlkit.dumps(document)
    if after != (before or ""):
        result.steps.append(Step(path, before, after, text=after))
    result.notes.append(f"{TITLE} keeps some tools of its own: {KEPT}.")
    if target.scope == "project":
        result.notes.append(f"{TITLE} reads {path} only in a project you trust (it asks the first time it starts "
                            "there; the answer is kept in ~/.codex/config.toml).")
    if target.workspace is None:
        result.notes.append(f"Peon's workspace is the directory {TITLE} starts in: start it at the project's root.")
    return result


def set_server(document: Any, command: str, args: list[str]) -> None:
    servers = document.get("mcp_servers")
    if servers is None:
        servers = document["mcp_servers"] = tomlkit.table(is_super_table=True)
    if not isinstance(servers, dict):
        raise TypeError("mcp_servers is not a table")
    server = servers.get(SERVER_NAME)
    if server is None:
        server = tomlkit.table()
        server["command"] = command
        server["args"] = args
        server["tool_timeout_sec"] = TOOL_TIMEOUT_SECONDS
        servers[SERVER_NAME] = server
        return
    if not isinstance(server, dict):
        raise TypeError(f"mcp_servers.{SERVER_NAME} is not a table")
    if server.get("command") != command:
        server["command"] = command
    if list(server.get("args") or []) != args:
        server["args"] = args
    if "tool_timeout_sec" not in server:
        server["tool_timeout_sec"] = TOOL_TIMEOUT_SECONDS
    if server.get("enabled") is False:
        del server["enabled"]


def turn_off_builtins(document: Any) -> None:
    features = document.get("features")
    if features is None:
        features = document["features"] = tomlkit.table()
    if not isinstance(features, dict):
        raise TypeError("features is not a table")
    if features.get("shell_tool") is not False:
        features["shell_tool"] = False
    if document.get("sandbox_mode") != SANDBOX_MODE:
        document["sandbox_mode"] = SANDBOX_MODE


def status(project: Path, home: Path, env: Mapping[str, str], found: str) -> Status:
    layers = {scope: parse_toml(path, read_text(path)) for scope, path in config_files(project, home, env).items()}
    paths = config_files(project, home, env)
    registered: dict[str, str | None] = {}
    for scope, document in layers.items():
        server = lookup(document, "mcp_servers", SERVER_NAME)
        on = is_peon_server(server) and lookup(server, "enabled") is not False
        registered[scope] = str(paths[scope]) if on else None

    def effective(*keys: str) -> Any:
        values = [lookup(layers[scope], *keys) for scope in ("project", "user")]
        return next((value for value in values if value is not None), None)

    still_on = []
    if effective("features", "shell_tool") is not False:
        still_on.append("its shell (features.shell_tool is not false)")
    if effective("sandbox_mode") != SANDBOX_MODE:
        still_on.append(f"apply_patch writes without asking (sandbox_mode is not \"{SANDBOX_MODE}\")")
    text = f"still on: {'; '.join(still_on)}" if still_on else f"off: its shell; {KEPT}"
    return Status(TITLE, found, registered, text, not still_on)
