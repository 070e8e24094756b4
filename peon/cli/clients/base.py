"""What every agent client module shares: the target of ``peon setup``, the steps of a plan, a client's status.

Promises:

* every client module (:mod:`~peon.cli.clients.claude`, :mod:`~peon.cli.clients.codex`,
  :mod:`~peon.cli.clients.cursor`, :mod:`~peon.cli.clients.vscode`) plans its change as :class:`Step`\\ s —
  a file's new text, or the client's own command that makes it — each with the diff it shows, and says in
  :attr:`Plan.notes` what of the client's own tools it cannot turn off; planning writes nothing;
* a plan for a project-scope file names ``peon`` by name and the workspace by the client's own variable (or
  ``.``): nothing of this machine — no absolute path, no ``PATH``, no environment — goes into a file a team
  shares; a user-scope plan names the ``peon`` this command runs from, since a client may not see its
  ``PATH``;
* a plan is empty when everything it would set is already so (``peon setup`` twice changes nothing);
* a client's :class:`Status` says where Peon is registered and which of its built-in tools are still on.

This module owns that vocabulary (:class:`Target`, :class:`Step`, :class:`Plan`, :class:`Status`) and how
a server entry is recognized as Peon's; each client module owns what it knows of its client's files.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SERVER_NAME = "peon"


@dataclass(frozen=True)
class Target:
    """What ``peon setup`` was asked for, and the machine it runs on."""

    scope: str  # "user" or "project"
    project: Path  # the project: where a project-scope file goes, and where doctor looks for one
    workspace: Path | None  # a workspace pinned with --workspace for a user-scope server; None: the client's
    home: Path
    env: Mapping[str, str]
    peon: str  # the absolute path of the peon command, for user-scope registrations

    def server_argv(self, workspace_variable: str) -> list[str]:
        """The command line of ``peon mcp`` for this target; ``workspace_variable`` is how the client names
        the directory it works in (``${workspaceFolder}``, or ``.`` for a client that starts servers there)."""
        if self.scope == "project":
            return ["peon", "mcp", "--workspace", workspace_variable]
        workspace = str(self.workspace) if self.workspace is not None else workspace_variable
        return [self.peon, "mcp", "--workspace", workspace]


@dataclass(frozen=True)
class Step:
    """One change to one file: written by Peon (``text``) or by the client's own command (``run``)."""

    path: Path
    before: str | None  # what the diff shows before (None: a new file)
    after: str  # what the diff shows after
    text: str | None = None  # the whole new file, when Peon writes it
    run: tuple[tuple[str, ...], ...] = ()  # the client's commands that make the change instead, in order
    cwd: Path | None = None
    label: str = ""  # what part of the file the diff shows, when not all of it


@dataclass
class Plan:
    client: str  # the client's name as its users know it
    scope: str
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Status:
    """What ``peon doctor`` says of one client."""

    client: str
    found: str  # how it was found on this machine (its command, or its configuration directory)
    registered: dict[str, str | None]  # scope -> the file that registers Peon there, or None
    builtins: str  # one sentence: which built-in tools are off, and which are still on
    builtins_off: bool | None  # None: the client has no file that could turn them off

    def to_dict(self) -> dict[str, Any]:
        return {"client": self.client, "found": self.found, "registered": self.registered,
                "builtins": self.builtins, "builtins_off": self.builtins_off}


def is_peon_server(entry: Any) -> bool:
    """Whether a client's server entry runs ``peon mcp`` (by name, by path, or as ``python -m peon.cli``)."""
    if not isinstance(entry, Mapping):
        return False
    command, args = entry.get("command"), entry.get("args") or []
    if not isinstance(command, str) or not isinstance(args, list):
        return False
    words = [command, *(str(arg) for arg in args)]
    return "mcp" in words and (Path(command).name == "peon" or "peon.cli" in words)


def lookup(data: Any, *keys: str) -> Any:
    """``data[k1][k2]...``, or None where a key is missing or a level is not a table."""
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def found_by(commands: Iterable[str], paths: Iterable[Path], env: Mapping[str, str]) -> str | None:
    """How a client is found installed: the first of ``commands`` on the environment's ``PATH``, else the
    first of its ``paths`` (its configuration) that exists; None when neither is there."""
    for name in commands:
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            return found
    return next((str(path) for path in paths if path.exists()), None)
