"""The table of agent clients ``peon setup`` registers Peon with, and what ``peon doctor`` reports of each.

Promises: :data:`CLIENTS` names every client ``peon setup`` knows, by the name on its command line; each is
a module with ``TITLE``, ``installed``, ``plan`` and ``status`` (see :mod:`peon.cli.clients.base`);
:func:`status` reports every client found on this machine, and a client whose files cannot be read is
reported with the reason, never a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from peon.cli.clients import claude, codex, cursor, vscode
from peon.cli.clients.base import Status
from peon.cli.clients.files import ConfigFileError

CLIENTS: dict[str, ModuleType] = {"claude": claude, "codex": codex, "cursor": cursor, "vscode": vscode}


def status(project: Path, home: Path, env: Mapping[str, str]) -> list[Status]:
    """Each client found on this machine: where Peon is registered and whether its own tools are off."""
    found = []
    for module in CLIENTS.values():
        where = module.installed(home, env)
        if where is None:
            continue
        try:
            found.append(module.status(project, home, env, where))
        except ConfigFileError as exc:
            found.append(Status(module.TITLE, where, {}, f"cannot tell: {exc}", None))
    return found
