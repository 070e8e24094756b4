"""One call's life in the supervisor: admitted, its approval settled, its turn to run taken, its decision
audited, run, and answered exactly once.

Promise: :meth:`CallServer.serve` (or :meth:`CallServer.start`, which does the same beside the calls
already started) takes one call through the pure pipeline (:func:`peon.approval.admission.admit`:
validated, risk-assessed, judged by the policy), settles its approval
(:class:`peon.supervisor.approval.gate.ApprovalGate`: the policy's verdict, a grant or the approver —
questions one at a time, in the order calls reach it), takes its turns to run, writes the decision to
the audit log and only then runs it — a call is never handed to a worker before its decision line is in
the log (durable, with ``audit.fsync``: :meth:`~peon.supervisor.approval.audit.AuditLog.commit_grouped`,
one ``fdatasync`` for the lines written together); if that line cannot be written it is answered
``audit_failed`` and never runs. Everything before the approval line is synchronous, so calls started in
arrival order are asked in arrival order — the user's before-call hooks
(:mod:`peon.supervisor.hooks`) too: they are asked one call at a time, in arrival order, and narrow the
policy's verdict before it is settled (a hook's denial is decided ``by`` = ``hook``); after-call hooks add
their notes to the reply, and never lose it.

Its turns (:class:`~peon.supervisor.turns.Turns`, first come first served, a cancel ends the wait): a
slot of ``limits.max_parallel_calls``, held from the decision line to the answer, so at most that many
calls run at once, each in a worker of its own; and, first, for a tool that changes workspace files
without starting a process (declared risk ``filesystem``, ``starts_processes`` False: ``write``,
``edit``, ``apply_patch``), the session's one file-changing turn — such calls run one at a time, so
the second of two calls changing the same file sees the first's content (or fails ``stale``: their
checks of what was read and shown never race another call of the session). A call waiting for a turn,
or in the approval line, holds no slot: a question pending never holds a call that needs none.

A call of a tool that can change the workspace is checkpointed just before it runs (its time starts
after the checkpoint) and answered with what it changed (:mod:`peon.supervisor.checkpointing`).
It then runs in a worker of the pool; as a job of its own when its tool keeps its output, or started as
a background job (:class:`peon.supervisor.jobs.JobTable`, which owns every job, checked against
``jobs.max_running`` before anyone is asked, and again as it starts; with ``limits.yield_after_seconds``
a foreground job may be answered early and run on as one, unless its caller asked for the whole result,
``auto_yield`` false); or, for the job tools
(``Tool.served_by_supervisor``), here on the supervisor's loop from a task of their own, without a slot,
so that a ``job_output`` that waits never holds whatever is served next, ended by a cancel or their
deadline. A call still running :data:`STARTED_NOTICE_SECONDS` after its worker took it is announced to a
client that watches running calls (``started``, with the time by which it must be answered).

Every reply of the session goes through :meth:`CallServer.answer` — the queue's refusals too — so
each call gets exactly one ``result`` message, its ``result`` line written to the audit log just
before. The supervisor owns and decides every call; a worker that runs one may crash, and the call
is answered all the same, with a stable error code.

It serves the calls it is given and knows nothing of a queue: whoever calls :meth:`CallServer.serve`
or :meth:`CallServer.start` decides what is admitted when (:mod:`peon.supervisor.service`).
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from peon.approval.admission import admit
from peon.approval.policy import ApprovalRequest, Decision
from peon.core.cancel import CancelToken, Deadline
from peon.core.errors import ErrorCode, PeonError, ToolError, error_reply as _error
from peon.core.tool import OutputLimits, Tool, ToolContext, ToolRisk

from peon.supervisor import egress
from peon.supervisor.approval.audit import audit_entry, decision_entry
from peon.supervisor.approval.facts import gather
from peon.supervisor.checkpointing import Checkpointing
from peon.supervisor.jobs import JobTable
from peon.supervisor.redaction import deliberate, redact_message, redact_reply
from peon.supervisor.session_state import SessionState
from peon.supervisor.tasks import HeldTasks, first
from peon.supervisor.turns import Turn, Turns

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
    auto_yield: bool = True  # may be answered early by limits.yield_after_seconds (not for an MCP task)


@dataclass
class CallServer:
    """Serves the session's calls as it is given them, at most ``max_parallel`` running at once, and
    answers each.

    ``send`` writes a message to the client; ``notify_started`` sends one without waiting (None: the
    client does not watch running calls); ``on_answered`` is told of each call as it is answered,
    before its ``result`` is sent."""

    state: SessionState
    pool: WorkerPool
    jobs: JobTable
    send: Callable[[dict[str, Any]], Awaitable[None]]
    notify_started: Callable[[dict[str, Any]], None] | None
    on_answered: Callable[[PendingCall], None]
    max_parallel: int = 1
    checkpoints: Checkpointing = field(default_factory=lambda: Checkpointing(None))  # before and after each call
    _beside: HeldTasks = field(default_factory=HeldTasks, init=False)  # job-tool calls, answered from their own task
    _started: HeldTasks = field(default_factory=HeldTasks, init=False)  # calls served beside the others
    _slots: Turns = field(init=False)  # a call runs while it holds one
    _file_changes: Turns = field(init=False)  # held by the one call that changes files without a process
    _hooks_line: Turns = field(init=False)  # one call's before-hooks at a time, in arrival order

    def __post_init__(self) -> None:
        self._slots = Turns(self.max_parallel)
        self._file_changes = Turns(1)
        self._hooks_line = Turns(1)

    async def serve(self, call: PendingCall) -> None:
        """Run ``call`` and answer it; a job-tool call is answered later, from a task of its own."""
        call.started, call.started_at = True, time.monotonic()
        await self._answer_from(call, self._run(call))

    def start(self, call: PendingCall) -> None:
        """:meth:`serve` ``call`` from a task of its own, beside the calls already started; it is
        admitted (up to its place in the approval line) before any call started after it."""
        call.started, call.started_at = True, time.monotonic()
        self._started.start(self._answer_from(call, self._run(call)))

    async def wait_all(self) -> None:
        """Return once every call started here (and every job-tool call) has been answered."""
        await self._started.wait_all()
        await self._beside.wait_all()

    @property
    def running(self) -> int:
        """Calls holding a slot: running, or about to (their decision line being written)."""
        return self._slots.held

    async def answer(self, call: PendingCall, reply: dict[str, Any]) -> None:
        """The one reply to ``call``: its ``result`` line in the audit log, then its ``result`` message."""
        reply = egress.name_refusals(reply, call.started_at)  # the egress allowlist's refusals during the call
        reply = redact_reply(self.state.view, reply, as_is=deliberate(call.tool, call.request, call.decision))
        self.on_answered(call)
        state = self.state
        try:
            try:  # recorded before the client sees the result; a failure here must not lose the reply
                await state.audit.record_grouped(audit_entry(
                    session_id=state.view.session_id, call_id=call.id, tool=call.tool, args=call.args,
                    request=call.request, decision=call.decision, reply=reply, received_at=call.received_at,
                    duration_ms=int((time.monotonic() - call.started_at) * 1000)))
            except Exception:
                traceback.print_exc(file=sys.stderr)
            try:
                await self.send({**reply, "op": "result", "id": call.id})
            except OSError:
                pass  # the client is gone; shutdown follows from its EOF
        finally:
            call.finished.set()

    async def _answer_from(self, call: PendingCall, running: Awaitable[dict[str, Any] | None]) -> None:
        try:
            reply = await running
        except Exception as exc:  # a bug here must fail one call, not the session
            traceback.print_exc(file=sys.stderr)
            reply = _error(ErrorCode.TOOL_FAILED, f"internal error while running {call.tool}: {exc}")
        if reply is not None:  # None: it goes on beside, which answers it
            await self.answer(call, await self._after_hooks(call, reply))

    async def _after_hooks(self, call: PendingCall, reply: dict[str, Any]) -> dict[str, Any]:
        """``reply`` with the notes of the after-hooks a call that ran wakes; their failure never loses it."""
        hooks = self.state.hooks
        if hooks is None or call.request is None or call.decision is None or not call.decision.allowed:
            return reply
        try:
            notes = await hooks.after_call(call.request, reply)
        except Exception:
            traceback.print_exc(file=sys.stderr)
            return reply
        return {**reply, "notes": [*reply.get("notes", ()), *notes]} if notes else reply

    async def _run(self, call: PendingCall) -> dict[str, Any] | None:
        state = self.state
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
        hooked = None
        if state.hooks is not None and state.hooks.wanted("before_call", tool.name):
            # Before the verdict is settled: a hook may narrow it, never widen it. In the hooks' own line,
            # left only once this call is in the approval line (settle joins it before its first await),
            # so calls are still put to the approver in the order they arrived.
            turn = self._hooks_line.join()
            try:
                if not await turn.wait(call.cancelled):
                    return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled before it started")
                verdict, hooked = await state.hooks.before_call(request, verdict)
            finally:
                turn.release()
            if call.cancelled.is_set():
                return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled before it started")
        if hooked is not None and verdict.action == "deny":
            decision = call.decision = Decision(False, "hook", verdict.rule)
        else:
            # A hook's ask is put to the approver: a session grant does not answer it.
            decision = call.decision = await state.approval.settle(request, verdict, call.cancelled,
                                                                   grants=hooked is None)
        if call.cancelled.is_set():
            return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled before it started")
        if not decision.allowed:
            return _error(
                ErrorCode.DENIED,
                f"{tool.name} ({request.risk.value} risk: {request.risk_reason}) "
                f"was denied by {decision.by}: {decision.rule}",
                {"risk": request.risk.value, "by": decision.by, "rule": decision.rule},
            )
        if tool.served_by_supervisor:  # beside the slots: a job_output that waits holds none
            refused = await self._audit_decision(call, tool)
            if refused is not None:
                return refused
            deadline = Deadline.after(admission.timeout_seconds)
            if self.notify_started is not None:  # the client bounds it by its deadline, not by the queue's bound
                self.notify_started(self._started_notice(call, deadline))
            self._beside.start(self._answer_from(call, self._serve_here(tool, admission.args, call, deadline,
                                                                        request.details)))
            return None
        turns = await self._take_turns(tool, call)
        if turns is None:
            return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled before it started")
        try:
            refused = await self._audit_decision(call, tool)
            if refused is not None:
                return refused
            if not self.pool.started:
                # A call made as the session starts: its time starts with its worker.
                await first(self.pool.wait_started(), call.cancelled.wait())
                if call.cancelled.is_set():
                    return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled before it started")
            record = {"id": call.id, "tool": tool.name, "args": admission.args, "progress": call.progress,
                      "approved": request.details, **({"trace": call.trace} if call.trace else {})}
            if background:
                try:  # again, now: calls started beside this one may have started jobs meanwhile
                    self.jobs.check_capacity()
                except ToolError as exc:
                    return {"ok": False, "error": exc.to_dict()}

            def running() -> Awaitable[dict[str, Any]]:  # its time starts after its checkpoint
                deadline = Deadline.after(admission.timeout_seconds)
                return (self.jobs.start_background(record, deadline, call.cancelled) if background
                        else self._run_in_worker(tool, record, call, deadline))

            return await self.checkpoints.around(tool, call.id, running)
        finally:
            for turn in turns:
                turn.release()

    async def _take_turns(self, tool: Tool, call: PendingCall) -> list[Turn] | None:
        """The turns ``call`` runs with (see the module's promise), held once this returns; None when it
        was cancelled first (then it holds none)."""
        turns: list[Turn] = []
        lines = [self._file_changes] if changes_files(tool) else []
        for line in (*lines, self._slots):
            turn = line.join()
            turns.append(turn)
            if not await turn.wait(call.cancelled):
                for held in turns:
                    held.release()
                return None
        return turns

    async def _audit_decision(self, call: PendingCall, tool: Tool) -> dict[str, Any] | None:
        """Write the call's decision line (durable with ``audit.fsync``) before it is acted on; the
        refusal to answer it with when the line cannot be written, else None."""
        state = self.state
        assert call.request is not None and call.decision is not None, "an approved call has both"
        try:  # audit before acting: no line, no call
            await state.audit.commit_grouped(decision_entry(
                session_id=state.view.session_id, call_id=call.id, tool=call.tool, args=call.args,
                request=call.request, decision=call.decision, received_at=call.received_at))
        except (OSError, ValueError) as exc:
            return _error(ErrorCode.AUDIT_FAILED,
                          f"{tool.name} was not run: its decision could not be written to the audit log "
                          f"{state.audit.path} ({exc}); Peon runs no call it cannot audit",
                          {"audit_log": str(state.audit.path)})
        return None

    def _started_notice(self, call: PendingCall, deadline: Deadline) -> dict[str, Any]:
        return {"op": "started", "id": call.id,
                "answer_by": deadline.at + self.state.config.limits.worker_grace_seconds}

    async def _run_in_worker(self, tool: Tool, record: dict[str, Any], call: PendingCall,
                             deadline: Deadline) -> dict[str, Any]:
        """Run the call in a worker of the pool — as a job of its own when its tool keeps its output —
        its progress forwarded to the client when it asked for it."""

        async def forward_progress(message: dict[str, Any]) -> None:
            if call.progress:
                await self.send({**redact_message(self.state.view, message), "op": "progress", "id": call.id})

        # A call still running a moment after its worker took it (its deadline starts then) tells the
        # client when it must be answered; past that the client takes the supervisor for stopped (a
        # quick call costs no message for it).
        notice: asyncio.TimerHandle | None = None

        def taken() -> None:
            nonlocal notice
            if self.notify_started is not None:
                notice = asyncio.get_running_loop().call_later(STARTED_NOTICE_SECONDS, self.notify_started,
                                                               self._started_notice(call, deadline))

        try:
            after = self.state.config.limits.yield_after_seconds  # auto-yield: answered early, runs on as a job
            if tool.keeps_output and after > 0 and call.auto_yield:
                reply = await self.jobs.run_yielding(record, deadline, call.cancelled, forward_progress, taken, after)
            elif tool.keeps_output:
                reply = await self.jobs.run_foreground(record, deadline, call.cancelled, forward_progress, taken)
            else:
                reply = await self.pool.run(record, deadline, call.cancelled, forward_progress, None, taken,
                                            starts_processes=tool.starts_processes)
        finally:
            if notice is not None:
                notice.cancel()
        return {k: v for k, v in reply.items() if k in ("ok", "value", "error")}

    async def _serve_here(self, tool: Tool, args: Any, call: PendingCall, deadline: Deadline,
                          approved: dict[str, Any]) -> dict[str, Any]:
        """Run a tool the supervisor serves itself (the job tools) on this loop; cancel or deadline end it."""
        state = self.state
        limits = state.config.limits
        ctx = ToolContext(call_id=call.id, workspace=state.view.workspace, deadline=deadline, cancel=CancelToken(),
                          limits=OutputLimits(limits.max_output_bytes, limits.read_max_bytes), session=state.view,
                          approved=approved, jobs=self.jobs, checkpoints=self.checkpoints)
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


def changes_files(tool: Tool) -> bool:
    """Whether calls of ``tool`` take the session's file-changing turn: it changes workspace files
    (declared risk ``filesystem``) without starting a process, so its own checks (``stale``, what was
    approved) are the only ones between two calls of the session that change the same file."""
    return tool.risk == ToolRisk.FILESYSTEM and not tool.starts_processes and not tool.served_by_supervisor
