"""Which supervisor a session's state directory belongs to, and whether it still runs.

Promises:

* :func:`write_record` puts ``session.json`` in a state directory — the session id, its workspace, the
  supervisor's pid and that process's start time (``/proc/<pid>/stat``, in clock ticks since boot) —
  written to a temporary file and renamed, never through a link;
* :func:`is_live` decides liveness by that evidence only: the pid runs *and* started at the recorded
  time, so a reused pid is never taken for the session; no record (or an unreadable one) is not evidence
  of an ended session (:func:`state_of` says ``unknown``);
* :func:`read_record` reads at most :data:`MAX_RECORD_BYTES` of a regular file and returns ``None`` for
  anything that is not a record.

Owns the record and the liveness rule; listing and pruning are :mod:`peon.cli.sessions`'.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from peon.core.statefile import RefusedFile, read_regular_file

RECORD_NAME = "session.json"
MAX_RECORD_BYTES = 64 * 1024


def process_start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, field 22 of ``/proc/<pid>/stat``), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # after the command name, which may hold spaces
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def write_record(state_dir: Path, session_id: str, workspace: str, pid: int) -> None:
    record = {"session_id": session_id, "workspace": workspace, "pid": pid, "pid_start": process_start_time(pid),
              "started_at": time.time()}
    final = state_dir / RECORD_NAME
    tmp = state_dir / f".{RECORD_NAME}.{pid}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(record).encode())
    finally:
        os.close(fd)
    os.replace(tmp, final)


def read_record(state_dir: Path) -> dict[str, Any] | None:
    try:
        data = read_regular_file(state_dir / RECORD_NAME, max_bytes=MAX_RECORD_BYTES, follow_symlinks=False)
        record = json.loads(data)
    except (OSError, RefusedFile, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int) or record["pid"] <= 0:
        return None
    return record


def is_live(record: dict[str, Any]) -> bool:
    started = record.get("pid_start")
    return isinstance(started, int) and process_start_time(record["pid"]) == started


def state_of(state_dir: Path) -> str:
    """``live``, ``ended`` (a record whose supervisor is gone) or ``unknown`` (no readable record)."""
    record = read_record(state_dir)
    if record is None:
        return "unknown"
    return "live" if is_live(record) else "ended"
