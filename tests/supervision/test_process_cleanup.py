"""The runner's guarantee, with real processes: when a call returns, nothing it started is alive.

Each command records the pids it starts in the workspace; after the call the test proves they are gone
(not merely that the call returned). Every test runs under both containments.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

from helpers import wait_for, written
from helpers.processes import FORK_LOOP, assert_gone, recorded_pids
from peon.workers import proctree


def test_background_child_holding_the_pipe(session, workspace):
    r = session.call("bash", {"command": "sleep 1000 & echo $! > bg.pid; echo started"})
    assert r.value["exit_code"] == 0 and r.value["output"] == "started\n"
    assert r.value["duration_ms"] < 5000
    assert_gone(recorded_pids(workspace, "bg.pid"))


def test_setsid_daemon_holding_the_pipe(session, workspace):
    r = session.call("bash", {"command": "setsid bash -c 'echo $$ > d.pid; exec sleep 1000' & "
                                         "until [ -s d.pid ]; do sleep 0.01; done; echo ok"})
    assert r.value["exit_code"] == 0
    assert_gone(recorded_pids(workspace, "d.pid"))


def test_double_fork_nohup_disown(session, workspace):
    command = (
        "(sleep 1000 & echo $! > double.pid) ; "
        "nohup sleep 1000 >/dev/null 2>&1 & echo $! > nohup.pid; disown; "
        "until [ -s double.pid ]; do sleep 0.01; done"
    )
    r = session.call("bash", {"command": command})
    assert r.value["exit_code"] == 0
    assert_gone(recorded_pids(workspace, "double.pid") + recorded_pids(workspace, "nohup.pid"))


def test_daemon_that_closes_its_fds_never_writes_later(session, workspace):
    command = ("setsid bash -c 'exec >&- 2>&- <&-; echo $$ > late.pid; sleep 3; touch late-file' & "
               "until [ -s late.pid ]; do sleep 0.01; done; echo started")
    r = session.call("bash", {"command": command})
    assert r.value["output"] == "started\n"
    assert_gone(recorded_pids(workspace, "late.pid"))  # gone: nothing is left that could write late-file
    assert not (workspace / "late-file").exists()


def test_stopped_child_is_killed(session, workspace):
    r = session.call("bash", {"command": "sleep 1000 & echo $! > s.pid; kill -STOP $!; echo stopped"})
    assert r.value["output"] == "stopped\n"
    assert_gone(recorded_pids(workspace, "s.pid"))


def test_zombie_producing_parent(session, workspace):
    script = (
        "import os, time\n"
        "kids = [pid for pid in (os.fork() for _ in range(10)) if pid or os._exit(0)]\n"
        "open('z.pid', 'w').write(' '.join(map(str, kids + [os.getpid()])))\n"
        "time.sleep(1000)\n"
    )
    (workspace / "zombies.py").write_text(script)
    r = session.call("bash", {"command": f"exec {sys.executable} zombies.py", "timeout_seconds": 1.5})
    assert r.value["timed_out"] is True
    pids = recorded_pids(workspace, "z.pid")
    assert len(pids) == 11
    for pid in pids:  # not even a zombie is left: they were reaped
        assert not os.path.exists(f"/proc/{pid}"), pid


cmdline = proctree.cmdline


def test_capped_fork_loop_is_killed_at_the_deadline(session, workspace, leftovers):
    (workspace / "forkloop.py").write_text(FORK_LOOP)
    r = session.call("bash", {"command": f"exec {sys.executable} forkloop.py", "timeout_seconds": 3})
    assert r.value["timed_out"] is True
    assert (workspace / "count").stat().st_size == 300  # the loop really reached its cap
    # Right when the call returns — not after the session closes — none of the ~300 is alive.
    survivors = [p for p in leftovers.alive() if "forkloop.py" in cmdline(p)]
    assert survivors == []


def test_cancel_sends_term_then_kill_after_grace(session, workspace):
    command = "trap '' TERM; echo $$ > trap.pid; while true; do sleep 0.05; done"
    handle = session.submit("bash", {"command": command})
    assert wait_for(lambda: written(workspace / "trap.pid"), 10)
    cancelled_at = time.monotonic()
    handle.cancel()
    r = handle.result(timeout=30)
    waited = time.monotonic() - cancelled_at
    assert r.value["cancelled"] is True and r.value["timed_out"] is False
    assert r.value["signal"] == "SIGKILL"
    assert 1.8 <= waited < 8, waited
    assert_gone(recorded_pids(workspace, "trap.pid"))


def test_cancel_of_a_cooperative_command_is_prompt(session, workspace):
    handle = session.submit("bash", {"command": "echo $$ > c.pid; sleep 1000"})
    assert wait_for(lambda: written(workspace / "c.pid"), 10)
    cancelled_at = time.monotonic()
    handle.cancel()
    r = handle.result(timeout=30)
    assert r.value["cancelled"] is True
    assert r.value["signal"] == "SIGTERM"  # TERM ended it: no KILL grace was waited
    assert time.monotonic() - cancelled_at < 10, "a hang guard, not a speed claim"
    assert_gone(recorded_pids(workspace, "c.pid"))


def test_cancel_reaches_a_stopped_group_member(session, workspace):
    handle = session.submit("bash", {"command": "sleep 1000 & echo $! > m.pid; kill -STOP $!; wait"})
    assert wait_for(lambda: written(workspace / "m.pid"), 10)
    handle.cancel()
    r = handle.result(timeout=30)
    assert r.value["cancelled"] is True
    assert_gone(recorded_pids(workspace, "m.pid"))


def test_a_queued_call_that_is_cancelled_never_starts(serial_session, workspace):
    session = serial_session
    first = session.submit("bash", {"command": "echo $$ > first.pid; sleep 1000"})
    second = session.submit("bash", {"command": "touch second-ran"})
    second.cancel()
    r2 = second.result(timeout=30)
    assert r2.error.code == "cancelled"
    assert wait_for(lambda: written(workspace / "first.pid"), 10)
    first.cancel()
    assert first.result(timeout=30).value["cancelled"] is True
    session.call("bash", {"command": "true"})  # the queue moved past the cancelled call
    assert not (workspace / "second-ran").exists()


def test_calls_run_serially_in_submission_order(serial_session, workspace):
    session = serial_session
    handles = [session.submit("bash", {"command": f"echo {i} >> order; sleep 0.0{i}"}) for i in range(8)]
    for h in handles:
        assert h.result(timeout=60).ok
    assert (workspace / "order").read_text().split() == [str(i) for i in range(8)]


@pytest.mark.parametrize("timeout", [0.5])
def test_deadline_kills_the_whole_group_at_once(session, workspace, timeout):
    command = "trap '' TERM; for i in 1 2 3; do sleep 1000 & echo $! >> g.pid; done; wait"
    started = time.monotonic()
    r = session.call("bash", {"command": command, "timeout_seconds": timeout})
    assert r.value["timed_out"] is True and r.value["signal"] == "SIGKILL"
    assert time.monotonic() - started < timeout + 3  # no TERM grace at a deadline
    assert_gone(recorded_pids(workspace, "g.pid"))
