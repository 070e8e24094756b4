"""What the ``peon`` commands share: the session options, opening the session, and bad usage.

Promise: every command that opens a session reads the same options (``--workspace``, ``--config`` and,
where offered, ``--allow``) the same way (:func:`config_argument`, also used by ``peon serve``'s
:mod:`peon.serve.options`), and reports bad usage as a :class:`UsageError`, which the command line
prints as one sentence with exit status :data:`USAGE_ERROR`. Importing this module loads nothing of a
session: ``peon mcp`` starts its supervisor before anything else is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peon.core.risk import RISK_NAMES

if TYPE_CHECKING:
    from peon.client.session import Session

USAGE_ERROR = 2


class UsageError(Exception):
    """Bad input from the person at the command line (exit status 2)."""


def add_session_arguments(sub: argparse.ArgumentParser, allow: bool = False, one_shot: bool = False) -> None:
    """The options of a command that opens a session; ``allow``: it offers ``--allow RISK`` too;
    ``one_shot``: its session ends with the command and leaves no state unless ``--keep-state``."""
    sub.add_argument("--workspace", "-w", default=".", metavar="DIR", help="the workspace directory (default: .)")
    if one_shot:
        sub.add_argument("--keep-state", action="store_true", help="keep the session's state directory (its audit "
                         "log) when the command ends; by default a one-shot command leaves nothing behind")
    else:
        sub.set_defaults(keep_state=True)
    sub.add_argument("--config", metavar="PATH", help="a TOML configuration file applied over the defaults")
    if allow:
        sub.add_argument("--allow", action="append", choices=RISK_NAMES, metavar="RISK",
                         help=f"allow calls of this risk without asking ({', '.join(RISK_NAMES)}); repeatable")
    else:
        sub.set_defaults(allow=None)


def config_argument(path: str | None, allow: list[str] | None) -> Any:
    """What to hand to :class:`peon.Session`: the file, the ``--allow`` overrides, or both merged."""
    overrides = {"approval": {risk: "allow" for risk in allow}} if allow else None
    if path is None:
        return overrides
    config_path = Path(path).expanduser()
    if overrides is None:
        return str(config_path)
    from peon.client.config import load_config, merge, read_toml

    load_config(config_path)  # reports a bad file by its own name before the overrides are merged in
    return merge(read_toml(config_path) or {}, overrides)


def open_session(options: argparse.Namespace, front_end: Mapping[str, Any] | None = None, **kwargs: Any) -> Session:
    """The session of a command; ``front_end``: the command's own defaults (dotted keys), under every
    configuration someone wrote (:func:`peon.client.config.front_ends.with_front_end_defaults`)."""
    import peon

    workspace = Path(options.workspace).expanduser()
    if not workspace.is_dir():
        raise UsageError(f"workspace {workspace} is not an existing directory")
    config = config_argument(options.config, options.allow)
    if front_end:
        from peon.client.config.front_ends import with_front_end_defaults

        config = with_front_end_defaults(config, front_end, workspace=workspace, env=kwargs.get("env"))
    return peon.Session(workspace, config, **kwargs)


@contextlib.contextmanager
def one_shot(session: Session, options: argparse.Namespace) -> Iterator[Session]:
    """``session`` for one command: closed at the end and, unless ``--keep-state``, its state directory
    (which only this command's session used: the default one named by its id) removed."""
    try:
        yield session
    finally:
        session.close()
        if not getattr(options, "keep_state", True):
            forget_state(session)


def forget_state(session: Session) -> None:
    from peon.client.session import default_state_root

    state_dir = Path(session.state_dir)
    if state_dir.parent == default_state_root() and state_dir.name == session.session_id:
        shutil.rmtree(state_dir, ignore_errors=True)


def describe_os_error(exc: OSError) -> str:
    """One sentence for an operating-system error that stopped a command, with the fix when one is known."""
    text = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    if "temporary directory" in text:
        text += " (set TMPDIR to a writable directory)"
    return text
