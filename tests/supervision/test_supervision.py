"""The supervisor survives its workers; the client survives its supervisor; nothing is left behind."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

import peon
from helpers import living, wait_for, written
from helpers.processes import workers_of
from peon.workers import proctree

FIXTURES = Path(__file__).parent.parent / "fixtures"


title = proctree.cmdline


def test_process_titles_and_standby(session, workspace):
    assert title(session.supervisor_pid) == f"peon-supervisor {workspace.resolve()}"
    assert wait_for(lambda: workers_of(session, "peon-worker standby"), 10)
    handle = session.submit("bash", {"command": "touch started; sleep 1000"})
    assert wait_for(lambda: (workspace / "started").exists(), 10)
    busy = workers_of(session, f"peon-worker bash {handle.call_id}")
    assert len(busy) == 1
    # The next call's worker is already waiting while this one runs.
    assert wait_for(lambda: workers_of(session, "peon-worker standby"), 10)
    handle.cancel()
    handle.result(timeout=30)


def _cpu_ns(pid: int) -> int:
    """Time ``pid`` has spent on a CPU, in nanoseconds (``/proc/<pid>/schedstat``)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def test_a_call_after_a_pause_wakes_a_standby_that_warms_up_and_keeps_waiting(session, workspace):
    (workspace / "note.txt").write_text("hello\n")
    # One while idle (taken from the look that saw it: a process title may read empty while it is set).
    standbys = wait_for(lambda: [] if len(found := workers_of(session, "peon-worker standby")) != 1 else found, 10)
    assert len(standbys) == 1, standbys
    time.sleep(0.2)  # a pause: the pool is idle, its standbys sleep and use no CPU
    before = sum(_cpu_ns(pid) for pid in standbys)
    # A call that admission refuses still wakes a standby (the wake goes out as the call arrives),
    # which runs one warm-up round and goes back to waiting.
    r = session.call("read", {})
    assert not r.ok and r.error.code == "invalid_input"
    assert wait_for(lambda: sum(_cpu_ns(pid) for pid in standbys) - before > 100_000, 10)
    assert wait_for(lambda: sorted(workers_of(session, "peon-worker standby")) == sorted(standbys), 10)
    # A wake that finds no waiting standby ends nothing: the forkserver ignores it, a worker in its
    # call handles it and goes on.
    [forkserver] = workers_of(session, "peon-forkserver")
    os.kill(forkserver, signal.SIGUSR1)
    handle = session.submit("bash", {"command": "touch started; sleep 0.5; echo done"})
    assert wait_for(lambda: (workspace / "started").exists(), 10)
    [busy] = workers_of(session, f"peon-worker bash {handle.call_id}")
    os.kill(busy, signal.SIGUSR1)
    assert handle.result(timeout=30).value["output"] == "done\n"
    assert session.call("read", {"path": "note.txt"}).ok
    assert forkserver in workers_of(session, "peon-forkserver")


def test_worker_killed_mid_call_is_a_clear_error_and_the_session_goes_on(session, workspace):
    handle = session.submit("bash", {"command": "sleep 1000 & echo $! > child.pid; wait"})
    assert wait_for(lambda: written(workspace / "child.pid"), 10)
    [worker] = workers_of(session, "peon-worker bash")
    os.kill(worker, signal.SIGKILL)
    r = handle.result(timeout=30)
    assert not r.ok and r.error.code == "worker_crashed"
    assert "SIGKILL" in r.error.message
    child = int((workspace / "child.pid").read_text())
    assert living([child]) == []  # the orphan was reparented to the supervisor and killed
    assert session.call("bash", {"command": "echo again"}).value["output"] == "again\n"


def test_supervisor_killed_mid_call(open_session, workspace, leftovers, containment):
    session = open_session({"runtime": {"containment": containment}})
    handle = session.submit("bash", {"command": "sleep 1000 & echo $! > child.pid; setsid sleep 1000 & wait"})
    assert wait_for(lambda: written(workspace / "child.pid"), 10)
    supervisor = session.supervisor_pid
    os.kill(supervisor, signal.SIGKILL)
    r = handle.result(timeout=30)
    assert not r.ok and r.error.code == "supervisor_died"
    assert "SIGKILL" in r.error.message
    # Every worker and every descendant dies with it (parent-death signal + containment).
    assert wait_for(lambda: not leftovers.alive(), 10), leftovers.alive()
    later = session.call("bash", {"command": "true"})
    assert later.error.code == "supervisor_died"


def test_a_worker_that_hangs_past_deadline_and_grace_is_killed(open_session, containment):
    session = open_session(
        {"runtime": {"containment": containment}, "limits": {"worker_grace_seconds": 0.5}},
        env={"PYTHONPATH": str(FIXTURES)}, tools=["peon_test_tools:SleepyTool"],
    )
    started = time.monotonic()
    r = session.call("sleepy", {"seconds": 1000, "timeout_seconds": 0.5})
    assert r.error.code == "worker_hung"
    assert time.monotonic() - started < 10
    assert session.call("bash", {"command": "echo fine"}).value["output"] == "fine\n"


def test_a_tool_that_leaves_a_daemon_behind_is_cleaned_up(open_session):
    session = open_session(env={"PYTHONPATH": str(FIXTURES)}, tools=["peon_test_tools:LitterTool"])
    r = session.call("litter", {})
    assert r.ok
    assert living([r.value["pid"]]) == []


def test_tool_errors_and_unexpected_exceptions(open_session):
    session = open_session(env={"PYTHONPATH": str(FIXTURES)}, tools=["peon_test_tools:FailingTool"])
    expected = session.call("failing", {"expected": True})
    assert expected.error.code == "not_found" and expected.error.message == "the thing is not there"
    unexpected = session.call("failing", {"expected": False})
    assert unexpected.error.code == "tool_failed" and "RuntimeError: boom" in unexpected.error.message


def test_close_cancels_the_running_call_and_fails_queued_ones(open_session, workspace, leftovers):
    session = open_session({"limits": {"max_parallel_calls": 1}})  # the second call stays queued
    running = session.submit("bash", {"command": "echo $$ > r.pid; sleep 1000"})
    queued = session.submit("bash", {"command": "touch never"})
    assert wait_for(lambda: written(workspace / "r.pid"), 10)
    session.close()
    assert running.result(timeout=1).value["cancelled"] is True
    assert queued.result(timeout=1).error.code == "session_closed"
    assert not (workspace / "never").exists()
    assert leftovers.alive() == []


def test_async_cancellation_cancels_the_call(open_session, workspace, leftovers):
    async def scenario():
        async with peon.AsyncSession(workspace, {"approval": {"process": "allow"}}, env=leftovers.env(),
                                     state_dir=workspace.parent / "astate") as session:
            task = asyncio.ensure_future(session.call("bash", {"command": "echo $$ > a.pid; sleep 1000"}))
            for _ in range(500):
                if written(workspace / "a.pid"):
                    break
                await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            pid = int((workspace / "a.pid").read_text())
            assert living([pid]) == []  # gone by the time the task finished
            ok = await session.call("bash", {"command": "echo after"})
            assert ok.value["output"] == "after\n"

    asyncio.run(scenario())
    assert leftovers.alive() == []


def test_submit_result_timeout_and_threads(session):
    handle = session.submit("bash", {"command": "sleep 0.5; echo done"})
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.01)
    assert handle.result(timeout=30).value["output"] == "done\n"


def test_non_json_inputs_are_refused_before_sending(session):
    for bad in ({"command": float("nan")}, {"command": "\ud800"}, {"command": object()}):
        r = session.call("bash", bad)
        assert r.error.code == "invalid_input", bad
    nested: list = []
    for _ in range(5000):
        nested = [nested]
    r = session.call("bash", {"command": nested})
    assert r.error.code == "invalid_input" and r.error.details["rule"] == "max_depth"
    assert session.call("bash", {"command": "echo alive"}).value["output"] == "alive\n"


def test_forkserver_killed_mid_call(session, workspace):
    """Workers are forked by the session's forkserver; its death fails the running call clearly,
    kills the call's processes, and the next call gets a fresh forkserver."""
    handle = session.submit("bash", {"command": "sleep 1000 & echo $! > child.pid; wait"})
    assert wait_for(lambda: written(workspace / "child.pid"), 10)
    [forkserver] = [p for p in proctree.children(session.supervisor_pid) if title(p).startswith("peon-forkserver")]
    os.kill(forkserver, signal.SIGKILL)
    r = handle.result(timeout=30)
    assert not r.ok and r.error.code == "worker_crashed", r
    assert living([int((workspace / "child.pid").read_text())]) == []
    assert session.call("bash", {"command": "echo again"}).value["output"] == "again\n"
    assert wait_for(lambda: [p for p in proctree.children(session.supervisor_pid)
                             if title(p).startswith("peon-forkserver") and p != forkserver], 10)
