"""The embedding API: a :class:`Session` owns one supervisor process and talks to it over a socket.

Promises:

* ``Session(...)`` returns only when the supervisor is ready, or raises a
  :class:`~peon.core.errors.SessionError` / :class:`~peon.core.errors.ConfigError` saying why it is not;
* every :meth:`Session.submit` yields exactly one :class:`~peon.client.result.ToolResult`, also when the
  supervisor dies (``supervisor_died``) or the session closes first (``session_closed``) — a caller
  never waits forever. A running call is answered by its deadline + ``limits.worker_grace_seconds``
  + :data:`ANSWER_MARGIN_SECONDS` even if the supervisor stops answering (stopped with ``SIGSTOP``,
  say): the client then kills the supervisor and everything below it and answers every pending call
  ``supervisor_died``, saying so. A call not yet started (queued, waiting for its approver or for a
  worker) is bounded too, from the moment it is sent: it must be started or answered by
  :meth:`Session._start_bound` — after the call sent before it could have been answered, the pool's
  start (:data:`POOL_START_SECONDS`), a worker start (twice ``limits.worker_start_seconds``: a hung
  forkserver is replaced once), the cancel grace, ``limits.worker_grace_seconds``,
  :data:`ANSWER_MARGIN_SECONDS` and its own ``yield_seconds`` (152 s with the defaults), plus
  ``limits.approval_timeout_seconds`` from an approval request for it — or the supervisor is taken
  for hung (its event loop blocked, say) and killed, and the call answered ``supervisor_died``. A
  message from the supervisor that cannot be read (over the channel bound, not JSON) is never
  skipped: the call it names is answered ``too_large``, and a message that names no call means the
  supervisor is broken (killed, ``supervisor_died``);
* a session whose supervisor does not become ready within :data:`START_TIMEOUT_SECONDS` raises, and
  nothing of it is left: the supervisor and everything below it are killed;
* at most ``limits.max_queued_calls`` unanswered calls holding at most ``limits.max_queued_bytes`` of
  encoded input are sent to the supervisor; a call beyond either is answered ``busy`` at once and never
  sent;
* :meth:`Session.close` (and leaving the ``with`` block) returns when the supervisor has exited and
  no process the session started is alive.

All methods are thread-safe. Calls run serially in submission order. A reader thread reads the
supervisor's messages and answers each submitted call; while a thread waits in :meth:`Session.call`
(without a progress callback), that thread reads the channel itself and the reader thread stands
aside, so the answer wakes the caller directly instead of waking the reader thread, which would wake
the caller in turn (0.75 ms less for a call its supervisor answers alone 100 ms after the last, 0.1 to
0.65 ms less for a `read` or a `bash` call).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable, Mapping

from peon.workers import proctree
from peon.workers.cgroup import Cgroup, session_cgroup_path

from peon.core.errors import ConfigError, ErrorCode, RegistrationError, SessionError, ToolError
from peon.core.framing import ENVELOPE_BYTES, MAX_MESSAGE_BYTES, LineDecoder, Oversize, encode, head_fields
from peon.client.spawn import Launch
from peon.client.result import PendingResult, ToolResult, new_call_id
from peon.core.wire import ClientCall, ClientMessage, ClientStart
from peon.core.threads import helper_thread

START_TIMEOUT_SECONDS = 60.0
CLOSE_TIMEOUT_SECONDS = 20.0
# After a running call's deadline + worker grace, how long the supervisor still has to answer it
# before the client takes it for unresponsive and kills it; also how long a supervisor may stay
# stopped (SIGSTOP) while calls wait on it.
ANSWER_MARGIN_SECONDS = 5.0
LIVENESS_CHECK_SECONDS = 1.0  # while calls are pending: how often the client looks at its supervisor
LIVENESS_CHECK_MS = int(LIVENESS_CHECK_SECONDS * 1000)
# The most workers the client tracks at once (process-tree containment); a supervisor has a few
# (standbys, the running call, jobs.max_running jobs): the bound only caps what a broken one could send.
MAX_TRACKED_WORKERS = 4096
CANCEL_GRACE_SECONDS = 2.0  # a cancelled command's TERM → KILL grace (a job_stop waits it out)
# A session's first calls wait for its pool: the forkserver's launch (a fresh interpreter loading the
# tools, bounded by 60 s in the supervisor's forker) and its first worker (as long again at most).
POOL_START_SECONDS = 120.0

Approver = Callable[[dict[str, Any]], Any]
ProgressCallback = Callable[[dict[str, Any]], None]


def default_state_root() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "peon" / "sessions"


def _read_some(fd: int) -> bool:
    try:
        return bool(os.read(fd, 64))
    except BlockingIOError:
        return False


def _import_path(tool: Any) -> str:
    if isinstance(tool, str):
        return tool
    if isinstance(tool, type):
        return f"{tool.__module__}:{tool.__qualname__}"
    raise TypeError(f"tools must be import paths ('package.module:ToolClass') or classes, got {tool!r}")


class CallHandle(PendingResult):
    """A submitted call: wait for its result, or cancel it, from any thread."""

    def __init__(self, session: Session, call_id: str, tool: str, on_progress: ProgressCallback | None):
        super().__init__(call_id, tool)
        self.session = session
        self.on_progress = on_progress
        self.size = 0  # encoded bytes, counted against limits.max_queued_bytes while unanswered
        self.sent_at = 0.0  # time.monotonic() when it was sent
        self.own_wait = 0.0  # its yield_seconds: how long it asked to wait before its answer

    def cancel(self) -> None:
        """Ask the supervisor to cancel: a queued call never starts; a running one gets TERM → 2 s → KILL."""
        if not self.done():
            self.session._send_quietly({"op": "cancel", "id": self.call_id})


class _Reading:
    """What reading the channel takes: the line decoder and buffer, used by one thread at a time (the
    reader thread, or a caller waiting for its own answer, :meth:`Session._read_for`). One per reader
    thread."""

    def __init__(self, sock: socket.socket, max_message_bytes: int):
        self.decoder = LineDecoder(max_message_bytes)
        self.chunk = bytearray(64 * 1024)  # reused: a fresh large buffer per recv makes RSS creep
        # Lines read and not yet dispatched. A caller reading in the main thread may be interrupted by
        # a signal handler that raises (Ctrl-C) in the middle of one: the line stays here and whoever
        # reads next dispatches it again, which answers its call if the first dispatch did not.
        self.lines: deque[bytes | Oversize] = deque()
        self.dispatching = False  # True from a line's dispatch until it left ``lines``
        self.turn = threading.Lock()  # held while reading and dispatching
        self.borrower = threading.Lock()  # one caller at a time reads for itself
        self.socket_poll = select.poll()  # the borrowing caller's
        self.socket_poll.register(sock, select.POLLIN)
        self.lending = threading.Condition()  # guards and signals ``borrowed``
        self.borrowed = False

    def lent(self) -> bool:
        """Whether a caller reads for itself; if so, wait until it is done (True)."""
        if not self.borrowed:
            return False
        with self.lending:
            while self.borrowed:
                self.lending.wait()
        return True


class Session:
    max_message_bytes = MAX_MESSAGE_BYTES  # the bound of what the supervisor may send in one message

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        session_id: str | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        tools: Iterable[Any] = (),
        env: Mapping[str, str] | None = None,
        approver: Approver | None = None,
        launch: Launch | None = None,
    ):
        workspace = Path(workspace).expanduser()
        if not workspace.is_dir():
            if launch is not None:
                launch.abandon()
            raise SessionError(ErrorCode.NOT_FOUND, f"workspace {workspace} is not an existing directory")
        self.workspace = workspace.resolve()
        self.session_id = session_id or uuid.uuid4().hex
        self.state_dir = Path(state_dir) if state_dir else default_state_root() / self.session_id
        self.approver = approver
        self._config = str(config) if isinstance(config, (str, os.PathLike)) else (dict(config) if config else None)
        self._env = dict(os.environ if env is None else env)
        self._handles: dict[str, CallHandle] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._closing = False
        self._restarting = False
        self._dead: ToolResult | None = None  # set once the supervisor is gone
        self._ready = threading.Event()
        self._start_reply: dict[str, Any] | None = None
        self._answer_by: dict[str, float] = {}  # running calls: when the supervisor must have answered
        self._asked_until: dict[str, float] = {}  # calls put to the approver: when the supervisor denies them
        self._last_answer_at = 0.0  # when the supervisor last answered a call: the next may start then
        self._next_start_look = 0.0  # when the calls not yet started are next checked against their bound
        self._gave_up: str | None = None  # why the client killed an unresponsive supervisor
        self._answering: CallHandle | None = None  # the call whose answer was dispatched last
        self._stopped_since: float | None = None  # when the supervisor was first seen stopped
        # The reader sleeps without a timeout only when no call is pending (an idle session never
        # wakes up); a call submitted then wakes it through this pipe so it watches the supervisor.
        self._reader_idle = False
        self._linger_until: float | None = None
        self._next_look = 0.0  # when the reader next looks at the supervisor's state
        self._contain_lock = threading.Lock()
        # The supervisor's workers (pid -> start time), in process-tree containment: killed by the client
        # if they outlive their supervisor (a stopped worker runs no parent-death handler).
        self._workers: dict[int, float] = {}
        self.info: dict[str, Any] = {}
        # The supervisor's interpreter starts (and imports) while the layers resolve here, so a bad file
        # is reported before the supervisor is told anything (it is then stopped and reaped); the
        # supervisor and its workers get the validated result as plain data (they never load the
        # validation code). A supervisor launched ahead for this workspace and environment is adopted.
        self._spawn(launch)
        try:
            from peon.approval.validation import check_depth  # loaded while the supervisor starts
            self._check_depth = check_depth
            from peon.client.config import load_config

            self.config = load_config(self._config, workspace=self.workspace, env=dict(self._env))
            self._tools = [_import_path(t) for t in tools]
        except BaseException:
            self._abandon_spawn()
            raise
        self._handshake()

    # -- life cycle ---------------------------------------------------------------------------------

    def _start(self) -> None:
        self._spawn()
        self._handshake()

    def _abandon_spawn(self) -> None:
        """Stop a supervisor that was started but never told to open the session (see :mod:`peon.client.spawn`)."""
        self._launch.kill()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    def _spawn(self, launch: Launch | None = None) -> None:
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._reader_idle, self._linger_until = False, None
        self._reader_ended = False  # the channel to this supervisor has ended: it is gone or going
        if launch is not None and not (launch.matches(self.workspace, self._env) and launch.adopt()):
            launch.abandon()  # started for another workspace or environment, or already gone
            launch = None
        if launch is None:
            launch = Launch(self.workspace, self._env)
            launch.adopt()
        self._launch = launch
        self._proc, self._sock = launch.process, launch.sock

    def _handshake(self) -> None:
        self._reading = _Reading(self._sock, self.max_message_bytes)
        self._reader = helper_thread(self._read_loop, name=f"peon-session-{self.session_id[:8]}")
        self._reader.start()
        start: ClientStart = {
            "op": "start", "workspace": str(self.workspace), "session_id": self.session_id,
            "state_dir": str(self.state_dir), "config": self.config.to_wire(), "tools": self._tools, "env": self._env,
            # Without an approver the supervisor denies at once ("no-approver") instead of asking.
            "approver": self.approver is not None,
            "started_notices": True,  # say by when a running call must be answered (see _check_overdue)
        }
        self._send(start)
        if not self._ready.wait(START_TIMEOUT_SECONDS):
            self._gave_up = f"did not start within {START_TIMEOUT_SECONDS:g} s and was killed with everything below it"
            self._kill_supervisor()
            self._reader.join(CLOSE_TIMEOUT_SECONDS)
            self._sock.close()
            raise SessionError(ErrorCode.SUPERVISOR_DIED, f"the supervisor {self._gave_up}")
        reply = self._start_reply or {}
        if reply.get("op") != "ready":
            self._proc.wait()
            self._reader.join()
            err = reply.get("error") or {
                "code": ErrorCode.SUPERVISOR_DIED.value,
                "message": f"the supervisor exited during start-up ({self._exit_description()}); see its stderr",
            }
            kind = {ErrorCode.CONFIG_INVALID.value: ConfigError, ErrorCode.REGISTRATION_FAILED.value: RegistrationError}
            if err.get("code") in kind:
                raise kind[err["code"]](err["message"], err.get("details"))
            raise SessionError(err["code"], err["message"], err.get("details"))
        self.info = {k: v for k, v in reply.items() if k != "op"}

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._stop_supervisor()
        self._fail_pending(ErrorCode.SESSION_CLOSED, "the session was closed before the call finished")

    def restart(self) -> None:
        """Start a fresh supervisor for this session — same id, state directory (so session grants and
        the audit log carry on), configuration, tools and environment.

        Use it after a call came back ``supervisor_died``. Calls pending on the old supervisor have
        already been answered (``supervisor_died``), or are answered ``session_closed`` if the old
        supervisor was still running and is stopped here; none of them is ever run again.
        """
        with self._lock:
            if self._closing:
                raise SessionError(ErrorCode.SESSION_CLOSED, "the session is closed; open a new one instead")
            self._restarting = True
        try:
            self._stop_supervisor()
            self._fail_pending(ErrorCode.SESSION_CLOSED, "the supervisor was restarted before the call finished")
            with self._lock:
                self._dead = None
            self._ready = threading.Event()
            self._start_reply = None
            self._gave_up = None
            self._start()
        finally:
            self._restarting = False

    def _stop_supervisor(self) -> None:
        self._send_quietly({"op": "close"})
        try:
            self._wait_supervisor(CLOSE_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self._kill_supervisor()
        self._reader.join(CLOSE_TIMEOUT_SECONDS)
        self._sock.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None and not getattr(self, "_closing", True):
            self.close()

    @property
    def alive(self) -> bool:
        # Popen.poll() answers None while another thread waits on the process (the reader reaping a
        # supervisor that died): the ended channel says it is gone before its status is known.
        return self._dead is None and not self._closing and not self._reader_ended and self._proc.poll() is None

    @property
    def supervisor_pid(self) -> int:
        return self._proc.pid

    def tools(self) -> list[dict[str, Any]]:
        return list(self.info.get("tools", []))

    # -- calls --------------------------------------------------------------------------------------

    def submit(self, name: str, args: Any, *, on_progress: ProgressCallback | None = None,
               trace: Mapping[str, str] | None = None) -> CallHandle:
        call_id = new_call_id()
        handle = CallHandle(self, call_id, name, on_progress)
        message: ClientCall = {"op": "call", "id": call_id, "tool": name, "args": args,
                                "progress": on_progress is not None}
        if trace:
            message["trace"] = dict(trace)  # W3C trace context: commands get TRACEPARENT/TRACESTATE
        try:
            self._check_depth(name, args)
        except ToolError as exc:
            handle._resolve(ToolResult.failure(call_id, name, exc.code, exc.message, exc.details))
            return handle
        try:
            data = encode(message)
        except (TypeError, ValueError) as exc:
            handle._resolve(ToolResult.failure(call_id, name, ErrorCode.INVALID_INPUT,
                                               f"input for {name} is not representable as JSON: {exc}"))
            return handle
        limit = min(self.config.config.limits.max_input_bytes, MAX_MESSAGE_BYTES - ENVELOPE_BYTES)
        if len(data) > limit:
            handle._resolve(ToolResult.failure(
                call_id, name, ErrorCode.TOO_LARGE,
                f"input for {name} is {len(data)} bytes encoded; limits.max_input_bytes is {limit}",
                {"bytes": len(data), "limit": limit}))
            return handle
        with self._lock:
            if self._dead is not None or self._closing:
                failure = self._dead or ToolResult.failure(call_id, name, ErrorCode.SESSION_CLOSED,
                                                           "the session is closed")
                handle._resolve(ToolResult(call_id, name, False, error=failure.error))
                return handle
            busy = self._queue_full(len(data))
            if busy is not None:  # nothing is sent: the supervisor never holds more than the bound
                handle._resolve(ToolResult.failure(call_id, name, ErrorCode.BUSY, busy[0], busy[1]))
                return handle
            handle.size = len(data)
            handle.sent_at = time.monotonic()
            if isinstance(args, dict) and isinstance(args.get("yield_seconds"), (int, float)):
                handle.own_wait = min(max(float(args["yield_seconds"]), 0.0), 3600.0)
            self._handles[call_id] = handle
            if self._reader_idle:
                self._reader_idle = False
                self._wake_reader()
        try:
            self._send_bytes(data)
        except OSError:
            pass  # the reader sees the EOF and fails the handle with supervisor_died
        return handle

    def _queue_full(self, size: int) -> tuple[str, dict[str, Any]] | None:
        """Why a call of ``size`` encoded bytes cannot be held now (limits.max_queued_calls and
        max_queued_bytes count the calls submitted and not yet answered); a lone call is always held."""
        limits = self.config.config.limits
        held = len(self._handles)
        if held >= limits.max_queued_calls:
            return (f"the session already holds {held} unanswered calls; limits.max_queued_calls is "
                    f"{limits.max_queued_calls}", {"limit": "max_queued_calls", "value": limits.max_queued_calls})
        held_bytes = sum(h.size for h in self._handles.values())
        if held and held_bytes + size > limits.max_queued_bytes:
            return (f"the session's unanswered calls hold {held_bytes} bytes of input and this call {size} more; "
                    f"limits.max_queued_bytes is {limits.max_queued_bytes}",
                    {"limit": "max_queued_bytes", "value": limits.max_queued_bytes})
        return None

    def call(self, name: str, args: Any, *, on_progress: ProgressCallback | None = None) -> ToolResult:
        handle = self.submit(name, args, on_progress=on_progress)
        if on_progress is None and not handle.done():
            self._read_for(handle)
        return handle.result()

    # -- the channel --------------------------------------------------------------------------------

    def _send(self, message: ClientMessage) -> None:
        self._send_bytes(encode(message))

    def _send_bytes(self, data: bytes) -> None:
        with self._send_lock:
            self._sock.sendall(data)

    def _send_quietly(self, message: ClientMessage) -> None:
        try:
            self._send(message)
        except OSError:
            pass

    def _wake_reader(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except OSError:
            pass

    def _read_loop(self) -> None:
        reading = self._reading
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                wait_ms = self._watchdog_ms()
                ready = {fd for fd, _ in poller.poll(wait_ms)}
                if self._wake_r in ready:
                    while _read_some(self._wake_r):
                        pass
                if reading.lent():
                    continue  # a caller read what woke this thread, and watched the supervisor meanwhile
                answered = self._sock.fileno() in ready
                if wait_ms is not None:
                    self._check_overdue(quiet=not answered)
                if answered and not self._receive(reading):
                    break
        finally:
            self._reader_ended = True  # before anything here waits on the process (see alive)
            with self._lock:  # no submit writes to the pipe once it is closed (its number may be reused)
                self._reader_idle = False
                for fd in (self._wake_r, self._wake_w):
                    os.close(fd)
            self._on_supervisor_gone()

    def _receive(self, reading: _Reading) -> bool:
        """Read what the supervisor sent and dispatch each message; False once the channel has ended.
        Whoever gets here second after a wake-up finds the data taken and returns True."""
        with reading.turn:
            self._dispatch_read(reading)  # what an interrupted caller left (see _Reading.lines)
            try:
                n = self._sock.recv_into(reading.chunk, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return True
            except OSError:
                n = 0
            if not n:
                return False  # the end stays readable: the reader thread sees it too, and answers for it
            reading.lines.extend(reading.decoder.feed(bytes(memoryview(reading.chunk)[:n])))
            self._dispatch_read(reading)
        return True

    def _dispatch_read(self, reading: _Reading) -> None:
        while reading.lines:
            again, reading.dispatching = reading.dispatching, True
            self._dispatch_line(reading.lines[0], again)
            reading.lines.popleft()  # only once dispatched: see _Reading.lines
            reading.dispatching = False

    def _read_for(self, handle: CallHandle) -> None:
        """Read the channel in the calling thread until ``handle`` is answered: the reply then wakes the
        caller itself, not the reader thread, which would have to wake the caller in turn. The reader
        thread stands aside meanwhile (:meth:`_Reading.lent`) and this thread watches the supervisor
        as it would. One caller at a time; any other waits for whoever reads."""
        reading = self._reading
        if threading.current_thread() is self._reader or not reading.borrower.acquire(blocking=False):
            return
        try:
            reading.borrowed = True  # read without the lock by the reader thread as it wakes
            while not handle.done() and not self._reader_ended:
                wait_ms = self._watchdog_ms()
                answered = bool(reading.socket_poll.poll(LIVENESS_CHECK_MS if wait_ms is None else wait_ms))
                self._check_overdue(quiet=not answered)
                if answered and not self._receive(reading):
                    break  # the channel ended: the reader thread answers every pending call
        finally:
            with reading.lending:
                reading.borrowed = False
                reading.lending.notify_all()
            reading.borrower.release()

    def _watchdog_ms(self) -> int | None:
        """How long the reader may wait for the supervisor before checking it answers. None (no
        timeout) once no call has been pending for a while: an idle session does not wake up."""
        now = time.monotonic()
        with self._lock:
            if not self._handles:
                if self._linger_until is None:
                    self._linger_until = now + LIVENESS_CHECK_SECONDS
                if now >= self._linger_until:
                    self._reader_idle = True
                    return None
                return int((self._linger_until - now) * 1000) + 1
            self._linger_until = None
            earliest = min(self._answer_by.values(), default=float("inf"))
        wait = min(earliest + ANSWER_MARGIN_SECONDS - now, LIVENESS_CHECK_SECONDS)
        return max(0, int(wait * 1000) + 1)

    def _check_overdue(self, quiet: bool = True) -> None:
        """Give up on a supervisor that let a call pass its ``answer_by``, or that is stopped while
        calls wait; a ``quiet`` supervisor (it sent nothing since the last wait) is looked at now and
        then, one that just sent something is evidently not stopped."""
        now = time.monotonic()
        with self._lock:
            overdue = [(call_id, at) for call_id, at in self._answer_by.items() if at + ANSWER_MARGIN_SECONDS <= now]
            handles = {call_id: self._handles.get(call_id) for call_id, _ in overdue}
            pending = len(self._handles)
        if not overdue and pending and now >= self._next_start_look:
            self._next_start_look = now + LIVENESS_CHECK_SECONDS
            late = self._late_to_start(now)
            if late is not None:
                self._abandon(f"stopped answering: call {late.call_id} ({late.tool}) was neither started nor "
                              f"answered {now - late.sent_at:.1f} s after it was sent, past its bound (the calls "
                              f"before it, approval, worker start and grace; its process state: "
                              f"{proctree.status(self._proc.pid) or 'gone'})")
                return
        if not overdue:
            # A call that has not said when it must be answered (quick so far, queued, awaiting
            # approval) is not answered by a stopped supervisor either: look at it now and then.
            if not pending or not quiet or now < self._next_look:
                return
            self._next_look = now + LIVENESS_CHECK_SECONDS
            if proctree.status(self._proc.pid) == "stopped":
                self._stopped_since = self._stopped_since or now
                if now - self._stopped_since >= ANSWER_MARGIN_SECONDS:
                    self._abandon(f"stopped answering: its process was stopped for {ANSWER_MARGIN_SECONDS:g} s "
                                  f"while {pending} call(s) waited on it")
            else:
                self._stopped_since = None
            return
        call_id = overdue[0][0]
        handle = handles[call_id]
        what = f"call {call_id}" + (f" ({handle.tool})" if handle is not None else "")
        state = proctree.status(self._proc.pid)
        how = " (its process was stopped)" if state == "stopped" else ""
        self._abandon(f"stopped answering: it did not answer {what} by its deadline + worker grace + "
                      f"{ANSWER_MARGIN_SECONDS:g} s{how}")

    def _start_bound(self) -> float:
        """How long after it may begin a call must be started (``started``) or answered: its admission,
        the pool's start (a session's first calls wait for it), a worker start (twice: a hung forkserver
        is replaced once), a cancel's grace and the worker grace (a ``job_stop``), and the margin every
        bound gets. A safety net for a supervisor that stopped answering while running (its event loop
        blocked): generous, so a slow start on a loaded machine is never taken for one."""
        limits = self.config.config.limits
        return (ANSWER_MARGIN_SECONDS + POOL_START_SECONDS + 2 * float(limits.worker_start_seconds)
                + CANCEL_GRACE_SECONDS + float(limits.worker_grace_seconds))

    def _late_to_start(self, now: float) -> CallHandle | None:
        """The first pending call that is past its bound without having started. Calls run in the
        order they were sent: each may begin once the one before it is answered (or could have been
        at the latest), so the bounds chain; an approval request extends its call's bound by the
        approver's time."""
        bound_each = self._start_bound()
        with self._lock:
            previous = self._last_answer_at  # the latest time the call before could have been answered
            for call_id, handle in self._handles.items():
                answer_by = self._answer_by.get(call_id)
                if answer_by is not None:  # running: bounded by its own answer_by
                    previous = max(previous, answer_by + ANSWER_MARGIN_SECONDS)
                    continue
                bound = max(handle.sent_at, previous) + bound_each + handle.own_wait
                asked = self._asked_until.get(call_id)
                if asked is not None:
                    bound = max(bound, asked + bound_each + handle.own_wait)
                if now >= bound:
                    return handle
                previous = bound
        return None

    def _abandon(self, why: str) -> None:
        """The supervisor cannot be trusted to answer: kill it and everything below it. The reader then
        sees the end of the channel and answers every pending call ``supervisor_died``, saying ``why``."""
        self._gave_up = f"{why}; the client killed it and everything below it"
        self._kill_supervisor()

    def _dispatch_line(self, line: bytes | Oversize, again: bool = False) -> None:
        """Dispatch one message; ``again``: the same line once more, after a reader was interrupted
        while it dispatched it (see :class:`_Reading`)."""
        if isinstance(line, Oversize):
            fields = head_fields(line.head)
            self._unreadable(fields, f"a message of {line.length} bytes, over the channel bound of "
                                     f"{self.max_message_bytes} bytes", again)
            return
        try:
            message = json.loads(line)
        except (ValueError, RecursionError) as exc:
            self._unreadable(head_fields(line[:256]), f"a message that is not JSON ({exc})", again)
            return
        if not isinstance(message, dict):
            self._unreadable({}, f"a message that is a JSON {type(message).__name__}", again)
            return
        self._dispatch(message, again)

    def _unreadable(self, fields: dict[str, str], what: str, again: bool = False) -> None:
        """Answer the call an unreadable message was for, or give up on a supervisor that sends messages
        that name no call: a caller always gets an answer."""
        names_a_call = fields.get("op") in ("result", "progress")
        handle = self._take(fields.get("id", ""), again) if names_a_call else None
        if handle is not None:
            handle._resolve(ToolResult.failure(handle.call_id, handle.tool, ErrorCode.TOO_LARGE,
                                               f"the supervisor sent {what} for this call",
                                               {"limit": self.max_message_bytes}))
            return
        if not again:  # dispatched once already: its call was answered then
            self._abandon(f"sent {what}, which names no call")

    def _take(self, call_id: str, again: bool = False) -> CallHandle | None:
        """The pending call ``call_id``, no longer pending; ``again``: also the one taken last, which a
        reader interrupted before it could answer it."""
        with self._lock:
            self._answer_by.pop(call_id, None)
            self._asked_until.pop(call_id, None)
            handle = self._handles.pop(call_id, None)
            if handle is not None:
                self._answering = handle
                self._last_answer_at = time.monotonic()
            elif again and self._answering is not None and self._answering.call_id == call_id:
                handle = self._answering
        return handle

    def _dispatch(self, message: dict[str, Any], again: bool = False) -> None:
        op = message.get("op")
        if op in ("ready", "fatal"):
            self._start_reply = message
            self._ready.set()
        elif op == "result":
            handle = self._take(str(message.get("id")), again)
            if handle is not None:
                handle._resolve(ToolResult.from_message(handle.call_id, handle.tool, message))
        elif op == "started":
            with self._lock:
                if str(message.get("id")) in self._handles and isinstance(message.get("answer_by"), (int, float)):
                    self._answer_by[str(message.get("id"))] = float(message["answer_by"])
        elif op in ("worker", "worker_gone"):
            self._track_worker(message)
        elif op == "progress":
            handle = self._handles.get(str(message.get("id")))
            if handle is not None and handle.on_progress is not None:
                handle.on_progress({k: v for k, v in message.items() if k not in ("op", "id")})
        elif op == "approval_request":
            timeout = message.get("timeout_seconds")
            with self._lock:
                if str(message.get("call_id")) in self._handles and isinstance(timeout, (int, float)):
                    self._asked_until[str(message.get("call_id"))] = time.monotonic() + min(float(timeout), 1e6)
            helper_thread(self._answer_approval, args=(message,)).start()

    def _track_worker(self, message: dict[str, Any]) -> None:
        """Record a worker the supervisor started (``worker``: its pid and start time) or forget one that
        is gone (``worker_gone``). Anything malformed is ignored; the table is bounded."""
        pid, start_time = message.get("pid"), message.get("start_time")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            return
        with self._lock:
            if message.get("op") == "worker_gone":
                self._workers.pop(pid, None)
            elif isinstance(start_time, (int, float)) and not isinstance(start_time, bool):
                if len(self._workers) >= MAX_TRACKED_WORKERS:
                    self._workers.pop(next(iter(self._workers)))
                self._workers[pid] = float(start_time)

    def _kill_tracked_workers(self) -> None:
        """Kill the tree of every worker the supervisor told of and did not see go, if it is still the
        process it named (same pid, same start time: a reused pid is never signalled)."""
        with self._lock:
            workers, self._workers = self._workers, {}
        if not workers:
            return
        import psutil  # only here, once a supervisor is gone

        for pid, start_time in workers.items():
            try:
                if psutil.Process(pid).create_time() != start_time:
                    continue
            except psutil.Error:
                continue
            proctree.kill_tree(pid, include_root=True, timeout=2.0)

    def _answer_approval(self, request: dict[str, Any]) -> None:
        """Ask the approver (in this thread) and send its answer; any failure is sent as a denial."""
        answer: Any = {"decision": "deny", "reason": "no approver is configured for this session"}
        if self.approver is not None:
            try:
                answer = self.approver(request)
            except Exception as exc:
                answer = {"decision": "deny", "reason": f"the approver raised {type(exc).__name__}: {exc}",
                          "approver_error": True}
        if isinstance(answer, str):
            answer = {"decision": answer}
        if not isinstance(answer, Mapping):
            answer = {"decision": "deny", "reason": f"the approver returned {answer!r}, not an answer",
                      "approver_error": True}
        fields = {k: answer[k] for k in ("decision", "scope", "reason", "approver_error") if k in answer}
        try:
            message = encode({"op": "approval_answer", "request_id": request.get("request_id"), **fields})
        except (TypeError, ValueError):
            message = encode({"op": "approval_answer", "request_id": request.get("request_id"), "decision": "deny",
                              "reason": "the approver's answer is not representable as JSON", "approver_error": True})
        try:
            self._send_bytes(message)
        except OSError:
            pass

    def _on_supervisor_gone(self) -> None:
        self._ready.set()
        try:
            self._wait_supervisor(5.0)
        except subprocess.TimeoutExpired:
            self._kill_supervisor()
        self._contain_leftovers()
        if self._closing or self._restarting:
            return
        message = f"the session's supervisor (pid {self._proc.pid}) {self._gave_up or self._exit_description()}"
        with self._lock:
            self._dead = ToolResult.failure("", "", ErrorCode.SUPERVISOR_DIED, message)
        self._fail_pending(ErrorCode.SUPERVISOR_DIED, message)

    def _fail_pending(self, code: ErrorCode, message: str) -> None:
        with self._lock:
            handles, self._handles = list(self._handles.values()), {}
            self._answer_by.clear()
            self._asked_until.clear()
        for handle in handles:
            handle._resolve(ToolResult.failure(handle.call_id, handle.tool, code, message))

    def _wait_supervisor(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the supervisor to exit and reap it (``subprocess.TimeoutExpired``
        past it). A pidfd wakes this the moment it exits; ``Popen.wait(timeout)`` would poll with
        sleeps of up to 50 ms, which every close paid."""
        if self._proc.poll() is not None:
            return
        try:
            pidfd = os.pidfd_open(self._proc.pid)
        except OSError:  # reaped meanwhile, or no pidfds on this kernel
            self._proc.wait(timeout)
            return
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            if not poller.poll(max(0, int(timeout * 1000))):
                raise subprocess.TimeoutExpired(self._proc.args, timeout)
        finally:
            os.close(pidfd)
        self._proc.wait()

    def _exit_description(self) -> str:
        code = self._proc.poll()
        if code is None:
            return "is not responding"
        if code < 0:
            sender = "another process or the out-of-memory killer" if -code == 9 else "another process"
            return (f"was killed by {proctree.signal_name(-code)}, sent by {sender} (this client sends none but "
                    "to a supervisor it gave up on); call Session.restart() or open a new session")
        if code > 128 and proctree.signal_name(code - 128).startswith("SIG"):
            return (f"closed the session on {proctree.signal_name(code - 128)} (exit status {code}), sent by "
                    "another process (this client sends none); call Session.restart() or open a new session")
        return f"exited with status {code}"

    def _kill_supervisor(self) -> None:
        """Kill the supervisor and everything below it: stopped first, so that nothing it started can
        escape to init while the tree below it is killed (workers, commands, daemons), then killed."""
        if self._proc.poll() is None:
            survivors = proctree.kill_tree(self._proc.pid, include_root=True, timeout=5.0)
            if survivors:
                print(f"peon: processes {survivors} of the session's supervisor survived SIGKILL", file=sys.stderr)
            self._proc.wait()
        self._contain_leftovers()

    def _contain_leftovers(self) -> None:
        """Once the supervisor is gone, if it died, kill what is left of its session: every worker it told
        of that is still alive, with its tree (process-tree containment), and every process in its
        cgroup with everything below it (a descendant may have moved itself to another cgroup), then the
        cgroup.
        Workers kill their own trees too, when their forkserver dies. Several threads may get here at
        once (the reader seeing the end of the channel, ``close()`` giving up on a slow supervisor):
        one cleans, and the cgroup code tolerates a tree that vanishes."""
        with self._contain_lock:
            self._kill_tracked_workers()
            path = (self.info.get("containment") or {}).get("cgroup")
            candidate = Path(path) if path else session_cgroup_path(self.session_id, self._proc.pid)
            if candidate is None or not candidate.is_dir():
                return
            group = Cgroup(candidate)
            for pid in group.all_pids():
                proctree.kill_tree(pid, include_root=True, timeout=2.0)
            group.kill_and_remove()
