"""``peon setup CLIENT``: Peon registered as an agent client's MCP server, in place of the client's own tools.

Promises:

* ``peon setup claude|codex|cursor|vscode [--scope user|project] [--dry-run] [--workspace DIR]`` prints the
  unified diff of every file it changes, then changes them — each file written atomically, or by the
  client's own command where the client has one — and says what of the client's own tools stays on;
  ``--dry-run`` prints the same and writes nothing;
* it is idempotent: run again, it finds nothing to change and says so (exit 0);
* a file it cannot edit safely (not JSON or TOML, a key of the wrong kind) stops it before anything is
  written, with one sentence naming the file (exit 1); a client command that fails stops it, with the
  command's own message (exit 1); bad usage is exit 2;
* a user-scope registration runs the ``peon`` this command was started as (by absolute path: clients may
  not see your ``PATH``); a project-scope one runs ``peon`` by name, and nothing of this machine is written
  into the project.

This module owns the command: the options, the ``peon`` to register, printing and applying a plan. What
each client's files hold is :mod:`peon.cli.clients`'.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from peon.cli.common import UsageError

if TYPE_CHECKING:
    from peon.cli.clients.base import Plan, Step, Target

# The clients and scopes on the command line; peon.cli.clients.registry has a module for each client (the
# parser is built for every command, so it names them without loading them).
CLIENT_NAMES = ("claude", "codex", "cursor", "vscode")
SCOPES = ("user", "project")

CLIENT_COMMAND_TIMEOUT = 120  # seconds a client's own command (claude mcp add-json) may take


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("client", choices=CLIENT_NAMES, help="the agent client to set up")
    parser.add_argument("--scope", choices=SCOPES, default="user",
                        help="user: every project you open with the client (default); project: this project's "
                             "shared files (checked in, used by your team)")
    parser.add_argument("--workspace", "-w", metavar="DIR",
                        help="project scope: the project (default: .); user scope: pin Peon to this workspace "
                             "(default: the directory the client works in)")
    parser.add_argument("--dry-run", action="store_true", help="print the changes and write nothing")


def peon_command() -> str:
    """The absolute path of the ``peon`` command this process runs as (or the one beside its Python)."""
    started_as = Path(sys.argv[0])
    if started_as.name == "peon" and started_as.is_file():
        return str(started_as.absolute())
    beside = Path(sys.executable).parent / "peon"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("peon")
    if found:
        return str(Path(found).absolute())
    raise UsageError("no peon command beside this Python or on PATH to register; install Peon (README.md) and run "
                     "peon setup from its environment")


def target_of(options: argparse.Namespace) -> Target:
    from peon.cli.clients.base import Target

    given = Path(options.workspace).expanduser().resolve() if options.workspace else None
    if given is not None and not given.is_dir():
        raise UsageError(f"workspace {options.workspace} is not an existing directory")
    project = given or Path.cwd()
    pinned = given if options.scope == "user" else None
    peon = peon_command() if options.scope == "user" else "peon"
    return Target(options.scope, project, pinned, Path.home(), dict(os.environ), peon)


def cmd_setup(options: argparse.Namespace) -> int:
    from peon.cli.clients.files import ConfigFileError
    from peon.cli.clients.registry import CLIENTS

    client = CLIENTS[options.client]
    target = target_of(options)
    try:
        plan = client.plan(target)
    except ConfigFileError as exc:
        print(f"peon: {exc}; nothing was written", file=sys.stderr)
        return 1
    show(plan)
    if not plan.steps:
        print(f"Peon is already set up for {plan.client} ({plan.scope} scope): nothing to change.")
    elif options.dry_run:
        print("--dry-run: nothing was written.")
    else:
        for step in plan.steps:
            if not apply(step, target):
                return 1
        print(f"Peon is set up for {plan.client} ({plan.scope} scope).")
    for note in plan.notes:
        print(f"note: {note}")
    return 0


def show(plan: Plan) -> None:
    from peon.cli.clients.files import unified_diff

    for step in plan.steps:
        label = f" (showing {step.label} only)" if step.label else ""
        print(f"# {step.path}{label}")
        for command in step.run:
            print(f"runs: {shlex.join(command)}")
        sys.stdout.write(unified_diff(step.path, step.before, step.after))


def apply(step: Step, target: Target) -> bool:
    """Make one step's change; False (with the reason on stderr) when it could not be made."""
    if step.text is not None:
        from peon.cli.clients.files import write_atomically

        write_atomically(step.path, step.text)
        return True
    for command in step.run:
        try:
            done = subprocess.run(command, cwd=step.cwd, env=dict(target.env), stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=CLIENT_COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"peon: {shlex.join(command)} did not finish in {CLIENT_COMMAND_TIMEOUT} s",
                  file=sys.stderr)
            return False
        if done.returncode != 0:
            reason = (done.stderr or done.stdout).strip().splitlines()
            print(f"peon: {shlex.join(command)} failed (exit {done.returncode})"
                  + (f": {reason[-1]}" if reason else ""), file=sys.stderr)
            return False
    return True
