"""Waiting without processes: a pending result wakes every waiter once with the first result, and a released
worker handle wakes every waiter without cancelling it."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from peon.client.result import PendingResult, ToolResult


def test_a_pending_result_wakes_every_waiter_once_with_the_first_result():
    """Pure: the handle a submit returns, waited on from many threads, with and without timeouts."""
    pending = PendingResult("c1", "bash")
    with pytest.raises(TimeoutError):
        pending.result(timeout=0)
    with pytest.raises(TimeoutError):
        pending.result(timeout=-1)
    got: list[ToolResult] = []
    seen: list[ToolResult] = []
    pending.add_done_callback(seen.append)
    waiters = [threading.Thread(target=lambda: got.append(pending.result(timeout=30))) for _ in range(8)]
    for waiter in waiters:
        waiter.start()
    assert not pending.done()
    first, second = ToolResult("c1", "bash", True, value={"n": 1}), ToolResult("c1", "bash", True, value={"n": 2})
    pending._resolve(first)
    pending._resolve(second)  # ignored: the first result wins
    for waiter in waiters:
        waiter.join(30)
    assert pending.done() and got == [first] * 8 and seen == [first]
    assert pending.result() is first and pending.result(timeout=0) is first
    late: list[ToolResult] = []
    pending.add_done_callback(late.append)
    assert late == [first]


def test_a_released_worker_handle_wakes_every_waiter_without_cancelling_it():
    """Two clean-ups may wait on one worker's exit (a call's and the pool's at close). When one gives up
    and releases the handle, the other's wait ends with an unknown status instead of a CancelledError
    that would have ended the supervisor with a traceback."""
    import socket
    from types import SimpleNamespace

    from peon.supervisor.worker_handle import WorkerHandle

    async def scenario():
        sentinel_r, sentinel_w = os.pipe()
        ours, theirs = socket.socketpair()
        process = SimpleNamespace(sentinel=sentinel_r, exitcode=None, close=lambda: None)
        handle = WorkerHandle(SimpleNamespace(process=process, pid=0, pidfd=-1, channel=ours, slot=None))
        waiter = asyncio.ensure_future(asyncio.shield(handle.exited))
        await asyncio.sleep(0)
        assert handle.close()
        try:
            return await asyncio.wait_for(waiter, 5)
        finally:
            for fd in (sentinel_r, sentinel_w):
                os.close(fd)
            theirs.close()

    assert asyncio.run(scenario()) is None

