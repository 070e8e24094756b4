"""The supervisor's detached tasks: work that goes on beside whatever the supervisor does next.

Promise: a task started by :meth:`HeldTasks.start` is held until it ends (the event loop keeps only weak
references to its tasks: one nobody holds may be collected before it ends), and
:meth:`HeldTasks.wait_all` returns once every task held when it was called has ended, whatever each
raised. :func:`first` returns as soon as the first of several waits ends, and cancels the others: no
wait outlives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class HeldTasks:
    """Tasks started to run on their own (clean-ups, notices, calls served beside the queue)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_all(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Return when the first of ``waits`` finishes; the others are cancelled."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
