"""``peon sessions``: list the sessions' state directories, and ``peon sessions prune`` removes ended ones.

Promises:

* a directory is listed with its state, decided by evidence only (:mod:`peon.core.session_record`):
  ``live`` (its supervisor runs: the recorded pid, started at the recorded time), ``ended`` (a record
  whose supervisor is gone) or ``unknown`` (no record: an older Peon's, or not a session's);
* ``prune`` never removes a live session's directory; it removes ended ones whose last change is older
  than ``--older-than`` (default: any), and unknown ones only when older than ``--older-than`` and at
  least :data:`UNKNOWN_MIN_AGE` (a session of an older Peon may still be running); ``--dry-run`` says
  what it would remove and removes nothing;
* only direct subdirectories of the state root are looked at; links are never followed or removed
  through.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from peon.cli.common import UsageError
from peon.core.session_record import read_record, state_of

UNKNOWN_MIN_AGE = 24 * 3600.0
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` (a bare number is seconds) in seconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise UsageError(f"--older-than takes a duration such as 30m, 12h, 7d or 2w, got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def state_root() -> Path:
    from peon.client.session import default_state_root

    return default_state_root()


def last_change(directory: Path) -> float:
    """The newest modification time of the directory and the files directly in it."""
    newest = directory.lstat().st_mtime
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    continue
    except OSError:
        pass
    return newest


def size_of(directory: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def survey(root: Path) -> list[dict[str, Any]]:
    """Every session directory under ``root``, newest first."""
    found: list[dict[str, Any]] = []
    try:
        entries = sorted(root.iterdir())
    except FileNotFoundError:
        return []
    for directory in entries:
        try:
            if not stat.S_ISDIR(directory.lstat().st_mode):
                continue
        except OSError:
            continue
        record = read_record(directory) or {}
        found.append({"session_id": directory.name, "state": state_of(directory),
                      "workspace": record.get("workspace"), "pid": record.get("pid"),
                      "last_change": last_change(directory), "bytes": size_of(directory), "path": str(directory)})
    return sorted(found, key=lambda s: s["last_change"], reverse=True)


def prunable(session: dict[str, Any], older_than: float, now: float) -> bool:
    age = now - float(session["last_change"])
    if session["state"] == "ended":
        return bool(age >= older_than)
    if session["state"] == "unknown":
        return bool(age >= max(older_than, UNKNOWN_MIN_AGE))
    return False  # live: never


def cmd_sessions(options: argparse.Namespace) -> int:
    root = Path(options.state_root).expanduser() if options.state_root else state_root()
    sessions = survey(root)
    if options.action == "prune":
        older_than = parse_duration(options.older_than) if options.older_than else 0.0
        now = time.time()
        removed = []
        for session in sessions:
            if not prunable(session, older_than, now):
                continue
            if not options.dry_run:
                if state_of(Path(session["path"])) == "live":  # checked again just before removing
                    continue
                shutil.rmtree(session["path"], ignore_errors=True)
            removed.append(session)
        if options.json:
            print(json.dumps({"removed": removed, "dry_run": options.dry_run}, indent=2))
        else:
            verb = "would remove" if options.dry_run else "removed"
            for session in removed:
                print(f"{verb} {session['path']} ({session['state']}, {human_bytes(session['bytes'])})")
            kept = len(sessions) - len(removed)
            print(f"{verb} {len(removed)} session director{'y' if len(removed) == 1 else 'ies'}; kept {kept} "
                  f"({sum(s['state'] == 'live' for s in sessions)} live)")
        return 0
    if options.json:
        print(json.dumps(sessions, indent=2))
        return 0
    if not sessions:
        print(f"no sessions under {root}")
        return 0
    print(f"{'SESSION':<32}  {'STATE':<7}  {'LAST CHANGE':<16}  {'SIZE':>8}  WORKSPACE")
    for session in sessions:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(session["last_change"]))
        print(f"{session['session_id'][:32]:<32}  {session['state']:<7}  {when:<16}  "
              f"{human_bytes(session['bytes']):>8}  {session['workspace'] or '-'}")
    return 0


def human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=["list", "prune"], default="list",
                        help="list (the default) or prune: remove the state of ended sessions")
    parser.add_argument("--older-than", metavar="DURATION",
                        help="prune only sessions whose last change is older than this (30m, 12h, 7d, 2w)")
    parser.add_argument("--dry-run", action="store_true", help="prune: say what would be removed, remove nothing")
    parser.add_argument("--json", action="store_true", help="print as JSON")
    parser.add_argument("--state-root", metavar="DIR",
                        help="where the sessions' state directories are (default: $XDG_STATE_HOME/peon/sessions)")
