"""``peon rewind CALL_ID``: put the workspace back as it was just before a call, from its checkpoint.

Promises:

* it restores the stored files (content, executable bit, links as links) of the snapshot taken just
  before the call, removing files added since; excluded trees, files too large to store and the
  workspace's ``.git`` are left as they are (the HEAD's movement is reported);
* it asks on a terminal and needs ``--yes`` otherwise; before changing anything it checkpoints the
  workspace, so the rewind is a call of its own that ``peon rewind`` can undo (its id is printed);
* every path it would write or remove is resolved beneath the workspace root and rated as the
  ``rewind`` tool rates it (:func:`peon.tools.shared.restore.rate_restore`, with the workspace's
  ``sandbox.protected``): the question names the agent-control and the secret-like paths; a path that
  resolves out of the workspace refuses the rewind, ``--yes`` or not, and nothing is changed;
* it finds the session as ``peon changes`` does (:func:`peon.cli.changes.review_for`) and works the
  same after the session ended or its supervisor was killed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from pathlib import Path
from typing import TYPE_CHECKING

from peon.cli.changes import add_common_arguments, describe, print_files, review_for
from peon.cli.common import UsageError
from peon.core.errors import ConfigError, ToolError

if TYPE_CHECKING:
    from peon.tools.shared.restore import RestoreRating


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("call_id", metavar="CALL_ID", help="the call to undo: the workspace as it was just before it")
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask (needed when not on a terminal)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_common_arguments(parser)


def cmd_rewind(options: argparse.Namespace) -> int:
    from peon.checkpoints.review import ReviewError

    review = review_for(options, options.call_id)
    try:
        preview = review.changes(since=options.call_id, diff=False)
        paths = review.restored_paths(options.call_id)
    except ReviewError as exc:
        raise UsageError(str(exc)) from None
    try:
        rating = rate(review.workspace, paths)
    except (ToolError, ConfigError) as exc:  # ConfigError: the secret-like lists cannot be read
        print(f"peon: not rewound: {exc.message if isinstance(exc, ToolError) else exc}", file=sys.stderr)
        return 1
    if not options.yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UsageError("peon rewind changes files: run it on a terminal to be asked, or pass --yes")
        print(f"Rewinding {review.workspace} to just before call {options.call_id} undoes: "
              f"{describe(preview['changes'])}")
        print_files(preview["changes"])
        for line in rating_lines(rating):
            print(line)
        answer = input("Rewind? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("not rewound")
            return 1
    try:
        done = review.rewind(options.call_id)
    except ReviewError as exc:
        print(f"peon: {exc}", file=sys.stderr)
        return 1
    if options.json:
        print(json.dumps(done, indent=2))
        return 0
    print(f"rewound {review.workspace} to just before call {options.call_id}: {describe(done['changes'])}")
    if done.get("git_head"):
        print(f"  the workspace's .git was not rewound: its HEAD was {done['git_head']['then']}, "
              f"is {done['git_head']['now']}")
    print(f"undo this rewind with: peon rewind {done['id']}")
    return 0


def protected_paths(workspace: Path) -> tuple[str, ...]:
    """The workspace's ``sandbox.protected`` (the agent-control list), or the shipped list when its
    configuration cannot be read (the rating never falls back to none)."""
    from peon.core.agent_control import AGENT_CONTROL_PATHS
    from peon.client.config import load_config
    from peon.core.config_view import ResolvedConfig

    try:
        return tuple(ResolvedConfig(load_config(None, workspace=workspace).to_wire()).config.sandbox.protected)
    except (ConfigError, OSError):
        return AGENT_CONTROL_PATHS


def rate(workspace: Path, paths: list[str]) -> RestoreRating:
    """``paths`` resolved beneath the workspace's root and rated as the ``rewind`` tool rates them."""
    from peon.tools.shared.restore import rate_restore
    from peon.workers import fs

    root = fs.open_root(workspace)
    try:
        return rate_restore(root, paths, os.environ, protected_paths(workspace))
    finally:
        os.close(root)


def rating_lines(rating: RestoreRating) -> list[str]:
    """The question's lines about the rated paths (none when no path is rated)."""
    lines = []
    control, secret = rating.agent_control, rating.secret
    if control:
        lines.append(f"{len(control)} of them agent-control (sandbox.protected: they steer later agents, git, "
                     "the editor, the shell or CI):")
        lines += [f"  {t.typed.normalized}  ({t.agent_control})" for t in control[:50]]
        if len(control) > 50:
            lines.append(f"  … and {len(control) - 50} more")
    if secret:
        lines.append(f"{len(secret)} of them secret-like:")
        lines += [f"  {t.typed.normalized}  ({t.secret_reason()})" for t in secret[:50]]
        if len(secret) > 50:
            lines.append(f"  … and {len(secret) - 50} more")
    return lines
