"""One worker as the supervisor holds it: its process, pidfd, ``stat`` file, cgroup slot and channel.

Promise: :attr:`WorkerHandle.exited` resolves exactly once — with the worker's exit code (``-N``: killed
by signal N) once its forkserver reported it, or with None when that status cannot be known (the
forkserver is gone or stopped: the pidfd saw the worker die and no status came within
:data:`STATUS_WAIT_SECONDS`, or the handle was released first) — and never by cancelling whoever waits
on it. :meth:`WorkerHandle.recv` yields only well-formed, bounded messages of the worker's current call
(:mod:`peon.workers.messages`): anything else is a :class:`~peon.workers.messages.ProtocolError`, which
its holder treats as a crashed worker. A worker may crash at any moment; the handle never trusts it
with more than one call's messages, and whoever holds the handle decides its fate.
"""

from __future__ import annotations

import asyncio
import os

from peon.core.framing import encode_json
from peon.workers import proctree
from peon.workers.channel import ChannelError, FrameChannel
from peon.workers.messages import (
    CallMessage,
    CancelMessage,
    InputMessage,
    ProtocolError,
    WorkerMessage,
    parse_worker_message,
)

from peon.supervisor.forker import StartedWorker

EXIT_WAIT_SECONDS = 2.0  # how long a worker may take to exit after its result, or after its channel closed
STATUS_WAIT_SECONDS = 1.0  # how long after a worker's exit its status may take to arrive


class WorkerHandle:
    """One worker: its ``multiprocessing.Process``, a pidfd, its ``stat`` file, its cgroup slot and its channel.

    ``exited`` resolves with its exit code (``-N``: killed by signal N) once it has exited, or with
    None when its status cannot be known (its forkserver is gone or stopped)."""

    def __init__(self, started: StartedWorker):
        self.process = started.process
        self.pid = started.pid
        self.pidfd = started.pidfd
        self.slot = started.slot
        self.forkserver: int | None = getattr(started, "forkserver", None)
        self.channel = FrameChannel(started.channel)
        self.call_id: str | None = None
        self.calls = 0  # calls it answered with a result
        try:  # opened now, off the call's path: looking at its state later is one pread
            self.watch: proctree.StateWatch | None = proctree.StateWatch(self.pid)
        except OSError:  # it is gone already: take() discards it
            self.watch = None
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[int | None] = loop.create_future()
        self._sentinel = self.process.sentinel
        loop.add_reader(self._sentinel, self._on_status)
        if self.pidfd >= 0:
            loop.add_reader(self.pidfd, self._on_death)
        self._status_timer: asyncio.TimerHandle | None = None

    def _on_status(self) -> None:
        """The forkserver wrote the exit status (or closed the pipe: it is gone)."""
        asyncio.get_running_loop().remove_reader(self._sentinel)
        code = self.process.exitcode  # the sentinel is readable: this does not block
        self._resolve(None if code == 255 else code)  # 255: what multiprocessing says when it cannot tell

    def _on_death(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.pidfd)
        if not self.exited.done():  # the status normally follows at once; a stopped forkserver never sends it
            self._status_timer = loop.call_later(STATUS_WAIT_SECONDS, self._resolve, None)

    def _resolve(self, code: int | None) -> None:
        if not self.exited.done():
            self.exited.set_result(code)

    async def wait_exit(self, seconds: float = EXIT_WAIT_SECONDS) -> int | None:
        """Its exit code (None: unknown) once it has exited; ``TimeoutError`` if it has not within
        ``seconds``. Giving up leaves :attr:`exited` to whoever else waits on it."""
        async with asyncio.timeout(seconds):
            return await asyncio.shield(self.exited)

    async def send(self, message: CallMessage | CancelMessage | InputMessage) -> None:
        await self.channel.send(encode_json(message))

    async def recv(self) -> WorkerMessage | None:
        """The next message of its call, None once it closed its channel; :class:`ProtocolError` for
        anything that is not a well-formed, bounded message of its current call."""
        try:
            payload = await self.channel.recv()
        except ChannelError as exc:
            raise ProtocolError(str(exc)) from None
        if payload is None:
            return None
        return parse_worker_message(payload, self.call_id or "")

    def close(self) -> bool:
        """Release the supervisor's descriptors of this worker (it must have exited); False if
        ``multiprocessing`` does not know its status yet (try again later)."""
        loop = asyncio.get_running_loop()
        self.channel.close()
        if self.watch is not None:
            self.watch.close()
        if self._status_timer is not None:
            self._status_timer.cancel()
        if self.pidfd >= 0:
            loop.remove_reader(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = -1
        if not self.exited.done():  # released unknown: whoever else waits on it goes on (no CancelledError)
            self.exited.set_result(None)
        loop.remove_reader(self._sentinel)
        try:
            self.process.close()
        except ValueError:
            return False  # its forkserver has not reported it yet
        return True
