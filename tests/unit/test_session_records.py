"""Which sessions' state is live, decided by evidence (the supervisor's pid and its start time), and what
``peon sessions prune`` would remove: never a live session's, an unknown one's only when old."""

from __future__ import annotations

import json
import os
import time

import pytest

from peon.cli.common import UsageError
from peon.cli.sessions import UNKNOWN_MIN_AGE, parse_duration, prunable, survey
from peon.core.session_record import RECORD_NAME, process_start_time, read_record, state_of, write_record


def test_liveness_is_the_recorded_pid_started_at_the_recorded_time(tmp_path):
    live = tmp_path / "live"
    live.mkdir()
    write_record(live, "live", "/ws", os.getpid())  # this process stands for a running supervisor
    assert read_record(live)["workspace"] == "/ws" and state_of(live) == "live"
    reused = tmp_path / "reused"  # the pid runs, but it is another process than the one recorded
    reused.mkdir()
    started = process_start_time(os.getpid())
    (reused / RECORD_NAME).write_text(json.dumps({"pid": os.getpid(), "pid_start": started - 1}))
    assert state_of(reused) == "ended"
    gone = tmp_path / "gone"
    gone.mkdir()
    (gone / RECORD_NAME).write_text(json.dumps({"pid": 2**22 + 7, "pid_start": 5}))
    assert state_of(gone) == "ended"
    for bad in ("{", "[]", '{"pid": -1}', '{"pid": "1"}'):
        (gone / RECORD_NAME).write_text(bad)
        assert state_of(gone) == "unknown"
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(live / RECORD_NAME, linked / RECORD_NAME)
    assert state_of(linked) == "unknown"  # a record is never read through a link


def test_prune_never_takes_a_live_one_and_an_unknown_one_only_when_old(tmp_path):
    for name, pid, start in (("live", os.getpid(), process_start_time(os.getpid())), ("ended", 2**22 + 7, 5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / RECORD_NAME).write_text(json.dumps({"pid": pid, "pid_start": start, "workspace": "/w"}))
    (tmp_path / "unknown").mkdir()
    (tmp_path / "not-a-dir").write_text("")
    found = {s["session_id"]: s for s in survey(tmp_path)}
    assert {name: s["state"] for name, s in found.items()} == {"live": "live", "ended": "ended", "unknown": "unknown"}
    now = time.time()
    assert prunable(found["ended"], 0, now) and not prunable(found["ended"], 3600, now)
    assert not prunable(found["live"], 0, now + 10 * UNKNOWN_MIN_AGE)
    assert not prunable(found["unknown"], 0, now) and prunable(found["unknown"], 0, now + UNKNOWN_MIN_AGE + 1)
    assert survey(tmp_path / "missing") == []


def test_durations():
    assert [parse_duration(t) for t in ("30", "30s", "15m", "12h", "7d", "2w", "1.5h")] == [
        30, 30, 900, 43200, 604800, 1209600, 5400]
    with pytest.raises(UsageError, match="30m, 12h, 7d or 2w"):
        parse_duration("soon")
