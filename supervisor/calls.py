"""One call's life in the supervisor: admitted, its approval settled, its decision audited, run, and
answered exactly once.

Promise: :meth:`CallServer.serve` takes one call through the pure pipeline
(:func:`peon.approval.admission.admit`: validated, risk-assessed, judged by the policy), settles its
approval (:class:`peon.supervisor.approval.gate.ApprovalGate`: the policy's verdict, a grant or the
approver), writes the decision to the audit log and only then runs it — a call is never handed to a
worker before its decision line is in the log; if that line cannot be written it is answered
``audit_failed`` and never runs. It then runs in a worker of the pool; as a job of its own when its tool
keeps its output, or started as a background job (:class:`peon.supervisor.jobs.JobTable`, which owns
every job, checked against ``jobs.max_running`` before anyone is asked); or, for the job tools
(``Tool.served_by_supervisor``), here on the supervisor's loop from a task of their own, so that a
``job_output`` that waits never holds whatever is served next, ended by a cancel or their deadline. A
call still running :data:`STARTED_NOTICE_SECONDS` after its worker took it is announced to a client that
watches running calls (``started``, with the time by which it must be answered).

Every reply of the session goes through :meth:`CallServer.answer` — the queue's refusals too — so
each call gets exactly one ``result`` message, its ``result`` line written to the audit log just
before. The supervisor owns and decides every call; a worker that runs one may crash, and the call
is answered all the same, with a stable error code.

It serves the call it is given and knows nothing of a queue: whoever calls :meth:`CallServer.serve`
decides what runs when (:mod:`peon.supervisor.service`: one at a time, in arrival order).
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
from peon.core.tool import OutputLimits, Tool, ToolContext

from peon.supervisor import egress
from peon.supervisor.approval.audit import audit_entry, decision_entry
from peon.supervisor.approval.facts import gather
from peon.supervisor.jobs import JobTable
from peon.supervisor.session_state import SessionState
from peon.supervisor.tasks import HeldTasks, first

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


@dataclass
class CallServer:
    """Serves the session's calls one by one as it is given them, and answers each.

    ``send`` writes a message to the client; ``notify_started`` sends one without waiting (None: the
    client does not watch running calls); ``on_answered`` is told of each call as it is answered,
    before its ``result`` is sent."""

    state: SessionState
    pool: WorkerPool
    jobs: JobTable
    send: Callable[[dict[str, Any]], Awaitable[None]]
    notify_started: Callable[[dict[str, Any]], None] | None
    on_answered: Callable[[PendingCall], None]
    _beside: HeldTasks = field(default_factory=HeldTasks, init=False)  # job-tool calls, answered from their own task

    async def serve(self, call: PendingCall) -> None:
        """Run ``call`` and answer it; a job-tool call is answered later, from a task of its own."""
        call.started, call.started_at = True, time.monotonic()
        await self._answer_from(call, self._run(call))

    async def answer(self, call: PendingCall, reply: dict[str, Any]) -> None:
        """The one reply to ``call``: its ``result`` line in the audit log, then its ``result`` message."""
        reply = egress.name_refusals(reply, call.started_at)  # the egress allowlist's refusals during the call
        self.on_answered(call)
        call.finished.set()
        state = self.state
        try:  # recorded before the client sees the result; a failure here must not lose the reply
            state.audit.record(audit_entry(
                session_id=state.view.session_id, call_id=call.id, tool=call.tool, args=call.args,
                request=call.request, decision=call.decision, reply=reply, received_at=call.received_at,
                duration_ms=int((time.monotonic() - call.started_at) * 1000)))
        except Exception:
            traceback.print_exc(file=sys.stderr)
        try:
            await self.send({**reply, "op": "result", "id": call.id})
        except OSError:
            pass  # the client is gone; shutdown follows from its EOF

    async def _answer_from(self, call: PendingCall, running: Awaitable[dict[str, Any] | None]) -> None:
        try:
            reply = await running
        except Exception as exc:  # a bug here must fail one call, not the session
            traceback.print_exc(file=sys.stderr)
            reply = _error(ErrorCode.TOOL_FAILED, f"internal error while running {call.tool}: {exc}")
        if reply is not None:  # None: it goes on beside, which answers it
            await self.answer(call, reply)

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
        if not tool.served_by_supervisor and not self.pool.started:
            # A call made as the session starts: its time starts with its worker.
            await first(self.pool.wait_started(), call.cancelled.wait())
            if call.cancelled.is_set():
                return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled before it started")
        deadline = Deadline.after(admission.timeout_seconds)
        if tool.served_by_supervisor:
            if self.notify_started is not None:  # the client bounds it by its deadline, not by the queue's bound
                self.notify_started(self._started_notice(call, deadline))
            self._beside.start(self._answer_from(call, self._serve_here(tool, admission.args, call, deadline,
                                                                        request.details)))
            return None
        record = {"id": call.id, "tool": tool.name, "args": admission.args, "progress": call.progress,
                  "approved": request.details, **({"trace": call.trace} if call.trace else {})}
        if background:
            return await self.jobs.start_background(record, deadline, call.cancelled)
        return await self._run_in_worker(tool, record, call, deadline)

    def _started_notice(self, call: PendingCall, deadline: Deadline) -> dict[str, Any]:
        return {"op": "started", "id": call.id,
                "answer_by": deadline.at + self.state.config.limits.worker_grace_seconds}

    async def _run_in_worker(self, tool: Tool, record: dict[str, Any], call: PendingCall,
                             deadline: Deadline) -> dict[str, Any]:
        """Run the call in a worker of the pool — as a job of its own when its tool keeps its output —
        its progress forwarded to the client when it asked for it."""

        async def forward_progress(message: dict[str, Any]) -> None:
            if call.progress:
                await self.send({**message, "op": "progress", "id": call.id})

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
            if tool.keeps_output:
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
