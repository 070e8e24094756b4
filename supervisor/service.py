"""The supervisor process: the session's single owner of calls, approval state, jobs and workers.

Promise: the supervisor opens the session from the client's ``start`` (``ready``, or ``fatal`` saying
why and leaving nothing behind), then reads the client's messages until the session ends. Calls are
taken from the queue in the order they arrived and served by :class:`peon.supervisor.calls.CallServer`
(admitted, approved, audited, run, answered exactly once). With ``limits.max_parallel_calls`` = 1 each
is served to its answer before the next is taken: calls run one at a time in arrival order, a question
to the approver holding the session — except the job tools, which are admitted, approved and audited
in that order and then answered from their own task. Above 1, each call is taken as it arrives and
served beside the others: admitted and put in the approval line in arrival order, and run as soon as
it is allowed and one of the ``max_parallel_calls`` slots is free (calls that change files without a
process one at a time), each in a worker of its own; each is answered as it ends, whatever the order.
At most ``limits.max_queued_calls`` calls holding at most ``limits.max_queued_bytes`` of input are held
at once (queued, waiting for the approver or a slot, and running alike); a call beyond that is answered
``busy`` at once and dropped, and so is a call whose id names a call still held. A call cancelled before
it runs is answered ``cancelled`` at once and never starts. When the client closes the session, its
channel reaches EOF, or the supervisor gets ``SIGTERM`` (``SIGINT``, ``SIGHUP``), queued calls fail with
``session_closed``, the calls taken and every background job (:mod:`peon.supervisor.jobs`) are
cancelled like any cancel (TERM, grace, KILL) and waited for, every worker tree is killed and the
supervisor exits — after a signal with 128 + its number. Nothing it started outlives it.

In OTP terms the supervisor is a ``one_for_one`` supervisor that also owns the session's state: it
decides, its children (the workers, the job host, the forkserver) may crash, and it survives each.
This module is the process around the calls: its start, the client's channel, the queue and its
bounds, and shutdown.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from setproctitle import setproctitle

from peon.core.environment import trace_context
from peon.core.errors import ErrorCode, PeonError, ToolError, error_reply as _error
from peon.core.jobs import serve_jobs
from peon.approval.validation import load_validator
from peon.workers import linux
from peon.workers.channel import Channel, ChannelError
from peon.workers.reaper import REAPER

from peon.supervisor import diagnostics
from peon.supervisor.approval.audit import job_entry
from peon.supervisor.calls import CallServer, PendingCall
from peon.supervisor.checkpointing import Checkpointing
from peon.supervisor.jobs import JobAudit, JobTable
from peon.supervisor.session_state import SessionState
from peon.supervisor.tasks import HeldTasks

if TYPE_CHECKING:
    from peon.supervisor.pool import WorkerPool


class Supervisor:
    def __init__(self, client: Channel):
        self.client = client
        self.queue: asyncio.Queue[PendingCall] = asyncio.Queue()
        self.calls: dict[str, PendingCall] = {}  # queued and running: the bounded set
        self.held_bytes = 0
        self.state: SessionState | None = None
        self.pool: WorkerPool | None = None
        self.jobs: JobTable  # made once the pool has begun, with the call server
        self.server: CallServer
        self.stopping = asyncio.Event()
        self._notices = HeldTasks()  # messages sent to the client without waiting
        self.started_notices = False
        self.stopped_by: signal.Signals | None = None  # the signal that ended the session, if one did

    def stop_on_signal(self, sig: signal.Signals) -> None:
        """A signal ends the session like a close; the supervisor then exits with 128 + its number, so
        its client can say what happened."""
        if self.stopped_by is None:
            self.stopped_by = sig
            print(f"peon-supervisor: received {sig.name}; closing the session", file=sys.stderr)
        self.stopping.set()

    @property
    def opened(self) -> SessionState:
        """The session, once :meth:`run` opened it (every call and message handler runs after that)."""
        assert self.state is not None, "the session is not open yet"
        return self.state

    async def run(self) -> int:
        start = await self.client.recv()
        if start is None or start.get("op") != "start":
            return 2
        self.started_notices = bool(start.get("started_notices"))  # the client watches running calls
        try:
            self.state = SessionState.open(start, self)
        except PeonError as exc:
            await self.client.send({"op": "fatal", "error": exc.to_dict()})
            return 1
        except Exception as exc:  # a bug, or a tool that fails in schema_for: say so, leave nothing behind
            traceback.print_exc(file=sys.stderr)
            await self.client.send({"op": "fatal", "error": ToolError(
                ErrorCode.SUPERVISOR_DIED, f"the supervisor could not open the session: {type(exc).__name__}: {exc}",
            ).to_dict()})
            return 1
        setproctitle(f"peon-supervisor {self.state.view.workspace}")
        state = self.state
        try:
            await self.client.send({"op": "ready", **self.state.describe(os.getpid())})
            # The forkserver (a fresh interpreter) and the standbys start while the client goes on: the
            # first call waits for its worker, and says so if none can start. The validator loads once
            # the forkserver is launched, so the two load their modules at the same time.
            # In process-tree containment the client learns each worker's pid and start time, to kill the
            # trees of workers that outlive this process (a stopped worker runs no parent-death handler).
            tracked = state.containment.kind == "process-tree"
            self.pool = await _begin_pool(state, self._notify if tracked else None)
            limits = state.config.limits
            self.jobs = JobTable(state.config.jobs, limits.worker_grace_seconds, state.view.spill_dir,
                                 pool=self.pool, audit=_job_audit(state), output_limit=int(limits.max_output_bytes))
            serve_jobs(self.jobs)  # job_write is approved from the job's input as it is (peon.core.jobs)
            self.server = CallServer(state, self.pool, self.jobs, self.client.send,
                                     self._notify if self.started_notices else None, self._let_go,
                                     max_parallel=int(limits.max_parallel_calls),
                                     checkpoints=_checkpointing(state, self.jobs))
            load_validator(state.schemas.values())  # now, not before ready: the first call's admission needs it
            async with asyncio.TaskGroup() as group:
                reader = group.create_task(self._read_client())
                executor = group.create_task(self._execute_calls())
                await self.stopping.wait()  # the client closed, went away, or a signal came
                await self._shutdown(reader, executor)
        finally:
            if self.pool is not None:
                await self.pool.close()
            self.state.close()
        return 0

    # -- messages from the client -------------------------------------------------------------------

    async def _read_client(self) -> None:
        try:
            await self._read_messages()
        finally:
            self.stopping.set()

    async def _read_messages(self) -> None:
        while True:
            try:
                message = await self.client.recv()
            except ChannelError as exc:  # one bad line must not end the session
                print(f"peon-supervisor: ignored a malformed message from the client: {exc}", file=sys.stderr)
                continue
            if message is None or message.get("op") == "close":
                return
            op = message.get("op")
            if op == "call":
                call = PendingCall(str(message.get("id")), str(message.get("tool")), message.get("args"),
                                   bool(message.get("progress")), trace=trace_context(message.get("trace")),
                                   auto_yield=message.get("auto_yield") is not False)
                call.size = input_size(call.args)
                if call.id in self.calls:  # a client's bug: the id already names a held call
                    call.args = None
                    await self.server.answer(call, _error(ErrorCode.INVALID_INPUT,
                                                          f"call id {call.id!r} is already in use "
                                                          "by a queued or running call"))
                    continue
                busy = self._over_bounds(call)
                if busy is not None:  # answered and dropped: holding it is what the bound prevents
                    call.args = None
                    await self.server.answer(call, busy)
                    continue
                self.calls[call.id] = call
                self.held_bytes += call.size
                self.queue.put_nowait(call)
                if self.pool is not None and self._needs_worker(call.tool):
                    self.pool.wake()
            elif op == "cancel":
                await self._cancel(str(message.get("id")))
            elif op == "approval_answer":
                self.opened.approval_answer(message)

    def _needs_worker(self, tool_name: str) -> bool:
        tool = self.opened.tools.get(tool_name)
        return tool is not None and not tool.served_by_supervisor

    async def _cancel(self, call_id: str) -> None:
        call = self.calls.get(call_id)
        if call is None or call.cancelled.is_set():
            return
        call.cancelled.set()
        if not call.started:  # still queued: it will never start
            await self.server.answer(call, _error(ErrorCode.CANCELLED, f"{call.tool} was cancelled before it started"))

    def _over_bounds(self, call: PendingCall) -> dict | None:
        """A ``busy`` reply if holding ``call`` would pass the queue's bounds (a lone call of any size
        that passed limits.max_input_bytes is held)."""
        limits = self.opened.config.limits
        max_calls, max_bytes = limits.max_queued_calls, limits.max_queued_bytes
        if len(self.calls) >= max_calls:
            return _error(ErrorCode.BUSY, f"the session already holds {len(self.calls)} calls; "
                          f"limits.max_queued_calls is {max_calls}", {"limit": "max_queued_calls", "value": max_calls})
        if self.calls and self.held_bytes + call.size > max_bytes:
            return _error(ErrorCode.BUSY, f"the session's queued calls hold {self.held_bytes} bytes of input and this "
                          f"call {call.size} more; limits.max_queued_bytes is {max_bytes}",
                          {"limit": "max_queued_bytes", "value": max_bytes})
        return None

    def _let_go(self, call: PendingCall) -> None:
        """An answered call leaves the bounded set (a call answered without being held never was in it)."""
        if self.calls.get(call.id) is call:
            del self.calls[call.id]
            self.held_bytes -= call.size

    # -- the executor -------------------------------------------------------------------------------

    async def _execute_calls(self) -> None:
        """Take each call in arrival order: one at a time to its answer (``max_parallel_calls`` = 1), or
        started beside the others at once (the server's slots bound how many run)."""
        serial = self.server.max_parallel == 1
        while True:
            call = await self.queue.get()
            if call.cancelled.is_set():
                continue  # already answered
            if serial:
                await self.server.serve(call)
            else:
                self.server.start(call)

    def _notify(self, message: dict) -> None:
        async def send() -> None:
            try:
                await self.client.send(message)
            except OSError:
                pass

        self._notices.start(send())

    async def _shutdown(self, reader: asyncio.Future, executor: asyncio.Future) -> None:
        reader.cancel()
        for call in list(self.calls.values()):
            if not call.started:
                call.cancelled.set()
                why = f" (the supervisor received {self.stopped_by.name})" if self.stopped_by else ""
                await self.server.answer(call, _error(ErrorCode.SESSION_CLOSED,
                                                      f"the session closed before {call.tool} started{why}"))
            else:
                call.cancelled.set()  # the running call gets TERM, grace, KILL like any cancel
        running = [call for call in self.calls.values() if call.started]
        async with asyncio.TaskGroup() as group:  # its cancel runs TERM → grace → KILL, bounded by the pool
            for call in running:
                group.create_task(call.finished.wait())
            group.create_task(self.jobs.close())  # background jobs too, through the same cancel path
        executor.cancel()
        await self.server.wait_all()  # every answer sent before the pool goes


def _checkpointing(state: SessionState, jobs: JobTable) -> Checkpointing:
    """The session's checkpoints (:mod:`peon.supervisor.checkpointing`), told of each background job's end."""
    checkpoints = Checkpointing.open(state.config.checkpoints, state.state_dir, state.view.workspace)
    jobs.on_background_end = checkpoints.job_ended
    return checkpoints


def _job_audit(state: SessionState) -> JobAudit:
    """Writes a background job's ``job_started`` and ``job_ended`` lines to the session's audit log."""

    def write(event: str, job: dict[str, Any]) -> None:
        state.audit.record(job_entry(event=event, session_id=state.view.session_id, job=job, now=time.time()))

    return write


def input_size(value: Any, limit: int = 1 << 40) -> int:
    """About how many bytes ``value`` takes as JSON (strings by their length), without encoding it."""
    total = 0
    stack = [value]
    while stack and total < limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, dict):
            total += 2 + len(item)
            for key, inner in item.items():
                total += len(str(key)) + 3
                stack.append(inner)
        elif isinstance(item, list):
            total += 2 + len(item)
            stack.extend(item)
        else:
            total += 8
    return total


async def _begin_pool(state: SessionState,
                      on_worker: Callable[[dict[str, Any]], None] | None = None) -> WorkerPool:
    """The session's worker pool, begun. Its machinery (``multiprocessing``, psutil, the worker's own
    modules) is imported here, once the client has ``ready``, not before: answering it sooner."""
    from peon.supervisor.forker import Forker
    from peon.supervisor.pool import BUSY_STANDBYS, WorkerPool

    limits = state.config.limits
    pool = WorkerPool(lambda: Forker.spawn(state.worker_session(), state.registry.import_paths()),
                      state.containment, limits.worker_grace_seconds, max_calls=int(limits.worker_max_calls),
                      on_worker=on_worker, max_ready=int(limits.max_parallel_calls) + BUSY_STANDBYS)
    await pool.begin()
    return pool


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m peon.supervisor")
    parser.add_argument("--fd", type=int, required=True, help="the connected socket to the client")
    options = parser.parse_args(argv)
    diagnostics.install()  # before anything can print, and before the forkserver inherits descriptor 2
    linux.unblock_signals()
    linux.set_dumpable(False)  # no ptrace, no pidfd_getfd from processes of the same user
    linux.set_child_subreaper()
    setproctitle("peon-supervisor (starting)")
    sock = socket.socket(fileno=options.fd)
    code = asyncio.run(_main(sock))
    # Everything the supervisor owns is closed by now (workers, forkserver, audit log, grants). Tearing
    # down the interpreter's modules would only add ~70 ms to every session's close.
    sys.stdout.flush()
    sys.stderr.flush()
    diagnostics.drain()
    os._exit(code)


async def _main(sock: socket.socket) -> int:
    loop = asyncio.get_running_loop()
    REAPER.install(loop)
    supervisor = Supervisor(Channel(sock))
    handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    for sig in handled:
        loop.add_signal_handler(sig, supervisor.stop_on_signal, sig)
    try:
        code = await supervisor.run()
    finally:  # before the loop closes its wake-up socket, which a late signal would otherwise write to
        for sig in (*handled, signal.SIGCHLD):
            loop.remove_signal_handler(sig)
    return 128 + supervisor.stopped_by if supervisor.stopped_by is not None and code == 0 else code
