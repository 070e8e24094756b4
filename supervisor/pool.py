"""The supervisor's workers: one standby kept ready, one dedicated worker per call, all owned here.

Promise: :meth:`WorkerPool.run` hands a call to a fresh worker (the standby, forked before the call
arrived, so the call does not wait for a process start-up) and returns exactly one outcome: the
worker's result, or an error saying how the worker failed (crashed, killed by the OOM killer, hung past
deadline + grace, could not be started). When it returns an error, the worker and its whole tree are
already dead. When it returns a worker's result, the worker itself is still exiting;
:meth:`WorkerPool.retire` waits for it and releases its containment in the background.
:meth:`WorkerPool.close` kills every worker the pool ever started and stops the forkserver.

Workers are forked by the session's forkserver (:mod:`supervisor.forker`), not by the supervisor: the
supervisor watches each through a pidfd and kills trees by pid or cgroup; the orphans of a worker
that dies are reparented to the supervisor (a subreaper) and killed here.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback
from typing import Awaitable, Callable

from peon.cancel import Deadline
from peon.errors import ErrorCode, ToolError
from workers.channel import Channel, ChannelError
from workers.reaper import REAPER, describe_status, wait_children_gone
from workers.runner import CANCEL_GRACE_SECONDS

from .containment import Containment, sweep_orphans
from .forker import Forker, ForkerGone

EXIT_WAIT_SECONDS = 2.0  # how long a worker may take to exit after reporting its result
STATUS_WAIT_SECONDS = 1.0  # how long after a worker's exit its status may take to arrive


class WorkerHandle:
    """One worker: its pid, a pidfd (exit detection that needs no parent), and its call channel.

    ``exited`` resolves with the wait status once the worker has exited, or with None when the
    forkserver that would have reported it is gone.
    """

    def __init__(self, pid: int, pidfd: int, channel: Channel, status: asyncio.Future):
        self.pid = pid
        self.pidfd = pidfd
        self.channel = channel
        self.exited: asyncio.Future[int | None] = asyncio.ensure_future(self._watch(status))

    async def _watch(self, status: asyncio.Future) -> int | None:
        loop = asyncio.get_running_loop()
        gone = loop.create_future()
        loop.add_reader(self.pidfd, lambda: gone.done() or gone.set_result(None))
        try:
            await asyncio.wait({status, gone}, return_when=asyncio.FIRST_COMPLETED)
            return await asyncio.wait_for(asyncio.shield(status), STATUS_WAIT_SECONDS)
        except asyncio.TimeoutError:
            return None
        finally:
            loop.remove_reader(self.pidfd)

    def close(self) -> None:
        if self.pidfd < 0:
            return
        self.exited.cancel()
        self.channel.close()
        os.close(self.pidfd)
        self.pidfd = -1


class WorkerPool:
    def __init__(self, spawn_forker: Callable[[], Forker], containment: Containment, grace_seconds: float):
        self.spawn_forker = spawn_forker
        self.containment = containment
        self.grace_seconds = grace_seconds
        self.forker: Forker | None = None
        self.live: dict[int, WorkerHandle] = {}
        self._standby: asyncio.Future[WorkerHandle] | None = None
        self._retiring: set[asyncio.Task] = set()

    # -- process start-up -------------------------------------------------------------------------

    async def start(self) -> None:
        self.forker = self.spawn_forker()  # known as ours (not an orphan) before it is ready
        await self.forker.wait_ready()
        self.prestart()

    async def _fork(self) -> WorkerHandle:
        if self.forker is None or self.forker.gone.done():
            print("peon-supervisor: the forkserver is gone; starting a new one", file=sys.stderr)
            self.forker = self.spawn_forker()
        await self.forker.wait_ready()
        pid, pidfd, sock = await self.forker.fork()
        handle = WorkerHandle(pid, pidfd, Channel(sock), self.forker.exit_status(pid))
        self.live[pid] = handle
        try:
            self.containment.adopt(pid)
        except OSError as exc:
            self.containment.kill_tree(pid)
            raise ToolError(ErrorCode.WORKER_CRASHED, f"cannot place a new worker in its cgroup: {exc.strerror}")
        return handle

    def prestart(self) -> None:
        if self._standby is None:
            self._standby = asyncio.ensure_future(self._fork())

    async def _take(self) -> WorkerHandle:
        standby, self._standby = self._standby, None
        worker = None
        if standby is not None:
            try:
                worker = await standby
            except (ForkerGone, ToolError):
                worker = None
        if worker is None or worker.exited.done():
            if worker is not None:
                self.retire(worker)
            worker = await self._fork()
        return worker

    # -- one call ---------------------------------------------------------------------------------

    async def run(
        self,
        call: dict,
        deadline: Deadline,
        cancelled: asyncio.Event,
        on_progress: Callable[[dict], Awaitable[None]],
    ) -> dict:
        try:
            worker = await self._take()
        except (ForkerGone, ToolError) as exc:
            return _failure(ErrorCode.WORKER_CRASHED, f"no worker could be started for {call['tool']}: {exc}")
        try:
            await worker.channel.send({**call, "op": "call", "deadline": deadline.at,
                                       "cgroup": self.containment.worker_cgroup(worker.pid)})
        except OSError:
            pass  # the worker died at once; its exit is reported below
        self.prestart()  # fork the next standby while this call runs
        reply = await self._await_result(worker, call["tool"], deadline, cancelled, on_progress)
        if reply.get("op") == "result":  # reported by the worker, which swept its own tree first
            self.retire(worker)
        else:
            await self._finish(worker)  # the worker failed: nothing of it may remain when we answer
        return reply

    async def _await_result(self, worker, tool, deadline, cancelled, on_progress) -> dict:
        backstop = deadline.at + self.grace_seconds
        receive = asyncio.ensure_future(worker.channel.recv())
        cancel_wait = asyncio.ensure_future(cancelled.wait())
        try:
            while True:
                waits = {receive, worker.exited} | ({cancel_wait} if not cancel_wait.done() else set())
                done, _ = await asyncio.wait(
                    waits, timeout=max(0.0, backstop - time.monotonic()), return_when=asyncio.FIRST_COMPLETED
                )
                if receive in done:
                    try:
                        message = receive.result()
                    except ChannelError as exc:
                        self.containment.kill_tree(worker.pid)
                        return _failure(ErrorCode.WORKER_CRASHED, f"the worker for {tool} broke protocol: {exc}")
                    if message is None:
                        return await self._crashed(worker, tool)
                    if message.get("op") == "result":
                        return message
                    if message.get("op") == "progress":
                        await on_progress(message)
                    receive = asyncio.ensure_future(worker.channel.recv())
                elif worker.exited in done:
                    # A result may still be in the socket: read until EOF before calling it a crash.
                    try:
                        message = await asyncio.wait_for(asyncio.shield(receive), 1.0)
                    except (asyncio.TimeoutError, ChannelError):
                        message = None
                    if message is not None and message.get("op") == "result":
                        return message
                    return await self._crashed(worker, tool)
                elif cancel_wait in done:
                    try:
                        await worker.channel.send({"op": "cancel", "reason": "cancelled by the client"})
                    except OSError:
                        pass
                    backstop = min(backstop, time.monotonic() + CANCEL_GRACE_SECONDS + self.grace_seconds)
                else:
                    self.containment.kill_tree(worker.pid)
                    return _failure(
                        ErrorCode.WORKER_HUNG,
                        f"the worker for {tool} did not finish within its deadline plus "
                        f"{self.grace_seconds:g} s of grace and was killed with its whole process tree",
                    )
        finally:
            receive.cancel()
            cancel_wait.cancel()

    async def _crashed(self, worker: WorkerHandle, tool: str) -> dict:
        try:
            status = await asyncio.wait_for(asyncio.shield(worker.exited), EXIT_WAIT_SECONDS)
        except asyncio.TimeoutError:
            self.containment.kill_tree(worker.pid)
            return _failure(ErrorCode.WORKER_CRASHED, f"the worker for {tool} closed its channel and was killed")
        how = describe_status(status) if status is not None else "exited (its status is unknown: the forkserver is gone)"
        if self.containment.oom_killed(worker.pid):
            return _failure(ErrorCode.WORKER_OOM, f"the worker for {tool} was {how} by the out-of-memory killer")
        hint = " (the out-of-memory killer or another process)" if how == "killed by SIGKILL" else ""
        return _failure(
            ErrorCode.WORKER_CRASHED,
            f"the worker for {tool} {how}{hint} before reporting a result",
            {"status": how},
        )

    # -- clean-up ---------------------------------------------------------------------------------

    def retire(self, worker: WorkerHandle) -> None:
        task = asyncio.ensure_future(self._finish(worker))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _finish(self, worker: WorkerHandle) -> None:
        try:
            try:
                await asyncio.wait_for(asyncio.shield(worker.exited), EXIT_WAIT_SECONDS)
            except asyncio.TimeoutError:
                self.containment.kill_tree(worker.pid)
                await asyncio.wait_for(asyncio.shield(worker.exited), EXIT_WAIT_SECONDS)
            if not self.containment.release(worker.pid):
                print(f"peon-supervisor: the cgroup of worker {worker.pid} could not be emptied", file=sys.stderr)
            ours = self._own_children()
            sweep_orphans(ours)
            if not await wait_children_gone(REAPER, exclude=ours - {worker.pid}):
                print(f"peon-supervisor: processes left by worker {worker.pid} survived SIGKILL", file=sys.stderr)
        except Exception:
            traceback.print_exc(file=sys.stderr)
        finally:
            if worker.exited.done():
                self.live.pop(worker.pid, None)
                if self.forker is not None:
                    self.forker.forget(worker.pid)
            worker.close()

    def _own_children(self) -> set[int]:
        """The supervisor's children that are not orphans: the forkserver (workers are its children)."""
        return set(self.live) | ({self.forker.pid} if self.forker is not None else set())

    async def close(self) -> None:
        """Kill every worker and everything below them, stop the forkserver, wait until all are gone."""
        standby, self._standby = self._standby, None
        if standby is not None:
            try:
                await standby
            except (ForkerGone, ToolError):
                pass
        for worker in list(self.live.values()):
            self.containment.kill_tree(worker.pid)
        for worker in list(self.live.values()):
            await self._finish(worker)
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        if self.forker is not None:
            await self.forker.close()
        sweep_orphans(set())
        await wait_children_gone(REAPER)


def _failure(code: ErrorCode, message: str, details: dict | None = None) -> dict:
    """A result the pool makes up because the worker could not report one (no ``op``: not from it)."""
    return {"ok": False, "error": ToolError(code, message, details).to_dict()}
