"""The one place a Peon process collects the exit statuses of its children.

Promise: every child of this process (including orphans reparented to it as a subreaper) is reaped
promptly, so no zombie accumulates; whoever asked to :meth:`Reaper.watch` a pid gets its wait status.
Register the watch right after creating the child, before control returns to the event loop: the
SIGCHLD handler runs from the loop, so it cannot reap the child first. Code that must reap
synchronously (sweeps) calls :meth:`Reaper.reap`, never ``waitpid`` itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Set as AbstractSet

from peon.workers.proctree import children, reap_all, signal_name


class Reaper:
    def __init__(self) -> None:
        self._waiters: dict[int, asyncio.Future[int]] = {}

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_signal_handler(signal.SIGCHLD, self.reap)

    def watch(self, pid: int) -> asyncio.Future[int]:
        future = self._waiters.get(pid)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._waiters[pid] = future
        return future

    def reap(self) -> None:
        for pid, status in reap_all():
            future = self._waiters.pop(pid, None)
            if future is not None and not future.done():
                future.set_result(status)


async def wait_children_gone(reaper: Reaper, exclude: AbstractSet[int] = frozenset(), timeout: float = 10.0) -> bool:
    """Reap until this process has no children but ``exclude``; False if some remain after ``timeout``.

    For a subreaper this means no descendants either: a living descendant whose parent died was
    reparented here, so some child is alive (or an unreaped zombie) while any descendant is.
    """
    me = os.getpid()
    until = time.monotonic() + timeout
    delay = 0.0002
    while True:
        reaper.reap()
        if not [pid for pid in children(me) if pid not in exclude]:
            return True
        if time.monotonic() >= until:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.01)


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal_name(os.WTERMSIG(status))}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def describe_exitcode(code: int | None) -> str:
    """How a ``multiprocessing`` process ended, from its ``exitcode`` (-N: killed by signal N)."""
    if code is None:
        return "exited (its status is unknown: the forkserver did not report it)"
    if code < 0:
        return f"killed by {signal_name(-code)}"
    return f"exited with status {code}"


# One reaper per process: waitpid(-1) anywhere else would steal statuses from it.
REAPER = Reaper()
