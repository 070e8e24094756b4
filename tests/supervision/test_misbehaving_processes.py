"""A command that stops (``SIGSTOP``) a Peon process, or moves itself out of its cgroup, never hangs a
call, never loses its output, and never survives: every call is answered by its deadline + grace (+
the client's margin when the supervisor itself stops answering), whichever process misbehaves.

These are the guarantees without the OS sandbox (sandbox.mode = "off"): inside it, stopping a Peon process
or leaving the cgroup is refused outright (tests/session/test_sandbox_workflow.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import peon.client.watchdog
from helpers import CGROUP_SUPPORT, living, wait_for
from peon.workers import proctree

PPID = "ppid() { sed 's/.*) //' /proc/$1/stat | cut -d' ' -f2; }; "  # the parent of a pid (titles have spaces)
UNSANDBOXED = {"sandbox": {"mode": "off"}}
FAST = {"limits": {"worker_grace_seconds": 0.5, "worker_start_seconds": 1.0}, **UNSANDBOXED}
SLACK = 6.0  # generous: only a hang takes this long


def timed_call(session, args: dict, within: float):
    started = time.monotonic()
    result = session.submit("bash", args).result(timeout=within + 30)
    elapsed = time.monotonic() - started
    assert elapsed < within, f"answered after {elapsed:.1f} s, more than {within:.1f} s: {result}"
    return result


def forkserver_of(session) -> int:
    """The session's forkserver, once it has started (the session does not wait for it)."""
    found: list[int] = []
    assert wait_for(lambda: found.extend(p for p in proctree.children(session.supervisor_pid)
                                         if proctree.cmdline(p).startswith("peon-forkserver")) or found, 30)
    [pid] = found
    return pid


def test_a_stopped_forkserver_is_replaced_and_no_call_waits_past_its_deadline(open_session, containment):
    session = open_session({**FAST, "runtime": {"containment": containment}})
    stopped = forkserver_of(session)
    r = session.call("bash", {"command": PPID + "kill -STOP $(ppid $PPID); echo stopped"})
    assert r.value["output"] == "stopped\n"
    # The stop takes effect when the forkserver next leaves the kernel (it may be forking a standby); the pool may
    # have seen it stopped and replaced it already, as the call's reused worker was put back (status None: gone).
    assert wait_for(lambda: proctree.status(stopped) in ("stopped", None), 10), proctree.status(stopped)
    answers = []
    for _ in range(12):
        r = timed_call(session, {"command": "echo ok", "timeout_seconds": 1.0}, 1.0 + 0.5 + SLACK)
        answers.append(r.ok or r.error.code)
        assert r.ok or r.error.code == "worker_crashed", r
        if answers[-2:] == [True, True] and not living([stopped]):
            break
    assert answers[-2:] == [True, True], answers
    assert living([stopped]) == [], "the stopped forkserver was killed and replaced"
    assert forkserver_of(session) != stopped


def test_a_stopped_worker_is_killed_at_deadline_plus_grace(open_session, containment, workspace, leftovers):
    session = open_session({**FAST, "runtime": {"containment": containment}})
    r = timed_call(session, {"command": "sleep 1000 & echo $! > bg.pid; kill -STOP $PPID; wait",
                             "timeout_seconds": 1.0},
                   1.0 + 0.5 + SLACK)
    assert not r.ok and r.error.code == "worker_hung", r
    assert living([int((workspace / "bg.pid").read_text())]) == []
    assert session.call("bash", {"command": "echo again"}).value["output"] == "again\n"


def test_a_stopped_standby_is_never_given_a_call(open_session, containment):
    session = open_session({**FAST, "runtime": {"containment": containment}})
    assert session.call("bash", {"command": "true"}).ok
    standbys = []
    assert wait_for(lambda: standbys.extend(
        p for p in proctree.descendants(session.supervisor_pid)
        if proctree.cmdline(p) == "peon-worker standby" and p not in standbys) or len(standbys) >= 1, 10)
    for pid in standbys:
        os.kill(pid, signal.SIGSTOP)
    # Stopped before the call arrives (as by a command of an earlier call); one stopped at the very
    # moment it is handed a call is a stopped worker: answered at deadline + grace, like any other.
    assert wait_for(lambda: all(proctree.status(pid) == "stopped" for pid in standbys), 10)
    r = timed_call(session, {"command": "echo fresh"}, SLACK)
    assert r.value["output"] == "fresh\n", r
    assert wait_for(lambda: living(standbys) == [], 10), "stopped standbys are killed, not left behind"


def test_a_stopped_supervisor_is_killed_by_its_client(open_session, monkeypatch, leftovers):
    monkeypatch.setattr(peon.client.watchdog, "ANSWER_MARGIN_SECONDS", 1.0)
    session = open_session(FAST)
    supervisor = session.supervisor_pid
    command = PPID + "kill -STOP $(ppid $(ppid $PPID)); sleep 1000"
    r = timed_call(session, {"command": command, "timeout_seconds": 1.0}, 1.0 + 0.5 + 1.0 + SLACK)
    assert not r.ok and r.error.code == "supervisor_died", r
    assert "stopped answering" in r.error.message and "was stopped" in r.error.message, r.error.message
    assert wait_for(lambda: not leftovers.alive(), 10), leftovers.alive()
    assert living([supervisor]) == []
    assert session.call("bash", {"command": "true"}).error.code == "supervisor_died"


# -- a command that leaves its cgroup ----------------------------------------------------------------------

needs_root_cgroup = pytest.mark.skipif(
    not CGROUP_SUPPORT.available or os.geteuid() != 0,
    reason="moving a process into another cgroup needs cgroup v2 containment and root",
)


def escape_to_parent(session) -> str:
    """Shell that moves the last background process into the cgroup above the session's."""
    parent = Path(session.info["containment"]["cgroup"]).parent
    return f"echo $! > {parent}/cgroup.procs"


@needs_root_cgroup
def test_a_process_that_moves_out_of_its_cgroup_still_dies_and_the_call_keeps_its_output(open_session, workspace):
    session = open_session({"runtime": {"containment": "cgroup"}, **UNSANDBOXED})
    command = f"sleep 1000 & echo $! > esc.pid; {escape_to_parent(session)} && echo moved"
    r = timed_call(session, {"command": command}, SLACK)
    assert r.ok and r.value["output"] == "moved\n", r
    escaped = int((workspace / "esc.pid").read_text())
    assert living([escaped]) == []


@needs_root_cgroup
def test_a_process_that_moved_out_of_its_cgroup_dies_with_the_supervisor(open_session, workspace, leftovers):
    session = open_session({"runtime": {"containment": "cgroup"}, **UNSANDBOXED})
    handle = session.submit("bash", {"command": f"sleep 1000 & echo $! > esc.pid; {escape_to_parent(session)}; wait"})
    assert wait_for(lambda: (workspace / "esc.pid").exists() and (workspace / "esc.pid").read_text().strip(), 10)
    escaped = int((workspace / "esc.pid").read_text())
    assert wait_for(lambda: str(escaped) in Path(session.info["containment"]["cgroup"]).parent.joinpath(
        "cgroup.procs").read_text().split(), 10)
    os.kill(session.supervisor_pid, signal.SIGKILL)
    assert handle.result(timeout=30).error.code == "supervisor_died"
    assert wait_for(lambda: living([escaped]) == [], 10)
    assert wait_for(lambda: not leftovers.alive(), 10), leftovers.alive()
