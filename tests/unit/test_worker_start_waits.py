"""The wait for a worker, sans I/O: a forkserver with a stop signal still pending counts as stopped, and a call
that gets no worker within ``limits.worker_start_seconds`` is answered, saying why."""

from __future__ import annotations


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

