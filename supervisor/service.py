"""The supervisor process: the session's single owner of calls, approval state and workers.

Promise: calls run one at a time in the order they arrived — except the job tools (``job_output``,
``job_stop``, ``job_list``), which are admitted, approved and audited in that order and then answered
from their own task, so a ``job_output`` that waits never holds the calls behind it. Each call gets
exactly one ``result`` message:
admitted by the pure pipeline (:func:`peon.approval.admission.admit`: validated, risk-assessed, judged by the
policy), approved (or denied), its decision written to the audit log, executed in a dedicated worker,
or failed with a stable error code. A call is never handed to a worker before its decision line is in
the audit log; if that line cannot be written the call is answered ``audit_failed`` and never runs.
At most ``limits.max_queued_calls`` calls holding at most ``limits.max_queued_bytes`` of input are
held at once; a call beyond that is answered ``busy`` at once and dropped. A call cancelled while
queued never starts. When the client closes the session, its channel reaches EOF, or the supervisor
gets ``SIGTERM``, queued calls fail with ``session_closed``, the running call is cancelled, every
worker tree is killed and the supervisor exits — nothing it started outlives it.

Jobs (:mod:`peon.supervisor.jobs`): a call of a tool that keeps its output is a job whose output goes to
the session's output store, and its result carries the ``job_id``. A background call (``bash`` with
``background: true``) is admitted, approved and audited like any call, checked against
``jobs.max_running`` before anyone is asked, and answered once its command has started (``yield_seconds``
later at most); its worker then runs in a task of its own, so the serial executor never waits on it.
The job tools (``Tool.served_by_supervisor``) run here, on the supervisor's loop, after the same
admission, approval and audit; a cancel or their deadline ends them. At shutdown every running job is
cancelled like a running call and waited for.

This module is the I/O around the pipeline: the queue, the gate (asking the approver), the audit
log, the pool of workers and the replies.
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
from dataclasses import dataclass, field
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from setproctitle import setproctitle

from peon.approval.admission import admit
from peon.core.environment import trace_context
from peon.core.cancel import CancelToken, Deadline
from peon.core.errors import ErrorCode, PeonError, ToolError, error_reply as _error
from peon.approval.policy import ApprovalRequest, Decision
from peon.core.output.terminal import clean_terminal_text
from peon.core.tool import OutputLimits, Tool, ToolContext
from peon.core.output.truncation import HeadTail
from peon.approval.validation import load_validator
from peon.workers import linux
from peon.workers.channel import Channel, ChannelError
from peon.workers.reaper import REAPER

from peon.supervisor import diagnostics
from peon.supervisor import egress
from peon.supervisor.audit import audit_entry, decision_entry, job_entry
from peon.supervisor.facts import gather
from peon.supervisor.jobs import Job, JobTable
from peon.supervisor.session_state import SessionState

if TYPE_CHECKING:
    from peon.supervisor.pool import WorkerPool


STARTED_NOTICE_SECONDS = 0.05


@dataclass
class PendingCall:
    id: str
    tool: str
    args: Any
    progress: bool
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    started: bool = False
    # For the audit log: when it arrived and started, what the approver would see, what was decided.
    received_at: float = field(default_factory=time.time)
    started_at: float = field(default_factory=time.monotonic)
    request: ApprovalRequest | None = None
    decision: Decision | None = None
    size: int = 0  # estimated bytes of its input, counted against limits.max_queued_bytes
    trace: dict[str, str] = field(default_factory=dict)  # the caller's W3C trace context (checked)


class Supervisor:
    def __init__(self, client: Channel):
        self.client = client
        self.queue: asyncio.Queue[PendingCall] = asyncio.Queue()
        self.calls: dict[str, PendingCall] = {}  # queued and running: the bounded set
        self.held_bytes = 0
        self.state: SessionState | None = None
        self.pool: WorkerPool | None = None
        self.jobs: JobTable  # made when the session opens
        self.stopping = asyncio.Event()
        self._detached: set[asyncio.Task] = set()  # started notices and job-tool calls served beside the queue
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

    @property
    def running_pool(self) -> WorkerPool:
        assert self.pool is not None, "the worker pool is not started yet"
        return self.pool

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
        self.jobs = JobTable(state.config.jobs, state.config.limits.worker_grace_seconds, state.view.spill_dir)
        try:
            await self.client.send({"op": "ready", **self.state.describe(os.getpid())})
            # The forkserver (a fresh interpreter) and the standbys start while the client goes on: the
            # first call waits for its worker, and says so if none can start. The validator loads once
            # the forkserver is launched, so the two load their modules at the same time.
            # In process-tree containment the client learns each worker's pid and start time, to kill the
            # trees of workers that outlive this process (a stopped worker runs no parent-death handler).
            tracked = state.containment.kind == "process-tree"
            self.pool = await _begin_pool(state, self._notify if tracked else None)
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
                                   bool(message.get("progress")), trace=trace_context(message.get("trace")))
                call.size = input_size(call.args)
                if call.id in self.calls:  # a client's bug: the id already names a held call
                    call.args = None
                    await self._reply(call, _error(ErrorCode.INVALID_INPUT,
                                                   f"call id {call.id!r} is already in use "
                                                   "by a queued or running call"))
                    continue
                busy = self._over_bounds(call)
                if busy is not None:  # answered and dropped: holding it is what the bound prevents
                    call.args = None
                    await self._reply(call, busy)
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
            await self._reply(call, _error(ErrorCode.CANCELLED, f"{call.tool} was cancelled before it started"))

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

    async def _reply(self, call: PendingCall, reply: dict) -> None:
        reply = egress.name_refusals(reply, call.started_at)  # the egress allowlist's refusals during the call
        if self.calls.get(call.id) is call:
            del self.calls[call.id]
            self.held_bytes -= call.size
        call.finished.set()
        try:  # recorded before the client sees the result; a failure here must not lose the reply
            self.opened.audit.record(audit_entry(
                session_id=self.opened.view.session_id, call_id=call.id, tool=call.tool, args=call.args,
                request=call.request, decision=call.decision, reply=reply, received_at=call.received_at,
                duration_ms=int((time.monotonic() - call.started_at) * 1000)))
        except Exception:
            traceback.print_exc(file=sys.stderr)
        try:
            await self.client.send({**reply, "op": "result", "id": call.id})
        except OSError:
            pass  # the client is gone; shutdown follows from its EOF

    # -- the serial executor ------------------------------------------------------------------------

    async def _execute_calls(self) -> None:
        while True:
            call = await self.queue.get()
            if call.cancelled.is_set():
                continue  # already answered
            call.started, call.started_at = True, time.monotonic()
            await self._finish_call(call, self._run(call))

    async def _finish_call(self, call: PendingCall, running: Awaitable[dict | None]) -> None:
        try:
            reply = await running
        except Exception as exc:  # a bug here must fail one call, not the session
            traceback.print_exc(file=sys.stderr)
            reply = _error(ErrorCode.TOOL_FAILED, f"internal error while running {call.tool}: {exc}")
        if reply is not None:  # None: it goes on beside the queue, which answers it
            await self._reply(call, reply)

    def _serve_beside(self, call: PendingCall, serving: Awaitable[dict]) -> None:
        """Answer a job-tool call from its own task once it is admitted, approved and audited: a
        ``job_output`` that waits for output (or a ``job_stop`` that waits out a grace) must not hold the
        calls queued behind it. Its cancel and the session's close end it like any running call."""
        self._detach(self._finish_call(call, serving))

    def _detach(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in a task of its own, held until it ends (the loop keeps only weak references)."""
        task = asyncio.get_running_loop().create_task(work)
        self._detached.add(task)
        task.add_done_callback(self._detached.discard)

    async def _run(self, call: PendingCall) -> dict | None:
        state = self.opened
        view = state.view
        assert state.policy is not None, "an open session has its policy"
        admission = admit(call_id=call.id, tool_name=call.tool, raw_args=call.args, tools=state.tools,
                          schemas=state.schemas, view=view, policy=state.policy,
                          facts=lambda questions: gather(questions, view.workspace, view.env))
        if admission.error is not None:
            return {"ok": False, "error": admission.error.to_dict()}
        tool, request, verdict = admission.tool, admission.request, admission.verdict
        assert tool is not None and request is not None and verdict is not None
        call.request = request
        background = bool(tool.keeps_output and isinstance(admission.args, dict) and admission.args.get("background"))
        if background:  # before anyone is asked: a call that cannot start is not put to the approver
            try:
                self.jobs.check_capacity()
            except ToolError as exc:
                return {"ok": False, "error": exc.to_dict()}
        decision = call.decision = await state.approval.settle(request, verdict, call.cancelled)
        if call.cancelled.is_set():
            return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled before it started")
        if not decision.allowed:
            return _error(
                ErrorCode.DENIED,
                f"{tool.name} ({request.risk.value} risk: {request.risk_reason}) "
                f"was denied by {decision.by}: {decision.rule}",
                {"risk": request.risk.value, "by": decision.by, "rule": decision.rule},
            )
        try:  # audit before acting: no line, no call
            state.audit.commit(decision_entry(session_id=view.session_id, call_id=call.id, tool=call.tool,
                                              args=call.args, request=request, decision=decision,
                                              received_at=call.received_at))
        except (OSError, ValueError) as exc:
            return _error(ErrorCode.AUDIT_FAILED,
                          f"{tool.name} was not run: its decision could not be written to the audit log "
                          f"{state.audit.path} ({exc}); Peon runs no call it cannot audit",
                          {"audit_log": str(state.audit.path)})
        if not tool.served_by_supervisor and not self.running_pool.started:
            # A call made as the session starts: its time starts with its worker.
            await _first(self.running_pool.wait_started(), call.cancelled.wait())
            if call.cancelled.is_set():
                return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled before it started")
        deadline = Deadline.after(admission.timeout_seconds)
        if tool.served_by_supervisor:
            if self.started_notices:  # the client bounds it by its deadline, not by the queue's bound
                self._notify({"op": "started", "id": call.id,
                              "answer_by": deadline.at + state.config.limits.worker_grace_seconds})
            self._serve_beside(call, self._serve_here(tool, admission.args, call, deadline, request.details))
            return None
        if background:
            return await self._start_job(tool, admission.args, call, deadline, request.details)
        job = (self.jobs.new(call.id, tool.name, _command_of(admission.args), background=False)
               if tool.keeps_output else None)

        async def forward_progress(message: dict) -> None:
            if call.progress:
                await self.client.send({**message, "op": "progress", "id": call.id})

        # A call still running a moment after its worker took it (its deadline starts then) tells the
        # client when it must be answered; past that the client takes the supervisor for stopped (a
        # quick call costs no message for it).
        notice: asyncio.TimerHandle | None = None

        def taken() -> None:
            nonlocal notice
            if self.started_notices:
                started = {"op": "started", "id": call.id,
                           "answer_by": deadline.at + state.config.limits.worker_grace_seconds}
                notice = asyncio.get_running_loop().call_later(STARTED_NOTICE_SECONDS, self._notify, started)

        reply: dict[str, Any] = _error(ErrorCode.TOOL_FAILED, f"{tool.name} did not complete")
        try:
            reply = await self.running_pool.run({"id": call.id, "tool": tool.name, "args": admission.args,
                                                 "progress": call.progress, "approved": request.details,
                                                 "stream": "end" if job is not None else None,
                                                 **({"trace": call.trace} if call.trace else {})},
                                                deadline, call.cancelled, forward_progress,
                                                self.jobs.on_event(job) if job is not None else None, taken,
                                                starts_processes=tool.starts_processes or job is not None)
        finally:
            if notice is not None:
                notice.cancel()
            if job is not None and not job.ended.is_set():
                self.jobs.finish(job, reply)  # also when the call is torn down: the job is not left running
        reply = {k: v for k, v in reply.items() if k in ("ok", "value", "error")}
        if job is not None and reply.get("ok") and isinstance(reply.get("value"), dict):
            reply["value"] = {**reply["value"], "job_id": job.id, "output_retained_bytes": job.ring.retained}
        return reply

    async def _serve_here(self, tool: Tool, args: Any, call: PendingCall, deadline: Deadline,
                          approved: dict[str, Any]) -> dict[str, Any]:
        """Run a tool the supervisor serves itself (the job tools) on this loop; cancel or deadline end it."""
        state = self.opened
        limits = state.config.limits
        ctx = ToolContext(call_id=call.id, workspace=state.view.workspace, deadline=deadline, cancel=CancelToken(),
                          limits=OutputLimits(limits.max_output_bytes, limits.read_max_bytes), session=state.view,
                          approved=approved, jobs=self.jobs)
        running = asyncio.get_running_loop().create_task(tool.execute(args, ctx))
        cancel_wait = asyncio.get_running_loop().create_task(call.cancelled.wait())
        try:
            await asyncio.wait({running, cancel_wait}, timeout=deadline.remaining(),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancel_wait.cancel()
        if not running.done():
            running.cancel()
            if call.cancelled.is_set():
                return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled")
            return _error(ErrorCode.TIMEOUT, f"{tool.name} did not finish before its deadline")
        try:
            value = running.result()
        except PeonError as exc:
            return {"ok": False, "error": exc.to_dict()}
        return {"ok": True, "value": value}

    async def _start_job(self, tool: Tool, args: Mapping[str, Any], call: PendingCall, deadline: Deadline,
                         approved: dict[str, Any]) -> dict[str, Any]:
        """Start a background job and answer once its command has started (after ``yield_seconds``
        more, or at its end if that comes first), with its ``job_id``; the job goes on in its own task."""
        jobs = self.jobs
        job = jobs.new(call.id, tool.name, _command_of(args), background=True)
        job.awaiting_reply = True  # until this call is answered: a job that ends by then answers it
        message = {"id": job.id, "tool": tool.name, "args": args, "progress": False, "approved": approved,
                   "stream": "live", **({"trace": call.trace} if call.trace else {})}

        async def no_progress(message: dict) -> None:
            return None

        def ended(job: Job) -> None:
            if job.spawned.is_set():
                self._audit_job("job_ended", job)

        jobs.start_background(job, lambda: self.running_pool.run(message, deadline, job.cancelled, no_progress,
                                                         jobs.on_event(job)), ended)
        try:
            await _first(job.spawned.wait(), job.ended.wait(), call.cancelled.wait())
            if job.spawned.is_set():
                self._audit_job("job_started", job)
            if call.cancelled.is_set() and not job.ended.is_set():
                await jobs.stop(job.id)
            wait = float(args.get("yield_seconds") or 0.0)
            if wait > 0 and not job.ended.is_set():
                await _first(job.ended.wait(), call.cancelled.wait(), asyncio.sleep(min(wait, deadline.remaining())))
        finally:
            reply, job.reply, job.awaiting_reply = job.reply, None, False
        if job.ended.is_set() and reply is not None:
            if not reply.get("ok"):
                return {k: v for k, v in reply.items() if k in ("ok", "error")}
            value = reply.get("value") or {}
            return {"ok": True, "value": {**value, "job_id": job.id, "background": True, "state": job.state,
                                          "output_retained_bytes": job.ring.retained}}
        return {"ok": True, "value": self._running_job_value(job, float(deadline.at - time.monotonic()))}

    def _running_job_value(self, job: Job, remaining: float) -> dict[str, Any]:
        limits = self.opened.config.limits
        capture = HeadTail(int(limits.max_output_bytes))
        capture.feed(job.ring.read(job.ring.start, job.ring.retained).data)
        text = capture.render(clean_terminal_text if self.jobs.clean_output else None)
        return {"job_id": job.id, "background": True, "state": job.state, "exit_code": None, "signal": None,
                "timed_out": False, "cancelled": False, "output": text.text, "output_bytes": job.ring.total,
                "output_kept_bytes": text.kept_bytes, "truncated": text.truncated or job.ring.start > 0,
                "output_invalid_utf8": text.invalid_utf8, "output_retained_bytes": job.ring.retained,
                "duration_ms": int((time.time() - job.started_at) * 1000), "limit_exceeded": None,
                "timeout_seconds": round(max(remaining, 0.0), 3)}

    def _audit_job(self, event: str, job: Job) -> None:
        state = self.opened
        info = {**self.jobs.info(job.id).to_dict(), "call_id": job.call_id}
        state.audit.record(job_entry(event=event, session_id=state.view.session_id, job=info, now=time.time()))

    def _notify(self, message: dict) -> None:
        async def send() -> None:
            try:
                await self.client.send(message)
            except OSError:
                pass

        self._detach(send())

    async def _shutdown(self, reader: asyncio.Future, executor: asyncio.Future) -> None:
        reader.cancel()
        for call in list(self.calls.values()):
            if not call.started:
                call.cancelled.set()
                why = f" (the supervisor received {self.stopped_by.name})" if self.stopped_by else ""
                await self._reply(call, _error(ErrorCode.SESSION_CLOSED,
                                               f"the session closed before {call.tool} started{why}"))
            else:
                call.cancelled.set()  # the running call gets TERM, grace, KILL like any cancel
        running = [call for call in self.calls.values() if call.started]
        async with asyncio.TaskGroup() as group:  # its cancel runs TERM → grace → KILL, bounded by the pool
            for call in running:
                group.create_task(call.finished.wait())
            group.create_task(self.jobs.close())  # background jobs too, through the same cancel path
        executor.cancel()


def _command_of(args: Any) -> str | None:
    command = args.get("command") if isinstance(args, dict) else None
    return command if isinstance(command, str) else None


async def _first(*waits: Any) -> None:
    """Return when the first of ``waits`` (coroutines) finishes; the others are cancelled."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


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
    from peon.supervisor.pool import WorkerPool

    pool = WorkerPool(lambda: Forker.spawn(state.worker_session(), state.registry.import_paths()),
                      state.containment, state.config.limits.worker_grace_seconds,
                      max_calls=int(state.config.limits.worker_max_calls), on_worker=on_worker)
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
