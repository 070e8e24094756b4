"""``peon mcp``: the stdio MCP server around one :class:`peon.Session`.

Promises:

* the session starts in its own thread while the server already answers what does not need it —
  ``initialize``, ``server/discover``, ``ping``, protocol errors — with exactly the answers it gives
  later (none of them depends on the session); ``tools/list`` and ``tools/call`` wait for the session,
  and so does everything after them, so answers keep arrival order. What waits is bounded (1024
  requests, 64 MiB), and reading pauses inside a line longer than 1 MiB until the session's line bound
  is known. A session that cannot start answers every request that needs it with the reason;
* stdout carries one JSON-RPC message per line and nothing else: the real stdout is kept for the
  protocol and file descriptor 1 (and ``sys.stdout``) point at stderr while the server runs, so a
  stray ``print`` or a child process cannot corrupt the stream;
* a malformed line gets a JSON-RPC error and the server keeps serving, and so does a well-formed one
  that cannot be answered as asked (a string no UTF-8 stream can carry, an internal fault): no line from
  the client stops the server, the session or a running call;
* calls run concurrently (each ``tools/call`` is submitted at once and answered when it finishes, out
  of order, under its own id), up to ``limits.max_parallel_calls`` at once in the session;
* prompts, resources and completion requests are planned by :func:`peon.mcp.features.plan`; one that
  reads something runs as a call of the tool that serves it (``read_skill``, ``job_output``, ``read``,
  ``job_list``), so it is approved and audited like that tool's calls and can be cancelled like one;
* ``resources/subscribe`` to a job's output follows the job with ``job_output`` calls that wait for new
  output (no polling interval) and sends ``notifications/resources/updated`` when output arrives and when
  the job ends; a subscription ends with ``resources/unsubscribe``, the job's end or the server's;
* once the client set a level (``logging/setLevel``), approvals it answered, calls the session refused,
  killed or limited, and supervisor restarts are sent as ``notifications/message`` (rate-limited;
  Peon's facts only, never output or file content);
* a supervisor that died is replaced before the next call; the new one discovers the skills again, and
  when that changes the prompts, ``notifications/prompts/list_changed`` goes to a handshake-era client
  and on every 2026-07-28 ``subscriptions/listen`` stream that asked for ``promptsListChanged``;
* MCP tasks (:mod:`peon.mcp.tasks`): a ``tools/call`` that becomes a task (2025-11-25's ``params.task``;
  2026-07-28, a command's call from a client declaring the tasks extension) is answered at once with the
  task's handle and runs as any call; ``tasks/get`` follows it, ``tasks/result`` (2025-11-25) or the
  completed task (2026-07-28) carries its result, ``tasks/cancel`` cancels it like ``notifications/cancelled``
  cancels a call. Its approval question is asked by ``elicitation/create`` tagged with the task
  (2025-11-25) or is the task's input request, answered by ``tasks/update`` (2026-07-28); meanwhile the task
  is ``input_required``. 2025-11-25 clients get ``notifications/tasks/status`` at each change;
* ``notifications/cancelled`` cancels the call in the supervisor (a queued call never starts, a running
  one gets TERM → 2 s → KILL) and the cancelled request gets no response;
* when stdin closes, or on SIGTERM / SIGINT / SIGHUP, the session is closed — every call is cancelled
  and every process it started is gone — before the server exits. Requests still waiting for the session
  when stdin closes are answered first (a ``tools/list`` gets its list); a ``tools/call`` among them is
  cancelled like every other call, so it never starts and gets no response.

The protocol decisions live in the sans-I/O modules gathered by :mod:`peon.mcp.protocol`, and the calls in
flight in :mod:`peon.mcp.calls` (the book ``peon serve`` keeps too); this module only moves bytes and threads.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from peon import otel
from peon.core.answers import NETWORK_QUESTION
from peon.core.errors import PeonError
from peon.core.framing import LineDecoder, Oversize, encode
from peon.client.result import ToolResult
from peon.core.threads import helper_thread

from peon.mcp import protocol as p
from peon.mcp.calls import REGISTRATION_WAIT_SECONDS, Call, CallBook, Peer, approval_wait

DEFAULT_MAX_LINE = (16 << 20) + (1 << 20)  # the line bound until the session's limits are known
READ_CHUNK = 1 << 16
# limits.max_input_bytes + 1 MiB bounds a line, so a line of at most 1 MiB is within any configuration:
# before the session is up, reading stops while the unfinished line could grow past that.
PRESTART_READ_LIMIT = (1 << 20) - READ_CHUNK
SESSION_METHODS = frozenset({"tools/list", "tools/call", "prompts/list", "prompts/get", "resources/list",
                             "resources/templates/list", "resources/read", "resources/subscribe",
                             "resources/unsubscribe", "completion/complete",
                             "subscriptions/listen"})  # what waits for the session
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
SUBSCRIPTION_WAIT_SECONDS = 30.0  # how long one job_output call of a subscription waits for news
MAX_SUBSCRIPTIONS = 64
MAX_HELD, MAX_HELD_BYTES = 1024, 64 << 20  # what may wait for it


def log(message: str) -> None:
    try:
        sys.stderr.write(f"peon mcp: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


@dataclass
class Subscription:
    """A client's ``resources/subscribe`` to a job's output, followed by its own thread."""

    uri: str
    job_id: str
    stop: threading.Event = field(default_factory=threading.Event)
    handle: Any = None
    listen_id: Any = None  # the subscriptions/listen request it belongs to (2026-07-28), else None


class StdioServer:
    def __init__(self, session_factory: Callable[..., Any], identity: p.ServerIdentity, in_fd: int, out_fd: int,
                 telemetry: Any = None):
        self.in_fd = in_fd
        self.out_fd = out_fd
        self.identity = identity
        self._session_factory = session_factory
        self._lock = threading.RLock()
        self._registered = threading.Condition(self._lock)  # a submitted call got its session call id
        self._write_lock = threading.Lock()
        self._out_closed = False
        self.book: CallBook[Call] = CallBook(identity, command="peon mcp", telemetry=telemetry)  # under _lock
        self._client = Peer()  # the one client on stdin: its request ids and questions
        self._internal_keys: set[str] = set()  # calls of subscriptions: nobody to ask for approval
        self._subscriptions: dict[tuple[Any, str], Subscription] = {}  # by (listen request id or None, uri)
        self._prompt_listeners: set[Any] = set()  # subscriptions/listen ids that asked for promptsListChanged
        self.catalog = p.Catalog()
        # The session starts in its own thread while the loop serves what does not need it.
        self.session: Any = None
        self._up = False  # the loop adopted the started session (the flag only the loop's thread reads)
        self._start_failure: str | None = None  # why every request that needs the session is refused
        self._start_error: BaseException | None = None
        self._starter: threading.Thread | None = None
        self._held: deque[tuple[p.Message, int]] = deque()  # in arrival order, until the session is up
        self._held_bytes = 0
        self._max_line = DEFAULT_MAX_LINE
        self.connection = p.Connection([], identity, serves_tasks=True)  # its tools are the session's, once up
        self.tasks = p.TaskBook(identity)  # the client's MCP tasks (under _lock)

    # -- the loop -----------------------------------------------------------------------------------

    def run(self) -> str:
        """Serve until stdin closes or a termination signal arrives; returns why it stopped. Raises
        what the session raised if it could not start (after answering the requests that waited)."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        started_r, started_w = os.pipe()
        previous_fd = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        self._starter = helper_thread(self._start_session, args=(started_w,), name="peon-mcp-start")
        self._starter.start()
        decoder = LineDecoder(self._max_line)
        reason = "stdin closed"
        watched = [wake_r, started_r]
        input_closed = False  # stdin ended while requests waited for the session: answer them, then stop
        try:
            while True:
                # Until the session is up its line bound is unknown, but never below 1 MiB: reading
                # pauses while a longer line is in progress, so no line is judged by a wrong bound.
                reading = not input_closed and (self._up or decoder.pending < PRESTART_READ_LIMIT)
                ready, _, _ = select.select([*watched, self.in_fd] if reading else watched, [], [])
                if wake_r in ready:
                    signum = os.read(wake_r, 1)
                    reason = f"signal {signal.Signals(signum[0]).name}" if signum else "signal"
                    break
                if started_r in ready:
                    watched.remove(started_r)  # (before stdin: what waited is answered before what follows)
                    self._starter.join()
                    self._session_started(decoder, input_closed)
                    if input_closed:
                        break
                    continue
                data = os.read(self.in_fd, READ_CHUNK)
                if not data:
                    if self._held and not self._up:
                        input_closed = True
                        continue
                    break
                for line in decoder.feed(data):
                    self._handle_line(line)
        finally:
            self.shutdown()
            signal.set_wakeup_fd(previous_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for fd in (wake_r, wake_w, started_r, started_w):
                os.close(fd)
        if self._start_error is not None:
            raise self._start_error
        return reason

    def _start_session(self, started_w: int) -> None:
        try:
            self.session = self._session_factory(approver=self._approve)
        except BaseException as exc:  # reported by the loop, raised by run()
            self._start_error = exc
        finally:
            os.write(started_w, b"s")

    def _session_started(self, decoder: LineDecoder, input_closed: bool) -> None:
        """The session is up (or failed): adopt its tools and limits, then answer what waited, in order.
        A session that failed leaves the server answering every request that needs it with the reason,
        until stdin closes; then :meth:`run` raises the failure. When stdin has closed already, the calls
        that waited for a session that is up are dropped: the server is stopping, and stopping cancels
        every call."""
        held = [(message, size) for message, size in self._held
                if not (input_closed and self._start_error is None
                        and isinstance(message, p.Request) and message.method == "tools/call")]
        self._held, self._held_bytes = deque(), 0
        self._up = True
        if self._start_error is not None:
            error = self._start_error
            described = f"{error.code.value}: {error.message}" if isinstance(error, PeonError) else repr(error)
            self._start_failure = f"Internal error: the Peon session could not start ({described})"
            log(f"the session could not start: {described}")
            for message, _ in held:
                self._handle_message(message)
            return
        limits = self.session.config.config.limits
        self.book.approval_wait = approval_wait(limits)
        self._max_line = decoder.max_line_bytes = limits.max_input_bytes + (1 << 20)
        self.connection.set_tools(self.session.tools())
        self.catalog = p.Catalog.of(self.session.info, self.connection.tools)
        info = self.session.info
        log(f"serving {info.get('workspace')} (containment: {(info.get('containment') or {}).get('kind')}, "
            f"supervisor pid {info.get('pid')}, {len(self.connection.tools)} tools)")
        for message, _ in held:
            self._handle_message(message)

    def shutdown(self) -> None:
        with self._lock:
            if self.book.closing:
                return
            self.book.closing = True
            self._registered.notify_all()
            subscriptions = list(self._subscriptions.values())
            self._subscriptions.clear()
            self._prompt_listeners.clear()
        for subscription in subscriptions:
            subscription.stop.set()
        with self._write_lock:
            self._out_closed = True  # the client is gone or going: answers to cancelled calls are not sent
        with self._lock:
            self.book.deny_open_questions("the MCP server is shutting down")
        if self._starter is not None:
            self._starter.join()  # a session still starting is closed too, never left behind
        if self.session is not None:
            self.session.close()

    def _handle_line(self, line: bytes | Oversize) -> None:
        try:
            if isinstance(line, Oversize):
                self._write(p.error_response(None, p.INVALID_REQUEST, f"Invalid Request: a message of {line.length} "
                                                                      f"bytes exceeds the limit of {self._max_line}"))
                return
            message = p.parse_message(line)
            if not self._up and self._must_wait(message, len(line)):
                return
            self._handle_message(message)
        except Exception as exc:  # a fault in handling one message must not end the connection
            log(f"internal error while handling a message: {type(exc).__name__}: {exc}")
            self._write(p.error_response(None, p.INTERNAL_ERROR, f"Internal error: {type(exc).__name__}"))

    def _must_wait(self, message: p.Message, size: int) -> bool:
        """Before the session is up: whether ``message`` waits for it (held, or refused when too many
        wait). ``initialize``, ``server/discover``, ``ping`` and protocol errors do not need the session,
        so they are answered at once — unless something already waits, as answers keep arrival order."""
        if isinstance(message, p.Notification) and message.method == "notifications/cancelled":
            target = message.params.get("requestId")
            for index, (held, _) in enumerate(self._held):
                if p.valid_id(target) and isinstance(held, p.Request) and held.method == "tools/call" \
                        and type(held.id) is type(target) and held.id == target:
                    del self._held[index]  # cancelled before it was submitted: no response, as for any cancel
                    return True
        needs_session = isinstance(message, p.Request) and message.method in SESSION_METHODS
        if not (needs_session or self._held) or isinstance(message, p.Malformed):
            return False
        if len(self._held) >= MAX_HELD or self._held_bytes + size > MAX_HELD_BYTES:
            if isinstance(message, p.Request):
                self._write(p.error_response(message.id, p.INTERNAL_ERROR,
                                             f"Internal error: the server is still starting its session and at most "
                                             f"{MAX_HELD} requests ({MAX_HELD_BYTES >> 20} MiB) wait for it"))
            return True
        self._held.append((message, size))
        self._held_bytes += size
        return True

    def _handle_message(self, message: p.Message) -> None:
        if self._start_failure is not None and isinstance(message, p.Request) and message.method in SESSION_METHODS:
            self._write(p.error_response(message.id, p.INTERNAL_ERROR, self._start_failure))
            return
        event = self.connection.receive(message)
        if isinstance(event, p.Reply):
            self._write(event.message)
        elif isinstance(event, p.StartCall):
            self._start_call(event)
        elif isinstance(event, p.Feature):
            self._feature(event)
        elif isinstance(event, p.CancelRequest):
            self._cancel(event)
        elif isinstance(event, p.ClientReply):
            self._client_reply(event)
        elif isinstance(event, p.TaskRequest):
            self._task_request(event)

    def _write(self, message: dict[str, Any]) -> None:
        """Send one message. Never raises: a message JSON cannot carry becomes an internal error for the
        request it answers (or is dropped, with a log line, when it answers none)."""
        try:
            data = encode(message)
        except ValueError as exc:
            request_id = message.get("id")
            outcome = "answering with an internal error" if "id" in message else "dropped"
            log(f"cannot encode a message ({exc}); {outcome}")
            if "id" not in message:
                return
            reply_id = request_id if p.valid_id(request_id) and p.lone_surrogate(str(request_id)) is None else None
            data = encode(p.error_response(reply_id, p.INTERNAL_ERROR,
                                           f"Internal error: the answer cannot be encoded: {exc}"))
        with self._write_lock:
            if self._out_closed:
                return
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self.out_fd, view):]
            except OSError as exc:
                self._out_closed = True
                log(f"cannot write to stdout ({exc.strerror}); no more messages will be sent")

    def _finish(self, request_id: Any, version: str, result: dict[str, Any]) -> None:
        self._write(p.respond(request_id, version, result, self.identity))

    # -- tools/call ---------------------------------------------------------------------------------

    def _start_call(self, ev: p.StartCall) -> None:
        with self._lock:
            refused = self.book.in_use(self._client, ev.id)
            if refused is not None:
                self._write(refused)
                return
            if ev.request_state is not None:
                self._resume(ev)
                return
            call = Call.of_request(ev, self._client)
            if ev.task_ttl is not None:  # answered now with the task's handle; the task gets the result
                task = self.tasks.create(self._client, ev.version, ev.task_ttl, call)
                if isinstance(task, str):
                    self._write(p.error_response(ev.id, p.INVALID_REQUEST, f"Invalid Request: {task}"))
                    return
                call.task, call.request_id = task, None
                self._write(self.tasks.created(ev.id, task))
            else:
                self.book.open(call)
        self._submit(call)

    def _resume(self, ev: p.StartCall) -> None:
        """The retry of a call answered with input_required (2026-07-28): it gets the call's answer, now if
        the call has finished, else when it does."""
        resumed = self.book.resume(ev)
        if not isinstance(resumed, Call):
            self._write(resumed)
        elif resumed.final is not None:
            self._write(self.book.answer(resumed, resumed.final))

    def _submit(self, call: Call) -> None:
        self._recover_session()
        on_progress = (lambda update: self._progress(call, update)) if self.book.wants_progress(call) else None
        # Not under the lock: the session's reader thread takes it for progress and results.
        # A task's client collects the whole result itself: its call is never yielded.
        handle = self.session.submit(call.name, call.arguments, on_progress=on_progress, auto_yield=call.task is None,
                                     **self.book.tracing(call))
        with self._registered:
            self.book.submitted(call, handle)
            self._registered.notify_all()
        handle.add_done_callback(lambda result: self._done(call, result))

    def _recover_session(self) -> None:
        """If the supervisor died, start a fresh one for the same session before the next call. The
        calls pending on the dead one were answered ``supervisor_died``; none is ever re-run."""
        self.book.recover(self.session, lambda level, message: log(message), self._adopt_restarted)

    def _adopt_restarted(self) -> None:
        self._log("critical", {"event": "supervisor_restarted", "supervisor_pid": self.session.supervisor_pid})
        # The new supervisor discovered the skills again: prompts/list and read_skill's schema follow it.
        before = self.catalog
        self.connection.set_tools(self.session.tools())
        self.catalog = p.Catalog.of(self.session.info, self.connection.tools)
        if p.prompts_changed(before, self.catalog):
            self._tell_prompts_changed()

    def _progress(self, call: Call, update: dict[str, Any]) -> None:
        with self._lock:
            message = self.book.progress(call, update)
        if message is not None:
            self._write(message)

    def _done(self, call: Call, result: ToolResult) -> None:
        with self._lock:
            message = self.book.finish(call, result)
            ended = self.tasks.ended(call.task, p.call_result(result, call.version)) if call.task is not None else []
        for task_message in ended:  # the tasks/result requests that waited, then the status notification
            self._write(task_message)
        if message is None:
            return  # cancelled (no response), or kept for the retry of its input_required answer
        event = p.result_event(result)
        if event is not None:
            self._log(*event)
        self._write(message)

    def _cancel(self, ev: p.CancelRequest) -> None:
        if self._end_listen(ev.request_id):
            return
        with self._lock:
            call = self._client.calls.get(ev.request_id)
            if call is None or not self.book.withdraw(call):
                return  # unknown, finished or cancelled already: nothing to cancel
        if call.handle is not None:
            call.handle.cancel()
        with self._lock:
            notice = self.book.deny_question(call, "the call was cancelled by the client")
        if notice is not None:
            self._write(notice)

    # -- approval -----------------------------------------------------------------------------------

    def _approve(self, request: dict[str, Any]) -> dict[str, Any]:
        """The session's approver (runs in its own thread): ask the client, or deny when it cannot be asked."""
        call_id = str(request.get("call_id"))
        with self._registered:
            if request.get("tool") == NETWORK_QUESTION:  # about a running command's connection, not a call
                call = self.book.network_carrier()
            else:
                # The request can only follow the submit; wait the moment until the call is registered.
                self._registered.wait_for(lambda: self.book.registered(call_id) or call_id in self._internal_keys,
                                          REGISTRATION_WAIT_SECONDS)
                if call_id in self._internal_keys:
                    return {"decision": "deny", "reason": "a resource subscription follows its job without "
                            "asking; allow job_output in the configuration to subscribe"}
                call = self.book.askable(call_id)
            if not isinstance(call, Call):
                return call
            answered = threading.Event()
            message: dict[str, Any] | None
            if call.task is None:
                approval, message = self.book.ask(call, request, answered.set)
                notices = []
            else:
                approval, message = self.book.ask_in_task(call, request, answered.set)
                asked = (None if approval.elicitation is None else
                         {"method": "elicitation/create", "params": approval.elicitation})
                notices = self.tasks.asking(call.task, p.APPROVAL_KEY, asked)
        asked_ns = time.time_ns()
        for sent in (*notices, message):
            if sent is not None:
                self._write(sent)
        answered.wait(self.book.approval_wait)
        with self._lock:
            answer = self.book.answered(call, approval, asked_ns)
            notices = self.tasks.resumed(call.task) if call.task is not None else []
        for notice in notices:
            self._write(notice)
        self._log(*p.approval_event(request, answer))
        return answer

    def _task_request(self, ev: p.TaskRequest) -> None:
        """A ``tasks/*`` request: answered from the task book; a cancel stops the task's call (TERM → 2 s →
        KILL), an update answers its open question."""
        with self._lock:
            action = self.tasks.request(self._client, ev.id, ev.method, ev.params, ev.version)
            call = action.cancel.call if action.cancel is not None else None
            withdrawn = call is not None and self.book.withdraw(call)
            if action.responses is not None:
                self.book.answer_in_task(action.responses[0].call, action.responses[1])
        if action.reply is not None:
            self._write(action.reply)
        if call is None or not withdrawn:
            return
        if call.handle is not None:  # not under the lock, as for a cancelled request
            call.handle.cancel()
        with self._lock:
            notice = self.book.deny_question(call, "the task was cancelled by the client")
        if notice is not None:
            self._write(notice)

    def _client_reply(self, ev: p.ClientReply) -> None:
        with self._lock:
            known = self.book.reply(self._client, ev)
        if not known:
            log(f"ignored a response to unknown request {p.shown(ev.id)}")

    # -- prompts, resources, completion, logging ------------------------------------------------------

    def _feature(self, ev: p.Feature) -> None:
        if ev.method in ("resources/subscribe", "resources/unsubscribe"):
            self._subscription(ev)
            return
        if ev.method == "subscriptions/listen":
            self._listen(ev)
            return
        planned = p.plan(ev.method, ev.params, self.catalog, ev.version)
        if isinstance(planned, p.Answer):
            self._finish(ev.id, ev.version, planned.result)
        elif isinstance(planned, p.Refused):
            self._write(p.error_response(ev.id, planned.code, planned.message, planned.data))
        else:
            with self._lock:
                refused = self.book.in_use(self._client, ev.id)
                if refused is not None:
                    self._write(refused)
                    return
                call = Call.of_step(ev, planned, self._client)
                self.book.open(call)
            self._submit(call)

    def _subscription(self, ev: p.Feature) -> None:
        uri = ev.params.get("uri")
        try:
            target = p.parse_uri(uri, self.catalog.workspace)
        except p.ResourceProblem as problem:
            self._write(p.error_response(ev.id, p.INVALID_PARAMS, f"Invalid params: {problem}"))
            return
        assert isinstance(uri, str)
        with self._lock:
            existing = self._subscriptions.pop((None, uri), None)
            if existing is not None:
                existing.stop.set()
            if ev.method == "resources/subscribe" and isinstance(target, p.JobUri):
                if len(self._subscriptions) >= MAX_SUBSCRIPTIONS:
                    self._write(p.error_response(ev.id, p.INVALID_PARAMS, f"Invalid params: at most "
                                                 f"{MAX_SUBSCRIPTIONS} resources are followed at once"))
                    return
                subscription = Subscription(uri, target.job_id)
                self._subscriptions[(None, uri)] = subscription
                helper_thread(self._follow_job, args=(subscription, ev), name="peon-mcp-subscription").start()
        if existing is not None and existing.handle is not None:
            existing.handle.cancel()
        if ev.method == "resources/unsubscribe" or not isinstance(target, p.JobUri):
            # Skills and files are read when asked: a subscription to one is accepted and never updated.
            self._finish(ev.id, ev.version, {})

    def _follow_job(self, subscription: Subscription, ev: p.Feature) -> None:
        """Wait for the job's news with job_output calls; tell the client when output arrives or it ends.
        The subscription is answered after the first look at the job: from then on, every change is told
        (and a job that does not exist is ``-32002``)."""
        seen, state = -1, "running"
        step = p.Step("job_output", {}, lambda value: {}, missing_is_not_found=True)
        tagged = {"_meta": {SUBSCRIPTION_ID_KEY: subscription.listen_id}} if subscription.listen_id is not None else {}
        while not subscription.stop.is_set() and not self.book.closing:
            self._recover_session()
            offset = max(seen, 0)
            handle = self.session.submit("job_output", {"job_id": subscription.job_id, "offset": offset, "limit": 4,
                                                        "wait_seconds": SUBSCRIPTION_WAIT_SECONDS if seen >= 0 else 0})
            with self._registered:
                self._internal_keys.add(handle.call_id)
                self._registered.notify_all()
            subscription.handle = handle
            try:
                result = handle.result(SUBSCRIPTION_WAIT_SECONDS + 60)
            except TimeoutError:
                handle.cancel()
                continue
            finally:
                with self._lock:
                    self._internal_keys.discard(handle.call_id)
            if seen < 0 and subscription.listen_id is None:
                self._write(self.book.step_answer(ev.id, ev.version, step, result))
            if subscription.stop.is_set() or not result.ok:
                if not result.ok:
                    log(f"stopped following {subscription.uri}: {result.error.code if result.error else '?'}")
                break
            value = result.value or {}
            written, now = int(value.get("output_bytes") or 0), str(value.get("state"))
            if seen >= 0 and (written > seen or now != state):
                self._write({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                             "params": {"uri": subscription.uri, **tagged}})
            seen, state = written, now
            if now != "running":
                break
        key = (subscription.listen_id, subscription.uri)
        with self._lock:
            if self._subscriptions.get(key) is subscription:
                del self._subscriptions[key]

    def _tell_prompts_changed(self) -> None:
        """``notifications/prompts/list_changed``: to a handshake-era client, or on each listen stream that
        asked for it (tagged with its id)."""
        if self.connection.tells_prompt_changes():
            self._write({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"})
        with self._lock:
            listeners = list(self._prompt_listeners)
        for listen_id in listeners:
            self._write({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed",
                         "params": {"_meta": {SUBSCRIPTION_ID_KEY: listen_id}}})

    def _listen(self, ev: p.Feature) -> None:
        """2026-07-28 ``subscriptions/listen``: acknowledge the resource subscriptions it honors (the URIs
        this server serves) and ``promptsListChanged``, then tag each notification with the request's id.
        A job URI is followed like a ``resources/subscribe``; the stream ends when the client cancels the
        request."""
        wanted = ev.params.get("notifications")
        uris = wanted.get("resourceSubscriptions") if isinstance(wanted, dict) else None
        if not isinstance(uris, list) or len(uris) > MAX_SUBSCRIPTIONS:
            uris = []
        honored: list[str] = []
        with self._lock:
            if ev.id in self._prompt_listeners or any(listen_id == ev.id for listen_id, _ in self._subscriptions) \
                    or any(ev.id in streams for streams in self.tasks.listeners.values()):
                self._write(p.error_response(ev.id, p.INVALID_REQUEST,
                                             f"request id {p.shown(ev.id)} is already a subscriptions/listen stream"))
                return
            tasks = self.tasks.listen(self._client, ev.id, wanted.get("taskIds") if isinstance(wanted, dict) else None,
                                      ev.params.get("_meta"))
            if isinstance(tasks, dict):  # asked for tasks without declaring the extension
                self._write(tasks)
                return
            prompts = (isinstance(wanted, dict) and wanted.get("promptsListChanged") is True
                       and len(self._prompt_listeners) < MAX_SUBSCRIPTIONS)
            if prompts:
                self._prompt_listeners.add(ev.id)
            for uri in uris:
                try:
                    target = p.parse_uri(uri, self.catalog.workspace)
                except p.ResourceProblem:
                    continue  # not served: left out of the acknowledged set
                assert isinstance(uri, str)
                honored.append(uri)
                if isinstance(target, p.JobUri) and len(self._subscriptions) < MAX_SUBSCRIPTIONS:
                    self._subscriptions[(ev.id, uri)] = Subscription(uri, target.job_id, listen_id=ev.id)
            followed = [s for (listen_id, _), s in self._subscriptions.items() if listen_id == ev.id]
        acknowledged: dict[str, Any] = {"resourceSubscriptions": honored, **({"taskIds": tasks} if tasks else {})}
        if prompts:
            acknowledged["promptsListChanged"] = True
        self._write({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                     "params": {"notifications": acknowledged, "_meta": {SUBSCRIPTION_ID_KEY: ev.id}}})
        for subscription in followed:
            helper_thread(self._follow_job, args=(subscription, ev), name="peon-mcp-subscription").start()

    def _end_listen(self, listen_id: Any) -> bool:
        """Stop the subscriptions of a listen stream the client cancelled; whether there was one."""
        with self._lock:
            ended = [key for key in self._subscriptions if key[0] is not None and key[0] == listen_id]
            subscriptions = [self._subscriptions.pop(key) for key in ended]
            listened = listen_id in self._prompt_listeners
            self._prompt_listeners.discard(listen_id)
            listened = self.tasks.unlisten(listen_id) or listened
        for subscription in subscriptions:
            subscription.stop.set()
            if subscription.handle is not None:
                subscription.handle.cancel()
        return bool(ended) or listened

    def _log(self, level: Any, data: dict[str, Any]) -> None:
        with self._lock:
            message = self.connection.logs.message(level, data, time.monotonic())
        if message is not None:
            self._write(message)


def serve(session_factory: Callable[..., Any], identity: p.ServerIdentity) -> int:
    """Run the server on this process's stdin/stdout; returns the exit status."""
    sys.stdout.flush()
    out_fd = os.dup(1)  # the protocol's stdout; not inherited by children
    os.dup2(2, 1)  # anything else written to fd 1 lands on stderr
    real_stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        telemetry = otel.from_environment()
        server = StdioServer(session_factory, identity, 0, out_fd, telemetry)
        try:
            reason = server.run()
        finally:
            if telemetry is not None:
                telemetry.shutdown()
        log(f"stopped: {reason}")
        return 0
    finally:
        sys.stdout = real_stdout
        os.close(out_fd)
