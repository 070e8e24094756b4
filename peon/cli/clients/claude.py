"""Claude Code: ``peon mcp`` registered as its MCP server, and its own file and shell tools denied.

Promises:

* the server is registered where Claude Code keeps it — user scope in ``~/.claude.json`` (or
  ``$CLAUDE_CONFIG_DIR/.claude.json``), project scope in the project's ``.mcp.json`` — through Claude Code's
  own ``claude mcp add-json`` when ``claude`` is on ``PATH`` (it knows its file and rewrites it safely while
  Claude Code runs), else by editing that file; the diff of ``~/.claude.json`` shows only Peon's entry,
  since the rest of that file is Claude Code's private state;
* the tools Peon replaces (:data:`DENIED`) are added to ``permissions.deny`` of the settings at the same
  scope (``~/.claude/settings.json``, or the project's ``.claude/settings.json``), every other rule kept:
  Claude Code then leaves them out of what the model is offered, and subagents inherit the denial;
* :func:`status` reads the same files, and the project's ``.claude/settings.local.json``, as Claude Code
  merges them (a deny rule in any of them denies).

This module owns what Peon knows of Claude Code's files; :mod:`peon.cli.clients.files` reads and writes them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from peon.cli.clients.base import SERVER_NAME, Plan, Status, Step, Target, found_by, is_peon_server, lookup
from peon.cli.clients.files import ConfigFileError, edit_json, load_json, read_text, render_json

TITLE = "Claude Code"
# Claude Code's tools that read, write or run outside Peon, by the names its permission rules use. Checked
# against the tool list Claude Code 2.1.332 offers a model (Bash, Monitor, Read, Write, Edit, NotebookEdit,
# EnterWorktree, ExitWorktree) plus the names of other versions and platforms (MultiEdit, Glob, Grep, LS,
# NotebookRead, PowerShell): a rule naming a tool a version lacks is harmless.
DENIED = ("Bash", "Monitor", "PowerShell", "Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "NotebookRead",
          "Glob", "Grep", "LS", "EnterWorktree", "ExitWorktree")
KEPT = ("WebFetch and WebSearch stay on (Peon has no web tools); subagents (Task, Workflow) inherit the denials; "
        "hooks, the status line and commands you type after ! run outside Peon")


def config_dir(home: Path, env: Mapping[str, str]) -> Path:
    return Path(env["CLAUDE_CONFIG_DIR"]).expanduser() if env.get("CLAUDE_CONFIG_DIR") else home / ".claude"


def state_file(home: Path, env: Mapping[str, str]) -> Path:
    """Claude Code's own file, which holds user-scope (and local-scope) servers."""
    if env.get("CLAUDE_CONFIG_DIR"):
        return config_dir(home, env) / ".claude.json"
    return home / ".claude.json"


def servers_file(target: Target) -> Path:
    return state_file(target.home, target.env) if target.scope == "user" else target.project / ".mcp.json"


def settings_files(project: Path, home: Path, env: Mapping[str, str]) -> dict[str, Path]:
    return {"user": config_dir(home, env) / "settings.json", "project": project / ".claude" / "settings.json",
            "local": project / ".claude" / "settings.local.json"}


def command(env: Mapping[str, str]) -> str | None:
    return shutil.which("claude", path=env.get("PATH"))


def installed(home: Path, env: Mapping[str, str]) -> str | None:
    return found_by(("claude",), (config_dir(home, env), state_file(home, env)), env)


def plan(target: Target) -> Plan:
    result = Plan(TITLE, target.scope)
    argv = target.server_argv(".")
    entry = {"type": "stdio", "command": argv[0], "args": argv[1:], "env": {}}
    registration = register(target, entry)
    if registration is not None:
        result.steps.append(registration)
    settings = settings_files(target.project, target.home, target.env)[target.scope]
    before = read_text(settings)
    after = edit_json(settings, before, deny_builtins)
    if after != before:
        result.steps.append(Step(settings, before, after, text=after))
    result.notes.append(f"{TITLE} keeps some tools of its own: {KEPT}.")
    if target.scope == "project":
        result.notes.append(f"{TITLE} asks once, the first time it starts in this project, before it starts a "
                            f"server of .mcp.json: approve {SERVER_NAME}.")
    if target.workspace is None:
        result.notes.append(f"Peon's workspace is the directory {TITLE} starts in: start it at the project's root.")
    return result


def register(target: Target, entry: dict[str, Any]) -> Step | None:
    """The step that makes ``entry`` Peon's server at the target's scope (None: it already is)."""
    path = servers_file(target)
    text = read_text(path)
    data = load_json(path, text)
    servers = data.get("mcpServers")
    if servers is not None and not isinstance(servers, dict):
        raise ConfigFileError(f"{path}: mcpServers is not an object; fix it first")
    current = (servers or {}).get(SERVER_NAME)
    if current == entry:
        return None
    after_data = {**data, "mcpServers": {**(servers or {}), SERVER_NAME: entry}}
    if target.scope == "user":  # show Peon's entry only: the rest of the file is Claude Code's private state
        shown_before = None if current is None else _entry_text(current)
        shown_after, label = _entry_text(entry), f"mcpServers.{SERVER_NAME}"
    else:
        shown_before, shown_after, label = text, render_json(after_data, text), ""
    claude = command(target.env)
    if claude is None:
        return Step(path, shown_before, shown_after, text=render_json(after_data, text), label=label)
    scope = ["--scope", target.scope]
    runs: list[tuple[str, ...]] = []
    if current is not None:
        runs.append((claude, "mcp", "remove", *scope, SERVER_NAME))
    runs.append((claude, "mcp", "add-json", *scope, SERVER_NAME, json.dumps(entry)))
    return Step(path, shown_before, shown_after, run=tuple(runs), cwd=target.project, label=label)


def _entry_text(entry: Any) -> str:
    return json.dumps({SERVER_NAME: entry}, indent=2) + "\n"


def deny_builtins(settings: dict[str, Any]) -> None:
    permissions = settings.setdefault("permissions", {})
    if not isinstance(permissions, dict) or not isinstance(permissions.setdefault("deny", []), list):
        raise ConfigFileError("permissions.deny of Claude Code's settings is not a list; fix it first")
    deny = permissions["deny"]
    deny.extend(name for name in DENIED if name not in deny)


def denied(rules: Any) -> set[str]:
    """The tools a ``permissions.deny`` list denies outright (``Bash``, ``Bash(*)``)."""
    if not isinstance(rules, list):
        return set()
    names = set()
    for rule in rules:
        if isinstance(rule, str):
            names.add(rule.removesuffix("(*)").removesuffix("(**)"))
    return names


def status(project: Path, home: Path, env: Mapping[str, str], found: str) -> Status:
    registered: dict[str, str | None] = {}
    state = state_file(home, env)
    data = load_json(state, read_text(state))
    registered["user"] = str(state) if is_peon_server(lookup(data, "mcpServers", SERVER_NAME)) else None
    if is_peon_server(lookup(data, "projects", str(project), "mcpServers", SERVER_NAME)):
        registered["local"] = f"{state} (projects.{project})"
    shared = project / ".mcp.json"
    in_shared = lookup(load_json(shared, read_text(shared)), "mcpServers", SERVER_NAME)
    registered["project"] = str(shared) if is_peon_server(in_shared) else None
    off: set[str] = set()
    for path in settings_files(project, home, env).values():
        off |= denied(lookup(load_json(path, read_text(path)), "permissions", "deny"))
    still_on = [name for name in DENIED if name not in off]
    if still_on:
        text = f"still on: {', '.join(still_on)} (in no settings file's permissions.deny)"
    else:
        text = f"off ({', '.join(DENIED[:4])} and {len(DENIED) - 4} more denied); WebFetch and WebSearch stay on"
    return Status(TITLE, found, registered, text, not still_on)
