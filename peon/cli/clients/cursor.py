"""Cursor: ``peon mcp`` in its ``mcp.json``, and its CLI agent's shell and file tools denied.

Promises:

* the server is ``mcpServers.peon`` of ``~/.cursor/mcp.json`` (user scope) or of the project's
  ``.cursor/mcp.json``, with the workspace as Cursor's own ``${workspaceFolder}``, every other server kept;
* the Cursor CLI's permissions (``~/.cursor/cli-config.json``, under ``$XDG_CONFIG_HOME/cursor/`` where that
  is set, or the project's ``.cursor/cli.json``) deny its shell and its file reads and writes
  (:data:`DENIED`), every other rule kept;
* Cursor's editor keeps its agent's tools in its own settings, which no file turns off: the plan's notes
  and :func:`status` say so rather than claim it.

This module owns what Peon knows of Cursor's files; :mod:`peon.cli.clients.files` reads and writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from peon.cli.clients.base import SERVER_NAME, Plan, Status, Step, Target, found_by, is_peon_server, lookup
from peon.cli.clients.files import ConfigFileError, edit_json, json_entry_step, load_json, read_text

TITLE = "Cursor"
DENIED = ("Shell(*)", "Read(**)", "Write(**)")
EDITOR = ("Cursor's editor keeps its agent's own tools (terminal, file edits, search) in its settings, which no file "
          "turns off: turn them off there, or allow only Peon's tools in the chat")


def mcp_files(project: Path, home: Path) -> dict[str, Path]:
    return {"user": home / ".cursor" / "mcp.json", "project": project / ".cursor" / "mcp.json"}


def cli_files(project: Path, home: Path, env: Mapping[str, str]) -> dict[str, Path]:
    user = (Path(env["XDG_CONFIG_HOME"]) / "cursor" if env.get("XDG_CONFIG_HOME") else home / ".cursor")
    return {"user": user / "cli-config.json", "project": project / ".cursor" / "cli.json"}


def installed(home: Path, env: Mapping[str, str]) -> str | None:
    return found_by(("cursor", "cursor-agent"), (home / ".cursor",), env)


def plan(target: Target) -> Plan:
    result = Plan(TITLE, target.scope)
    argv = target.server_argv("${workspaceFolder}")
    registration = json_entry_step(mcp_files(target.project, target.home)[target.scope], "mcpServers", SERVER_NAME,
                                   {"command": argv[0], "args": argv[1:]})
    if registration is not None:
        result.steps.append(registration)
    path = cli_files(target.project, target.home, target.env)[target.scope]
    before = read_text(path)
    after = edit_json(path, before, lambda config: deny_builtins(config, new=before is None and target.scope == "user"))
    if after != before:
        result.steps.append(Step(path, before, after, text=after))
    result.notes.append(f"{EDITOR}; the rules written to {path.name} apply to the Cursor CLI (cursor-agent).")
    return result


def deny_builtins(config: dict[str, Any], new: bool) -> None:
    if new:
        config["version"] = 1  # the CLI's own file has a schema version; it fills in the rest itself
    permissions = config.setdefault("permissions", {})
    if not isinstance(permissions, dict) or not isinstance(permissions.setdefault("deny", []), list):
        raise ConfigFileError("permissions.deny of the Cursor CLI's configuration is not a list; fix it first")
    permissions.setdefault("allow", [])
    permissions["deny"].extend(rule for rule in DENIED if rule not in permissions["deny"])


def status(project: Path, home: Path, env: Mapping[str, str], found: str) -> Status:
    registered: dict[str, str | None] = {}
    for scope, path in mcp_files(project, home).items():
        server = lookup(load_json(path, read_text(path)), "mcpServers", SERVER_NAME)
        registered[scope] = str(path) if is_peon_server(server) else None
    rules: set[str] = set()
    for path in cli_files(project, home, env).values():
        deny = lookup(load_json(path, read_text(path)), "permissions", "deny")
        rules |= {rule for rule in deny if isinstance(rule, str)} if isinstance(deny, list) else set()
    missing = [rule for rule in DENIED if rule not in rules]
    if missing:
        return Status(TITLE, found, registered, f"still on: the Cursor CLI's {', '.join(missing)} (not denied); "
                      f"{EDITOR}", False)
    return Status(TITLE, found, registered, f"the Cursor CLI denies {', '.join(DENIED)}; {EDITOR}", None)
