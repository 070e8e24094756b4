"""Faults are answered with what happened: the signal, who sent it where Peon knows, what to do — never
"exited with status 0" for a supervisor stopped by a signal, nor an unknown status for a worker whose
forkserver is gone."""

from __future__ import annotations

import os
import signal

from helpers import wait_for

# The commands here signal Peon's own processes, which the default sandbox refuses: they run unsandboxed.
UNSANDBOXED = {"sandbox": {"mode": "off"}}
PPID = "ppid() { sed 's/.*) //' /proc/$1/stat | cut -d' ' -f2; }; "  # the parent of a pid (titles have spaces)


def test_a_supervisor_ended_by_sigterm_is_reported_with_the_signal(open_session):
    session = open_session()
    assert session.call("bash", {"command": "true"}).ok
    os.kill(session.supervisor_pid, signal.SIGTERM)
    assert wait_for(lambda: not session.alive, 30)
    r = session.call("bash", {"command": "true"})
    assert not r.ok and r.error.code == "supervisor_died", r
    message = r.error.message
    assert "SIGTERM" in message and "another process" in message and "restart()" in message, message
    assert "status 0" not in message, message


def test_a_worker_whose_forkserver_was_killed_says_so(open_session):
    session = open_session(UNSANDBOXED)
    r = session.call("bash", {"command": PPID + "kill -KILL $(ppid $PPID); sleep 30"})
    assert not r.ok and r.error.code == "worker_crashed", r
    message = r.error.message
    assert "unknown" not in message and "its forkserver (pid" in message and "another process" in message, message
    assert "did not complete" in message and "next call gets a new worker" in message, message
    assert session.call("bash", {"command": "echo again"}).value["output"] == "again\n"
