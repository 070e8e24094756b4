"""The supervisor's side of its forkserver (see :mod:`workers.forkserver`).

Promise: :meth:`Forker.fork` returns a new worker — its pid, a pidfd for it, and the supervisor's end
of its call channel — or raises :class:`ForkerGone`; :meth:`Forker.exit_status` resolves with the
worker's wait status once the forkserver has reaped it, or with ``None`` if the forkserver died
first. The forkserver is this process's child; :attr:`Forker.gone` resolves when it exits.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections import deque
from typing import Any

from workers.reaper import REAPER

START_TIMEOUT_SECONDS = 60.0


class ForkerGone(Exception):
    pass


class Forker:
    def __init__(self, proc: subprocess.Popen, ctl: socket.socket):
        self.pid = proc.pid
        self.ctl = ctl
        self.gone: asyncio.Future[int] = REAPER.watch(proc.pid)
        self._ready: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
        self._forks: deque[asyncio.Future[tuple[int, int]]] = deque()
        self._statuses: dict[int, asyncio.Future[int | None]] = {}
        asyncio.get_running_loop().add_reader(ctl.fileno(), self._on_readable)
        self.gone.add_done_callback(lambda _: self._on_gone())

    @classmethod
    def spawn(cls, session: dict[str, Any], tool_paths: list[str]) -> "Forker":
        """Start the forkserver process (its pid is known at once); then await :meth:`wait_ready`."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "workers.forkserver", "--fd", str(theirs.fileno()),
                 "--supervisor", str(os.getpid())],
                pass_fds=[theirs.fileno()], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        forker = cls(proc, ours)  # watches the pid before control returns to the loop
        try:
            proc.stdin.write(json.dumps({"session": session, "tools": tool_paths}).encode())
            proc.stdin.close()
        except OSError:
            pass  # it died at once; wait_ready reports it
        return forker

    async def wait_ready(self) -> None:
        try:
            reply = await asyncio.wait_for(asyncio.shield(self._ready), START_TIMEOUT_SECONDS)
        except asyncio.TimeoutError:
            os.kill(self.pid, 9)
            raise ForkerGone(f"the forkserver did not start within {START_TIMEOUT_SECONDS:g} s") from None
        if reply.get("op") != "ready":
            raise ForkerGone(f"the forkserver could not start: {reply.get('error', {}).get('message', reply)}")

    async def fork(self) -> tuple[int, int, socket.socket]:
        if self.gone.done():
            raise ForkerGone("the forkserver is gone")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        waiter: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self._forks.append(waiter)
        try:
            socket.send_fds(self.ctl, [b'{"op":"fork"}'], [theirs.fileno()])
        except OSError as exc:
            self._forks.remove(waiter)
            ours.close()
            raise ForkerGone(f"the forkserver is not reachable: {exc.strerror}") from None
        finally:
            theirs.close()
        try:
            pid, pidfd = await waiter
        except ForkerGone:
            ours.close()
            raise
        return pid, pidfd, ours

    def exit_status(self, pid: int) -> asyncio.Future[int | None]:
        future = self._statuses.get(pid)
        if future is None:
            future = self._statuses[pid] = asyncio.get_running_loop().create_future()
            if self.gone.done():
                future.set_result(None)
        return future

    def forget(self, pid: int) -> None:
        self._statuses.pop(pid, None)

    def _on_readable(self) -> None:
        while self.ctl.fileno() >= 0:
            try:
                data, fds, _, _ = socket.recv_fds(self.ctl, 4096, 1)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not data:
                self._stop_reading()
                return
            message = json.loads(data)
            op = message.get("op")
            if op == "forked" and self._forks and fds:
                self._forks.popleft().set_result((message["pid"], fds[0]))
                continue
            for fd in fds:
                os.close(fd)
            if op == "exited":
                future = self.exit_status(message["pid"])
                if not future.done():
                    future.set_result(message["status"])
            elif op in ("ready", "fatal") and not self._ready.done():
                self._ready.set_result(message)

    def _on_gone(self) -> None:
        self._on_readable()  # what it sent before it exited is still in the socket
        if not self._ready.done():
            self._ready.set_result({"op": "fatal", "error": {"message": "it exited during start-up"}})
        while self._forks:
            self._forks.popleft().set_exception(ForkerGone("the forkserver exited"))
        for future in self._statuses.values():
            if not future.done():
                future.set_result(None)

    def _stop_reading(self) -> None:
        if self.ctl.fileno() >= 0:
            asyncio.get_running_loop().remove_reader(self.ctl.fileno())

    async def close(self) -> None:
        """Stop forking (the forkserver exits when its control socket closes) and wait for it."""
        self._stop_reading()
        self.ctl.close()
        try:
            await asyncio.wait_for(asyncio.shield(self.gone), 5.0)
        except asyncio.TimeoutError:
            os.kill(self.pid, 9)
            await asyncio.shield(self.gone)
