"""A worker serves calls of tools that start no process one after another, and is replaced after
anything but a clean call, after ``limits.worker_max_calls`` calls, and after every call of a tool
that starts processes; the session keeps one standby while idle and a second while calls use workers up."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from helpers import living, wait_for
from peon.workers import proctree

FIXTURES = Path(__file__).parent.parent / "fixtures"
TOOLS = ["peon_test_tools:ResidentTool", "peon_test_tools:EchoTool"]


def _workers(session) -> list[int]:
    return [p for p in proctree.descendants(session.supervisor_pid) if proctree.cmdline(p).startswith("peon-worker")]


def _standbys(session) -> list[int]:
    return [p for p in _workers(session) if proctree.cmdline(p) == "peon-worker standby"]


@pytest.fixture
def resident_session(open_session, containment):
    def factory(**limits):
        return open_session({"runtime": {"containment": containment}, "limits": limits},
                            env={"PYTHONPATH": str(FIXTURES)}, tools=TOOLS)
    return factory


def _pid(session, then: str = "return", **args) -> int:
    result = session.call("resident", {"then": then, **args})
    assert result.ok, result.error
    return result.value["pid"]


# -- through a session ----------------------------------------------------------------------------------


def test_one_worker_serves_calls_until_worker_max_calls(resident_session):
    session = resident_session(worker_max_calls=3)
    pids = [_pid(session) for _ in range(7)]
    assert pids[0] == pids[1] == pids[2] != pids[3] == pids[4] == pids[5] != pids[6], pids
    assert pids[0] not in pids[3:]
    assert wait_for(lambda: living([pids[0], pids[3]]) == [], 10), "a retired worker exits"
    assert pids[6] in _workers(session)  # and the current one waits, as a standby
    assert wait_for(lambda: pids[6] in _standbys(session), 10)


def test_an_expected_error_keeps_the_worker_an_unexpected_one_replaces_it(resident_session):
    session = resident_session()
    first = _pid(session)
    r = session.call("resident", {"then": "expected_error"})
    assert not r.ok and r.error.code == "not_found"
    assert _pid(session) == first
    r = session.call("resident", {"then": "unexpected_error"})
    assert not r.ok and r.error.code == "tool_failed"
    assert _pid(session) != first
    assert wait_for(lambda: living([first]) == [], 10)


def test_a_timeout_or_a_cancel_replaces_the_worker(resident_session):
    session = resident_session()
    first = _pid(session)
    r = session.call("resident", {"then": "wait", "timeout_seconds": 0.2})
    assert not r.ok and r.error.code == "timeout"
    second = _pid(session)
    assert second != first
    handle = session.submit("resident", {"then": "wait"})
    assert wait_for(lambda: proctree.cmdline(second) == f"peon-worker resident {handle.call_id}", 10)
    handle.cancel()
    handle.result(timeout=30)
    third = _pid(session)
    assert third not in (first, second)
    assert wait_for(lambda: living([first, second]) == [], 10)


def test_a_tool_that_starts_no_process_but_leaves_one_fails_and_loses_its_worker(resident_session):
    session = resident_session()
    first = _pid(session)
    r = session.call("resident", {"then": "litter"})
    assert not r.ok and r.error.code == "tool_failed", r
    assert "starts no process" in r.error.message
    assert _pid(session) != first
    assert wait_for(lambda: living([first]) == [], 10)


def test_a_tool_that_starts_processes_gets_a_fresh_worker_every_call(resident_session):
    session = resident_session()
    pids = [session.call("echo", {"text": "x"}).value["pid"] for _ in range(3)]
    assert len(set(pids)) == 3, pids
    # A waiting worker that served a resident call may take a process call: its last one.
    resident = _pid(session)
    assert session.call("echo", {"text": "x"}).value["pid"] == resident
    assert _pid(session) != resident


def test_a_waiting_worker_that_died_or_was_stopped_is_never_given_a_call(resident_session):
    session = resident_session()
    first = _pid(session)
    os.kill(first, signal.SIGKILL)  # (killed as it is handed a call, it is a worker killed mid-call)
    assert wait_for(lambda: living([first]) == [], 10)
    second = _pid(session)
    assert second != first
    os.kill(second, signal.SIGSTOP)
    assert wait_for(lambda: proctree.state(second) in ("T", "t"), 10)
    third = _pid(session)
    assert third not in (first, second)
    assert wait_for(lambda: living([second]) == [], 10), "the stopped worker is killed, not left behind"


def test_a_worker_killed_during_a_later_call_is_reported_and_replaced(resident_session):
    session = resident_session()
    first = _pid(session)
    handle = session.submit("resident", {"then": "wait"})
    assert wait_for(lambda: proctree.cmdline(first) == f"peon-worker resident {handle.call_id}", 10)
    os.kill(first, signal.SIGKILL)
    r = handle.result(timeout=30)
    assert not r.ok and r.error.code == "worker_crashed"
    assert _pid(session) != first


def test_reads_and_writes_share_one_worker_and_the_idle_session_keeps_one_standby(open_session, workspace):
    session = open_session()
    (workspace / "a.txt").write_text("a" * 4096)
    assert session.call("read", {"path": "a.txt"}).ok
    served = wait_for(lambda: _standbys(session), 10)
    for _ in range(5):
        assert session.call("read", {"path": "a.txt"}).ok
        assert session.call("write", {"path": "b.txt", "content": "b" * 2048, "mode": "create"}
                            if not (workspace / "b.txt").exists() else
                            {"path": "b.txt", "content": "b" * 2048, "mode": "replace"}).ok
    # No worker was used up: the one that served them all is the only one.
    assert wait_for(lambda: _workers(session) == served, 10), (_workers(session), served)
    # A call that uses its worker up (its command leaves a process) brings a second standby; an idle
    # while takes it back to one.
    assert session.call("bash", {"command": "sleep 1000 &"}).ok
    assert wait_for(lambda: len(_standbys(session)) == 2, 10)
    assert wait_for(lambda: len(_workers(session)) == 1, 10)


def _bash_worker(session, command: str = "true") -> int:
    """The pid of the worker that ran ``command`` (the command's parent: the worker spawns it)."""
    result = session.call("bash", {"command": f"{command}; echo $PPID"})
    assert result.ok, result.error
    return int(result.value["output"].split()[-1])


def test_commands_that_end_by_themselves_share_a_worker_until_worker_max_calls(resident_session):
    session = resident_session(worker_max_calls=3)
    pids = [_bash_worker(session, command) for command in ("true", "false", "ls", "true")]
    assert pids[0] == pids[1] == pids[2] != pids[3], pids  # a non-zero exit is a clean end too
    assert wait_for(lambda: living([pids[0]]) == [], 10)


def test_a_command_that_leaves_a_descendant_times_out_or_is_cancelled_loses_its_worker(resident_session, workspace):
    session = resident_session()
    first = _bash_worker(session)
    assert _bash_worker(session) == first
    # A daemon outlives the command: the sweep kills it, and the worker is not used again.
    r = session.call("bash", {"command": "setsid sleep 1000 & echo $PPID"})
    assert r.ok, r.error
    assert int(r.value["output"].split()[-1]) == first
    second = _bash_worker(session)
    assert second != first
    assert wait_for(lambda: living([first]) == [], 10)
    r = session.call("bash", {"command": "echo $PPID; sleep 1000", "timeout_seconds": 0.5})
    assert r.ok and r.value["timed_out"], r
    third = _bash_worker(session)
    assert third != second
    handle = session.submit("bash", {"command": "echo $PPID > ppid; sleep 1000"})
    assert wait_for(lambda: (workspace / "ppid").exists() and (workspace / "ppid").read_text().strip(), 10)
    handle.cancel()
    assert handle.result(timeout=30).value["cancelled"]
    assert int((workspace / "ppid").read_text()) == third
    assert _bash_worker(session) != third
    assert wait_for(lambda: living([second, third]) == [], 10)


def test_a_call_that_runs_no_command_or_a_background_job_does_not_keep_a_process_tool_worker(resident_session):
    session = resident_session()
    pids = [session.call("echo", {"text": "x"}).value["pid"] for _ in range(2)]
    assert pids[0] != pids[1]  # echo starts processes as far as Peon knows, and ran no command
    job = session.call("bash", {"command": "echo $PPID", "background": True, "yield_seconds": 5})
    assert job.ok, job.error
    worker = int(job.value["output"].split()[-1])
    assert wait_for(lambda: living([worker]) == [], 10)
