"""The calls of ``peon serve``: HTTP requests on one side, the workspace's :class:`peon.Session` on the other.

Promises:

* every ``tools/call`` is submitted to the session when its request arrives and answered on that
  request's stream when it finishes; progress and (2025-11-25) ``elicitation/create`` requests go to
  the same stream; a stream holds at most :data:`MAX_QUEUED_NOTICES` undelivered progress messages
  (the oldest are dropped, never the final answer or a question);
* closing a call's stream before its answer cancels the call in the supervisor (a queued call never
  starts, a running one gets TERM → 2 s → KILL) and withdraws its approval question; so does
  ``notifications/cancelled`` (2025-11-25); a cancelled request gets no answer;
* an approval question reaches the caller the way the request's revision defines: an
  ``elicitation/create`` request on the call's stream (2025-11-25, when the client declared form
  elicitation) or an ``input_required`` answer whose signed ``requestState`` the retry echoes
  (2026-07-28), or for a task the task's input request, answered by ``tasks/update``; no answer within
  ``limits.approval_timeout_seconds`` denies;
* MCP tasks are served for 2026-07-28 (:mod:`peon.mcp.tasks`; 2025-11-25's need a stream to ask on
  and to wait on, which a task's request no longer has, so they are not advertised): a command's call
  from a request declaring the extension (and carrying no idempotency key) is answered at once with its
  task; ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` follow, answer and cancel it. The stateless
  requests own their tasks as one owner, as they own their jobs;
* a call carrying ``peon/idempotencyKey`` runs at most once per key within the window (see
  :mod:`peon.serve.idempotency`);
* prompts, resources and completion requests are planned by :func:`peon.mcp.features.plan`; one that
  reads something is a call of the tool that serves it, routed like a ``tools/call`` (approved, audited,
  cancelled with its stream);
* once a 2025-11-25 session set a log level, what Peon does to its calls (approvals, refusals, kills,
  limits; :mod:`peon.mcp.logs`) is sent as ``notifications/message`` on the stream of the call concerned;
* a job belongs to the MCP session whose call started it (a 2025-11-25 session, or the stateless
  2026-07-28 requests as one owner): ``job_output``, ``job_stop``, ``job_list``, ``job://`` resources and
  their completion see only the caller's jobs (another's is ``unknown_job``, as if it did not exist),
  and ending or expiring the session stops its running jobs; the session's own later requests, on any
  HTTP connection, keep them. Those stops are the server's own decision: approved by it (and audited as
  such), never put to a client that is gone, and only of the jobs that were started in the background;
* session callbacks arrive on session threads and are moved onto the event loop; nothing here blocks
  the loop on the session (submits and restarts run in worker threads).

The protocol's decisions (what a message means, how a result or a question is shaped) come from the
sans-I/O modules in :mod:`peon.mcp`, and the calls in flight are kept in the call book of
:mod:`peon.mcp.calls` (the one ``peon mcp`` keeps too); this module only routes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from peon.core.answers import NETWORK_QUESTION
from peon.core.errors import ErrorCode
from peon.mcp import protocol as p
from peon.mcp.calls import REGISTRATION_WAIT_SECONDS, Call, CallBook, Peer, approval_wait
from peon.client.result import ToolResult

from peon.serve import wire
from peon.mcp.tools import IDEMPOTENCY_KEY
from peon.serve.idempotency import Conflict, Follow, Full, IdempotencyStore, Replay, fingerprint, key_problem
from peon.serve.metrics import Metrics

MAX_QUEUED_NOTICES = 32
STATELESS_TASKS = object()  # the owner of the tasks of 2026-07-28 requests, which carry no session
REPLAY_META_KEY = "peon/idempotentReplay"
MAX_OWNED_JOBS = 8192  # job owners remembered (the supervisor keeps fewer job records than this)
STATELESS_OWNER = ""  # the owner of jobs started by 2026-07-28 requests, which carry no session
JOB_TOOLS = frozenset({"job_output", "job_stop", "job_write"})

log = logging.getLogger("peon.serve")


class Stream:
    """What one HTTP response carries: notifications as they come, then one final message (or none)."""

    def __init__(self) -> None:
        self._notices: collections.deque[tuple[dict[str, Any], bool]] = collections.deque()  # (message, droppable)
        self._changed = asyncio.Event()
        self.final: dict[str, Any] | None = None
        self.ended = False  # the final message (or the end without one) was decided
        self.sent_final = False
        self.closed = False  # the client went away first (the router was told)
        self.gone = False  # the client hung up (the writer is woken to notice)
        self.dropped = 0
        self.on_close: Callable[[], None] | None = None  # instead of cancelling a call (a follower's stream)

    def notify(self, message: dict[str, Any], *, droppable: bool) -> None:
        if self.ended or self.closed:
            return
        if droppable and sum(1 for _, d in self._notices if d) >= MAX_QUEUED_NOTICES:
            oldest = next(i for i, (_, d) in enumerate(self._notices) if d)
            del self._notices[oldest]  # progress only: a question is never dropped
            self.dropped += 1
        self._notices.append((message, droppable))
        self._changed.set()

    def finish(self, message: dict[str, Any] | None) -> None:
        """End the stream, with this last message (``None``: end without an answer)."""
        if self.ended:
            return
        self.ended = True
        self.final = message
        self._changed.set()

    def hang_up(self) -> None:
        """The client went away: wake the writer, whose next :meth:`next_chunk` raises."""
        self.gone = True
        self._changed.set()

    async def settle(self, seconds: float) -> dict[str, Any] | None:
        """The final message when it comes within ``seconds`` before any notification (the answer can then
        be plain JSON); ``None`` when the response must be a stream. ``ConnectionError`` on hang-up."""
        try:
            async with asyncio.timeout(seconds):
                while not (self._notices or self.ended or self.gone):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            return None
        if self.gone:
            raise ConnectionError("the client closed the stream")
        if self.ended and not self._notices and self.final is not None:
            self.sent_final = True
            return self.final
        return None

    async def next_chunk(self, keepalive_seconds: float) -> bytes | None:
        """The next bytes to send (a keep-alive comment when idle), or ``None`` after the final message;
        ``ConnectionError`` once the client hung up."""
        while True:
            if self.gone:
                raise ConnectionError("the client closed the stream")
            if self._notices:
                return wire.sse_event(self._notices.popleft()[0])
            if self.ended:
                if self.final is None or self.sent_final:
                    return None
                self.sent_final = True
                return wire.sse_event(self.final)
            self._changed.clear()
            try:
                async with asyncio.timeout(keepalive_seconds):
                    await self._changed.wait()
            except TimeoutError:
                return wire.KEEPALIVE


@dataclass(eq=False)
class McpSession(Peer):
    """One 2025-11-25 session (``Mcp-Session-Id``): its negotiated connection, and (as a :class:`Peer`) its
    calls by request id and its open questions."""

    id: str
    connection: p.Connection
    last_seen: float = field(default_factory=time.monotonic)


@dataclass(kw_only=True, eq=False)
class RoutedCall(Call):
    """A call and the HTTP response stream that carries what it says."""

    stream: Stream | None = None  # None while an input_required answer awaits its retry
    idempotency_key: str | None = None
    submitted_at: float = field(default_factory=time.monotonic)

    @property
    def mcp_session(self) -> McpSession | None:
        return self.peer if isinstance(self.peer, McpSession) else None


@dataclass(frozen=True)
class Answer:
    """An immediate answer to a ``tools/call`` that runs nothing (an error, a replay)."""

    message: dict[str, Any]


class CallRouter:
    def __init__(self, session: Any, identity: p.ServerIdentity, metrics: Metrics, *,
                 loop: asyncio.AbstractEventLoop, idempotency_window: float, idempotency_entries: int,
                 telemetry: Any = None):
        self.session = session
        self.identity = identity
        self.metrics = metrics
        self.loop = loop
        self.book: CallBook[RoutedCall] = CallBook(identity, command="peon serve", telemetry=telemetry,
                                                   structured_approvals=True)
        self.book.approval_wait = approval_wait(session.config.config.limits)
        self.idempotency: IdempotencyStore[ToolResult] = IdempotencyStore(
            idempotency_window, idempotency_entries, time.monotonic)
        self.catalog = p.Catalog.of(session.info, session.tools())
        self.tasks = p.TaskBook(identity)
        self.job_owners: collections.OrderedDict[str, str] = collections.OrderedDict()
        self.background_jobs: set[str] = set()  # among job_owners: started in the background
        self._ending_jobs: set[str] = set()  # being stopped by the server: their session ended
        self._ending_lock = threading.Lock()  # the approver reads _ending_jobs on a session thread
        self._registered = asyncio.Condition()
        self.in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()

    # -- starting a call ----------------------------------------------------------------------------

    async def start(self, ev: p.StartCall, mcp_session: McpSession | None, meta: Any) -> Answer | Stream:
        """Run ``ev`` (or resume the call it retries); the stream carries its answer."""
        refused = self.book.in_use(mcp_session, ev.id)
        if refused is not None:
            return Answer(refused)
        if ev.request_state is not None:
            return self._resume(ev)
        key = meta.get(IDEMPOTENCY_KEY) if isinstance(meta, dict) else None
        if key is not None:
            problem = key_problem(key)
            if problem is not None:
                return Answer(p.error_response(ev.id, p.INVALID_PARAMS, f"Invalid params: {problem}"))
            claim = self.idempotency.claim(key, fingerprint(ev.name, ev.arguments))
            if isinstance(claim, Conflict):
                return Answer(p.error_response(ev.id, p.INVALID_PARAMS, f"Invalid params: {claim.message}"))
            if isinstance(claim, Full):
                return Answer(p.error_response(ev.id, p.INTERNAL_ERROR, claim.message))
            if isinstance(claim, Replay):
                self.metrics.replays.inc()
                return Answer(self._answer(ev.id, ev.version, claim.outcome, replay=True))
            if isinstance(claim, Follow):
                return self._follow(ev, claim.key)
        foreign = self._foreign_job(ev.name, ev.arguments, mcp_session)
        if foreign is not None:
            return Answer(self._answer(ev.id, ev.version, foreign))
        if ev.task_ttl is not None and key is None:
            return await self._start_task(ev, mcp_session)
        return await self._submit(RoutedCall.of_request(ev, mcp_session, stream=Stream(), idempotency_key=key))

    async def _start_task(self, ev: p.StartCall, mcp_session: McpSession | None) -> Answer:
        """Run ``ev`` as a task: answered now with the task's handle; the task gets the call's result."""
        call = RoutedCall.of_request(ev, mcp_session, stream=Stream())
        task = self.tasks.create(mcp_session if mcp_session is not None else STATELESS_TASKS, ev.version,
                                 ev.task_ttl or 0, call)
        if isinstance(task, str):
            return Answer(p.error_response(ev.id, p.INVALID_REQUEST, f"Invalid Request: {task}"))
        call.task, call.request_id = task, None
        created = self.tasks.created(ev.id, task)
        await self._submit(call)
        call.stream = None  # nobody waits on a request of its: the task is followed with tasks/get
        return Answer(created)

    def task_request(self, ev: p.TaskRequest, mcp_session: McpSession | None) -> dict[str, Any]:
        """A ``tasks/*`` request's answer; a cancel stops the task's call, an update answers its question."""
        owner = mcp_session if mcp_session is not None else STATELESS_TASKS
        action = self.tasks.request(owner, ev.id, ev.method, ev.params, ev.version)
        if action.cancel is not None:
            self.cancel(action.cancel.call, "the task was cancelled by the client")
        if action.responses is not None:
            self.book.answer_in_task(action.responses[0].call, action.responses[1])
        assert action.reply is not None, "2026-07-28 has no tasks/result to wait on"
        return action.reply

    async def feature(self, ev: p.Feature, mcp_session: McpSession | None) -> Answer | Stream:
        """A prompts, resources or completion request: answered at once, or by one tool call."""
        refused = self.book.in_use(mcp_session, ev.id)
        if refused is not None:
            return Answer(refused)
        planned = p.plan(ev.method, ev.params, self.catalog, ev.version)
        if isinstance(planned, p.Answer):
            return Answer(p.respond(ev.id, ev.version, planned.result, self.identity))
        if isinstance(planned, p.Refused):
            return Answer(p.error_response(ev.id, planned.code, planned.message, planned.data))
        foreign = self._foreign_job(planned.tool, planned.arguments, mcp_session)
        if foreign is not None:
            refused_step = p.failure(planned, foreign)
            return Answer(p.error_response(ev.id, refused_step.code, refused_step.message, refused_step.data))
        return await self._submit(RoutedCall.of_step(ev, planned, mcp_session, stream=Stream()))

    async def _submit(self, call: RoutedCall) -> Stream:
        stream = call.stream
        assert stream is not None
        mcp_session = call.mcp_session
        traced = self.book.tracing(call, mcp_session.id if mcp_session is not None else None)
        if call.task is None:  # a task's request was answered with its handle
            self.book.open(call)
        self._track(+1)
        await self.recover_session()
        progress = self.book.wants_progress(call)
        on_progress = (lambda update: self._soon(self._progress, call, update)) if progress else None
        try:
            handle = await asyncio.to_thread(self.session.submit, call.name, call.arguments,  # a task: never yielded
                                             on_progress=on_progress, auto_yield=call.task is None, **traced)
        except Exception as exc:  # a bug or a dead session must fail this call, not the server
            log.exception("submitting %s failed", call.name)
            failure = ToolResult.failure("", call.name, ErrorCode.SESSION_CLOSED,
                                         f"the call could not be submitted: {exc}")
            self._done(call, failure)
            return stream
        async with self._registered:
            self.book.submitted(call, handle)
            self._registered.notify_all()
        handle.add_done_callback(lambda result: self._soon(self._done, call, result))
        return stream

    def _follow(self, ev: p.StartCall, key: str) -> Stream:
        """A retry of a keyed call that is still running: answer it with that call's result."""
        stream = Stream()

        def deliver(result: ToolResult) -> None:
            self.metrics.replays.inc()
            stream.finish(self._answer(ev.id, ev.version, result, replay=True))

        self.idempotency.follow(key, deliver)
        stream.on_close = lambda: self.idempotency.unfollow(key, deliver)
        return stream

    def _resume(self, ev: p.StartCall) -> Answer | Stream:
        """The retry of a call answered with input_required (2026-07-28): its stream carries the call's
        answer, at once if the call has finished, else when it does."""
        resumed = self.book.resume(ev)
        if isinstance(resumed, dict):
            return Answer(resumed)
        resumed.stream = stream = Stream()
        if resumed.final is not None:
            stream.finish(self.book.answer(resumed, resumed.final))
        return stream

    async def recover_session(self) -> None:
        """If the supervisor died, start a fresh one for the same session before the next call. The
        calls pending on the dead one were answered ``supervisor_died``; none is ever re-run."""
        if self.book.closing or self.session.alive:
            return
        await asyncio.to_thread(self.book.recover, self.session, log.log, self._adopt_restarted)

    def _adopt_restarted(self) -> None:
        self.metrics.restarted()
        # The new supervisor discovered the skills again: prompts and skill resources follow it.
        self.catalog = p.Catalog.of(self.session.info, self.session.tools())

    # -- events from the session (moved onto the loop) ----------------------------------------------

    def _soon(self, fn: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is gone
            self.loop.call_soon_threadsafe(fn, *args)

    def _progress(self, call: RoutedCall, update: dict[str, Any]) -> None:
        message = self.book.progress(call, update)
        if message is not None and call.stream is not None:
            call.stream.notify(message, droppable=True)

    # -- jobs and their sessions --------------------------------------------------------------------

    @staticmethod
    def _owner(mcp_session: McpSession | None) -> str:
        return mcp_session.id if mcp_session is not None else STATELESS_OWNER

    def _foreign_job(self, tool: str, arguments: dict[str, Any], mcp_session: McpSession | None) -> ToolResult | None:
        """The ``unknown_job`` answer of a job tool call naming a job the caller's session did not start."""
        job_id = arguments.get("job_id") if tool in JOB_TOOLS and isinstance(arguments, dict) else None
        if not isinstance(job_id, str) or self.job_owners.get(job_id) == self._owner(mcp_session):
            return None
        return ToolResult.failure("", tool, ErrorCode.UNKNOWN_JOB, f"no job of this MCP session has the id "
                                  f"{job_id[:64]!r} (a job belongs to the session that started it)",
                                  {"job_id": job_id[:64]})

    def _claim_jobs(self, call: RoutedCall, result: ToolResult) -> ToolResult:
        """Remember which session a job belongs to; show a job list only the caller's jobs."""
        if not result.ok or result.value is None:
            return result
        owner = self._owner(call.mcp_session)
        job_id = result.value.get("job_id")
        if isinstance(job_id, str) and call.name not in JOB_TOOLS:
            self.job_owners[job_id] = owner
            self.job_owners.move_to_end(job_id)
            if result.value.get("background") is True:
                self.background_jobs.add(job_id)
            while len(self.job_owners) > MAX_OWNED_JOBS:
                forgotten, _ = self.job_owners.popitem(last=False)
                self.background_jobs.discard(forgotten)
        if call.name == "job_list":
            jobs = [job for job in result.value.get("jobs") or ()
                    if self.job_owners.get(str(job.get("job_id"))) == owner]
            value = {**result.value, "jobs": jobs, "running": sum(1 for job in jobs if job.get("state") == "running")}
            return ToolResult(result.call_id, result.tool, True, value=value)
        return result

    def _stop_jobs(self, owner: str) -> None:
        """Stop the jobs a session started (its end or expiry), from a worker thread like every submit; the
        stops are audited like any call (one of a job that already ended changes nothing)."""
        owned = [job_id for job_id, job_owner in self.job_owners.items() if job_owner == owner]
        running = [job_id for job_id in owned if job_id in self.background_jobs]  # a foreground call's has ended
        for job_id in owned:
            del self.job_owners[job_id]
            self.background_jobs.discard(job_id)
        if running:
            with self._ending_lock:
                self._ending_jobs.update(running)
            self.loop.run_in_executor(None, self._submit_stops, running)

    def _submit_stops(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            with contextlib.suppress(Exception):  # a closed session has stopped every job already
                self.session.submit("job_stop", {"job_id": job_id}).result()
            with self._ending_lock:
                self._ending_jobs.discard(job_id)

    def _own_stop(self, request: dict[str, Any]) -> bool:
        """Whether ``request`` asks about a ``job_stop`` this server submitted because the job's session ended."""
        if request.get("tool") != "job_stop":
            return False
        try:
            job_id = json.loads(str(request.get("canonical_input", "")))["job_id"]
        except (ValueError, TypeError, KeyError):
            return False
        with self._ending_lock:
            return isinstance(job_id, str) and job_id in self._ending_jobs

    def _log(self, call: RoutedCall, event: tuple[Any, dict[str, Any]] | None) -> None:
        """A log message about ``call``, on its stream, when its session asked for that level."""
        mcp_session = call.mcp_session
        if event is None or mcp_session is None or call.stream is None or call.cancelled:
            return
        message = mcp_session.connection.logs.message(event[0], event[1], time.monotonic())
        if message is not None:
            call.stream.notify(message, droppable=True)

    def _done(self, call: RoutedCall, result: ToolResult) -> None:
        result = self._claim_jobs(call, result)
        self._log(call, p.result_event(result))
        self._track(-1)
        self.metrics.record_result(result, time.monotonic() - call.submitted_at)
        if call.idempotency_key is not None:
            if result.error is not None and result.error.code == "busy":
                self.idempotency.forget(call.idempotency_key)  # it never started: a retry may run it
            self.idempotency.finish(call.idempotency_key, result)
        answer = self.book.finish(call, result)
        if call.task is not None:  # 2026-07-28: nothing waits for it but the task (no tasks/result, no notice)
            self.tasks.ended(call.task, p.call_result(result, call.version))
        if call.stream is not None:  # (none while its input_required answer awaits the retry)
            call.stream.finish(answer)

    def _track(self, delta: int) -> None:
        self.in_flight += delta
        self.metrics.queue_depth.set(self.in_flight)
        if self.in_flight:
            self.idle.clear()
        else:
            self.idle.set()

    def _answer(self, request_id: Any, version: str, result: ToolResult, *, replay: bool = False) -> dict[str, Any]:
        """The answer to a ``tools/call`` that ran no call of its own (a replay, a refusal)."""
        shaped = p.call_result(result, version)
        if replay:
            shaped["_meta"] = {**(shaped.get("_meta") or {}), REPLAY_META_KEY: True}
        return p.respond(request_id, version, shaped, self.identity)

    # -- cancellation -------------------------------------------------------------------------------

    def stream_closed(self, stream: Stream) -> None:
        """The client closed a response stream before its final message: cancel what it was waiting for."""
        stream.closed = True
        if stream.on_close is not None:
            stream.on_close()
            return
        for call in list(self.book.running.values()):
            if call.stream is stream:
                self.cancel(call, "the client closed the request's stream")

    def cancel_request(self, mcp_session: McpSession, request_id: Any) -> None:
        call = mcp_session.calls.get(request_id)
        if isinstance(call, RoutedCall):
            self.cancel(call, "the client cancelled the request")

    def cancel(self, call: RoutedCall, reason: str) -> None:
        notice = self.book.cancel(call, f"{reason} while the approval request was open")
        if notice is not None and call.stream is not None:
            call.stream.notify(notice, droppable=False)

    def end_mcp_session(self, mcp_session: McpSession, reason: str) -> None:
        for call in list(mcp_session.calls.values()):
            if isinstance(call, RoutedCall):
                self.cancel(call, reason)
        for approval in list(mcp_session.elicitations.values()):
            approval.resolve({"decision": "deny", "reason": reason})
        for task in self.tasks.forget(mcp_session):
            self.cancel(task.call, reason)
        self._stop_jobs(mcp_session.id)

    # -- approval -----------------------------------------------------------------------------------

    def approver(self, request: dict[str, Any]) -> dict[str, Any]:
        """The session's approver (runs on a session thread): ask the client through the call's request."""
        if self._own_stop(request):  # nobody to ask: the client that started the job is gone
            return {"decision": "allow_once", "reason": "the MCP session that started the job ended"}
        try:
            future = asyncio.run_coroutine_threadsafe(self._ask(request), self.loop)
        except RuntimeError:
            return {"decision": "deny", "reason": "the server is shutting down"}
        try:
            return future.result(self.book.approval_wait + REGISTRATION_WAIT_SECONDS + 5.0)
        except Exception as exc:  # the loop went away, or a bug: a question nobody can answer is a denial
            future.cancel()
            return {"decision": "deny", "reason": f"the question could not be asked ({type(exc).__name__})"}

    async def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        call_id = str(request.get("call_id"))
        if request.get("tool") == NETWORK_QUESTION:  # about a running command's connection, not a call
            call = self.book.network_carrier()
        else:
            async with self._registered:
                with contextlib.suppress(TimeoutError):  # the request can only follow the submit: wait a moment
                    async with asyncio.timeout(REGISTRATION_WAIT_SECONDS):
                        await self._registered.wait_for(lambda: self.book.registered(call_id))
            call = self.book.askable(call_id)
        if not isinstance(call, RoutedCall):
            return call
        answered: asyncio.Future[None] = self.loop.create_future()
        if call.task is not None:  # the question is the task's input request, answered by tasks/update
            approval, _ = self.book.ask_in_task(call, request, lambda: answered.set_result(None))
            self.tasks.asking(call.task, p.APPROVAL_KEY, {"method": "elicitation/create",
                                                          "params": approval.elicitation})
        else:
            approval, question = self.book.ask(call, request, lambda: answered.set_result(None))
            stream = call.stream
            assert stream is not None
            if approval.elicitation_id is None:  # the input_required answer ends the request: the retry brings one
                call.stream = None
                stream.finish(question)
            else:
                stream.notify(question, droppable=False)
        asked_at, asked_ns = time.monotonic(), time.time_ns()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.book.approval_wait):
                    await asyncio.shield(answered)
        finally:
            answer = self.book.answered(call, approval, asked_ns)
            if call.task is not None:
                self.tasks.resumed(call.task)
        self._log(call, p.approval_event(request, answer))
        self.metrics.approval_wait.observe(time.monotonic() - asked_at)
        self.metrics.approval(str(answer.get("decision")))
        return answer

    def client_reply(self, mcp_session: McpSession, ev: p.ClientReply) -> bool:
        """A response the client POSTed to one of our questions; ``False`` when nothing waited for it."""
        return self.book.reply(mcp_session, ev)

    # -- shutdown -----------------------------------------------------------------------------------

    async def close(self) -> None:
        """Deny every open question; the session's close answers every call (their streams then end)."""
        self.book.closing = True
        async with self._registered:
            self._registered.notify_all()
        self.book.deny_open_questions("the server is shutting down")
