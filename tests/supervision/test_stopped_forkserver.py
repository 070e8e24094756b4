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


def test_a_stop_signal_still_pending_counts_as_stopped():
    """A stop takes effect only when the process is next scheduled: a call must not be handed a worker
    of a forkserver that is about to stop (sans I/O, on /proc/<pid>/status text)."""
    from peon.supervisor.forker import stopped_by_status

    def status(state: str, shdpnd: int = 0, sigpnd: int = 0) -> bytes:
        return (f"Name:\tpython\nState:\t{state}\nSigPnd:\t{sigpnd:016x}\nShdPnd:\t{shdpnd:016x}\n"
                f"SigBlk:\t0000000000000000\n").encode()

    stop, chld = 1 << (19 - 1), 1 << (17 - 1)
    assert stopped_by_status(status("T (stopped)"))
    assert stopped_by_status(status("t (tracing stop)"))
    assert stopped_by_status(status("S (sleeping)", shdpnd=stop))
    assert stopped_by_status(status("R (running)", sigpnd=1 << (20 - 1)))  # SIGTSTP
    assert not stopped_by_status(status("S (sleeping)", shdpnd=chld))
    assert not stopped_by_status(status("S (sleeping)"))
    assert not stopped_by_status(b"")


def test_the_wait_for_a_worker_is_bounded_on_its_own_and_the_call_says_why():
    """No worker within limits.worker_start_seconds: the call is answered worker_crashed, saying so and
    how long it waited, whatever its own timeout (the pool with a forker that never starts one)."""
    import asyncio

    from peon.core.cancel import Deadline
    from peon.supervisor.containment import ProcessTreeContainment
    from peon.supervisor.pool import WorkerPool

    class NeverStarts:
        start_seconds = 0.2
        pid = None
        alive = True
        starting = 0

        async def start_worker(self, containment):
            await asyncio.Event().wait()

        def stopped(self) -> bool:
            return False

        def known_pids(self) -> set[int]:
            return set()

    async def scenario():
        pool = WorkerPool(NeverStarts, ProcessTreeContainment("test"), 1.0, idle_standbys=0, busy_standbys=0)
        pool.forker = NeverStarts()
        deadline = Deadline.after(60)
        reply = await pool.run({"id": "c1", "tool": "bash", "args": {}}, deadline, asyncio.Event(),
                               lambda message: asyncio.sleep(0))
        for task in pool._ready:
            task.cancel()
        return reply

    reply = asyncio.run(scenario())
    assert reply["ok"] is False and reply["error"]["code"] == "worker_crashed", reply
    assert "within limits.worker_start_seconds (0.2 s)" in reply["error"]["message"], reply
    assert "did not run" in reply["error"]["message"]
    details = reply["error"]["details"]
    assert details["reason"] == "no_worker" and details["waited_for_worker_ms"] >= 200, details
