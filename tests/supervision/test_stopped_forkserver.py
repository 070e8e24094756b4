"""A command that stops (``SIGSTOP``) the session's forkserver costs the next call nothing but a wait
for a new worker: the stopped forkserver is seen and replaced at once, the call's time starts when its
worker takes it, the wait is reported, and the supervisor prints no traceback and kills no pid twice."""

from __future__ import annotations

import re

from helpers import living, stderr_until, wait_for
from peon.workers import proctree

PPID = "ppid() { sed 's/.*) //' /proc/$1/stat | cut -d' ' -f2; }; "  # the parent of a pid (titles have spaces)
# Longer than the call's timeout: a call that waited for the stopped forkserver to time out could not run.
# The command stops a process of Peon's own, which the default sandbox would refuse: these commands are unsandboxed.
PATIENT = {"limits": {"worker_start_seconds": 30.0}, "sandbox": {"mode": "off"}}


def forkserver_of(session) -> int:
    found: list[int] = []
    assert wait_for(lambda: found.extend(p for p in proctree.children(session.supervisor_pid)
                                         if proctree.cmdline(p).startswith("peon-forkserver")) or found, 30)
    return found[0]


def test_a_call_after_its_forkserver_was_stopped_gets_its_whole_time(open_session, capfd):
    session = open_session(PATIENT)
    stopped = forkserver_of(session)
    r = session.call("bash", {"command": PPID + "kill -STOP $(ppid $PPID); echo stopped"})
    assert r.ok and r.value["output"] == "stopped\n", r
    r = session.call("bash", {"command": "sleep 1; echo ok", "timeout_seconds": 12})
    assert r.ok, r
    assert (r.value["output"], r.value["exit_code"], r.value["timed_out"]) == ("ok\n", 0, False), r.value
    waited = r.value.get("waited_for_worker_ms", 0)
    assert isinstance(waited, int) and waited >= 0
    assert living([stopped]) == [], "the stopped forkserver was killed"
    assert forkserver_of(session) != stopped
    session.close()
    stderr = stderr_until(capfd, f"killing the forkserver (pid {stopped})")
    assert "Traceback" not in stderr and "CancelledError" not in stderr, stderr
    kills = re.findall(rf"killing the forkserver \(pid {stopped}\)[^\n]*", stderr)
    assert len(kills) == 1 and "it was stopped" in kills[0], stderr
