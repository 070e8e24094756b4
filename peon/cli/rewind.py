"""``peon rewind CALL_ID``: put the workspace back as it was just before a call, from its checkpoint.

Promises:

* it restores the stored files (content, executable bit, links as links) of the snapshot taken just
  before the call, removing files added since; excluded trees, files too large to store and the
  workspace's ``.git`` are left as they are (the HEAD's movement is reported);
* it asks on a terminal and needs ``--yes`` otherwise; before changing anything it checkpoints the
  workspace, so the rewind is a call of its own that ``peon rewind`` can undo (its id is printed);
* it finds the session as ``peon changes`` does (:func:`peon.cli.changes.review_for`) and works the
  same after the session ended or its supervisor was killed.
"""

from __future__ import annotations

import argparse
import json
import sys

from peon.cli.changes import add_common_arguments, describe, print_files, review_for
from peon.cli.common import UsageError


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
    except ReviewError as exc:
        raise UsageError(str(exc)) from None
    if not options.yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UsageError("peon rewind changes files: run it on a terminal to be asked, or pass --yes")
        print(f"Rewinding {review.workspace} to just before call {options.call_id} undoes: "
              f"{describe(preview['changes'])}")
        print_files(preview["changes"])
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
