"""``peon changes``: what the calls of a session changed in the workspace, read from its checkpoints.

Promises:

* it works from any shell, while the session runs, after it ended or after its supervisor was killed:
  it reads the session's state directory (:mod:`peon.checkpoints.review`), runs nothing of the
  workspace's and starts no session;
* the session is the workspace's (``--workspace``, default ``.``) newest one with checkpoints, or the
  one holding the call named, or the one ``--session`` names (an id under the state root, or a state
  directory); several sessions and nothing to tell them apart is a usage error naming them;
* without a call it lists the session's checkpointed calls and jobs with what each changed; with
  ``CALL_ID`` it shows that call's changes and unified diff; with ``--since CALL_ID`` everything changed
  since just before that call; ``--json`` prints the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peon.cli.common import UsageError

if TYPE_CHECKING:
    from peon.checkpoints.review import Review


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", "-w", default=".", metavar="DIR", help="the workspace (default: .)")
    parser.add_argument("--session", metavar="ID", help="the session (an id, or its state directory) when the "
                        "workspace had several")
    parser.add_argument("--state-root", metavar="DIR", help="where the sessions' state directories are "
                        "(default: Peon's state directory)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("call_id", nargs="?", metavar="CALL_ID", help="show what this call changed, with its diff")
    parser.add_argument("--since", metavar="CALL_ID", help="show everything changed since just before this call")
    parser.add_argument("--json", action="store_true", help="print as JSON")
    parser.add_argument("--no-diff", action="store_true", help="the summary without the unified diff")
    add_common_arguments(parser)


def review_for(options: argparse.Namespace, call_id: str | None) -> Review:
    """The :class:`Review` of the session the options name (see the module's promise)."""
    from peon.checkpoints.review import Review, ReviewError, sessions_for

    if options.state_root:
        root = Path(options.state_root).expanduser()
    else:
        from peon.client.session import default_state_root

        root = default_state_root()
    workspace = Path(options.workspace).expanduser().resolve()
    try:
        if options.session:
            given = Path(options.session).expanduser()
            directory = given if "/" in options.session else root / options.session
            return Review(directory)
        found = sessions_for(workspace, root)
        if not found:
            raise UsageError(f"no session with checkpoints has {workspace} as its workspace (under {root})")
        if call_id is not None:
            holding = [directory for directory in found if _holds(directory, call_id)]
            if len(holding) == 1:
                return Review(holding[0])
            if not holding:
                raise UsageError(f"no session of {workspace} has a checkpoint of call {call_id!r} "
                                 f"(`peon changes` lists them)")
            found = holding
        if len(found) > 1 and call_id is not None:
            names = ", ".join(directory.name for directory in found)
            raise UsageError(f"several sessions of {workspace} hold {call_id!r} ({names}); name one with --session")
        return Review(found[0])
    except ReviewError as exc:
        raise UsageError(str(exc)) from None


def _holds(directory: Path, call_id: str) -> bool:
    from peon.checkpoints.review import Review, ReviewError

    try:
        return any(entry.id == call_id for entry in Review(directory).entries())
    except (ReviewError, OSError):
        return False


def describe(changes: dict[str, Any]) -> str:
    if changes.get("not_checkpointed"):
        return f"not checkpointed: {changes['not_checkpointed']}"
    from peon.client.result import change_counts

    return change_counts(changes) or "no changes"


def print_files(changes: dict[str, Any]) -> None:
    for item in changes.get("files", []):
        extra = f" (from {item['from']})" if "from" in item else ""
        extra += f" [{item['mode']}]" if "mode" in item else " [symlink]" if item.get("kind") == "symlink" else ""
        lines = "binary" if item.get("binary") else f"+{item.get('lines_added', 0)} -{item.get('lines_removed', 0)}"
        print(f"  {item['status']:<9} {item['path']}{extra}  {lines}")
    if changes.get("files_not_listed"):
        print(f"  … and {changes['files_not_listed']} more")


def cmd_changes(options: argparse.Namespace) -> int:
    if options.call_id and options.since:
        raise UsageError("name a call, or --since a call, not both")
    from peon.checkpoints.review import ReviewError

    review = review_for(options, options.call_id or options.since)
    try:
        if not options.call_id and not options.since:
            listing = review.listing()
            if options.json:
                print(json.dumps(listing, indent=2))
                return 0
            print(f"session {listing['session_id']} in {listing['workspace']}")
            for entry in listing["calls"]:
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["began_at"] or 0))
                kind = f"{entry['kind']} of {entry['call_id']}" if entry.get("call_id") else entry["kind"]
                state = ("pruned" if entry.get("pruned") else describe(entry["changes"]) if entry.get("changes")
                         else f"not checkpointed: {entry['not_checkpointed']}" if entry.get("not_checkpointed")
                         else "no end recorded")
                shared = f"; ran beside {', '.join(entry['shared_with'])}" if entry.get("shared_with") else ""
                print(f"{when}  {entry['id']:<14} {entry.get('tool') or '-':<12} {kind:<6} {state}{shared}")
            return 0
        shown = review.changes(options.call_id, since=options.since, diff=not options.no_diff)
    except ReviewError as exc:
        raise UsageError(str(exc)) from None
    if options.json:
        print(json.dumps(shown, indent=2))
        return 0
    what = f"since just before call {shown['id']}" if options.since else f"call {shown['id']} ({shown['tool']})"
    print(f"{what}, session {shown['session_id']}: {describe(shown['changes'])}")
    if shown.get("shared_with"):
        print(f"  ran beside {', '.join(shown['shared_with'])}: these changes belong to that window")
    if shown.get("note"):
        print(f"  {shown['note']}")
    if shown.get("git_head"):
        print(f"  the workspace's git HEAD moved: {shown['git_head']['before']} -> {shown['git_head']['after']}")
    print_files(shown["changes"])
    if shown.get("diff"):
        print()
        print(shown["diff"], end="" if shown["diff"].endswith("\n") else "\n")
    return 0
