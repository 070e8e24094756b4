"""Per-call resource limits: a call that exceeds memory or process count is stopped and says which."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers.processes import FORK_LOOP, assert_gone, recorded_pids

HOG = """
import os, time
open("hog.pid", "w").write(str(os.getpid()))
blocks = []
for _ in range(64):
    blocks.append(bytearray(16 << 20))  # touched: resident, not just reserved
    time.sleep(0.01)
time.sleep(1000)
"""


def test_memory_limit_stops_the_call(open_session, workspace, containment):
    session = open_session({"runtime": {"containment": containment},
                            "limits": {"memory_max_bytes": 128 << 20}})
    (workspace / "hog.py").write_text(HOG)
    r = session.call("bash", {"command": f"{sys.executable} hog.py", "timeout_seconds": 60})
    v = r.value
    assert v["limit_exceeded"] == "memory", v
    assert v["timed_out"] is False and v["exit_code"] is None
    assert v["duration_ms"] < 30_000
    assert_gone(recorded_pids(workspace, "hog.pid"))


def test_process_limit_stops_a_fork_loop(open_session, workspace, containment, leftovers):
    session = open_session({"runtime": {"containment": containment}, "limits": {"max_processes": 40}})
    (workspace / "forkloop.py").write_text(FORK_LOOP)
    r = session.call("bash", {"command": f"exec {sys.executable} forkloop.py", "timeout_seconds": 60})
    assert r.value["limit_exceeded"] == "processes", r.value
    assert r.value["timed_out"] is False
    forkloops = [p for p in leftovers.alive()
                 if p != session.supervisor_pid and "forkloop" in Path(f"/proc/{p}/cmdline").read_text()]
    assert forkloops == []


def test_calls_within_limits_report_none(session):
    v = session.call("bash", {"command": "sleep 0.2; echo fine"}).value
    assert v["limit_exceeded"] is None and v["output"] == "fine\n"
