"""The embedding API: a :class:`Session` owns one supervisor process and talks to it over a socket.

Promises:

* ``Session(...)`` returns only when the supervisor is ready, or raises a
  :class:`~peon.core.errors.SessionError` / :class:`~peon.core.errors.ConfigError` saying why it is not;
* every :meth:`Session.submit` yields exactly one :class:`~peon.client.result.ToolResult`, also when the
  supervisor dies (``supervisor_died``) or the session closes first (``session_closed``) — a caller
  never waits forever: a supervisor that stops answering (a running call unanswered by its deadline +
  ``limits.worker_grace_seconds`` + a margin, a call never started within its bound, its process
  stopped while calls wait) is killed with everything below it, and every pending call answered
  ``supervisor_died``, saying so (:mod:`peon.client.watchdog`). A message from the supervisor that
  cannot be read (over the channel bound, not JSON) is never skipped: the call it names is answered
  ``too_large``, and a message that names no call means the supervisor is broken (killed,
  ``supervisor_died``);
* a session whose supervisor does not become ready within :data:`START_TIMEOUT_SECONDS` raises, and
  nothing of it is left: the supervisor and everything below it are killed;
* at most ``limits.max_queued_calls`` unanswered calls holding at most ``limits.max_queued_bytes`` of
  encoded input are sent to the supervisor; a call beyond either is answered ``busy`` at once and never
  sent (:mod:`peon.client.calls`);
* :meth:`Session.close` (and leaving the ``with`` block) returns when the supervisor has exited and
  no process the session started is alive; after a supervisor died, nothing of its session is left
  (:mod:`peon.client.rescue`).

All methods are thread-safe. Calls run side by side, up to ``limits.max_parallel_calls`` at once (the
rest in submission order), and each is answered as it ends. A reader thread reads the
supervisor's messages and answers each submitted call; while a thread waits in :meth:`Session.call`
(without a progress callback), that thread reads the channel itself and the reader thread stands
aside (:mod:`peon.client.reading`), so the answer wakes the caller directly instead of waking the
reader thread, which would wake the caller in turn (0.75 ms less for a call its supervisor answers
alone 100 ms after the last, 0.1 to 0.65 ms less for a `read` or a `bash` call). This module owns the
public API and what each message from the supervisor means for the session's calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Iterable, Mapping

from peon.core.errors import ConfigError, ErrorCode, RegistrationError, SessionError, ToolError
from peon.core.framing import ENVELOPE_BYTES, MAX_MESSAGE_BYTES, Oversize, encode, head_fields
from peon.core.threads import helper_thread
from peon.core.wire import ClientCall, ClientMessage, ClientStart
from peon.client.calls import PendingCall, PendingCalls, ProgressCallback as ProgressCallback  # re-exported
from peon.client.reading import ChannelReader
from peon.client.rescue import Rescue
from peon.client.result import ToolResult, new_call_id
from peon.client.spawn import Launch
from peon.client.watchdog import Watchdog

if TYPE_CHECKING:
    from peon.checkpoints.review import Review

START_TIMEOUT_SECONDS = 60.0
CLOSE_TIMEOUT_SECONDS = 20.0

Approver = Callable[[dict[str, Any]], Any]


def default_state_root() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "peon" / "sessions"


def _import_path(tool: Any) -> str:
    if isinstance(tool, str):
        return tool
    if isinstance(tool, type):
        return f"{tool.__module__}:{tool.__qualname__}"
    raise TypeError(f"tools must be import paths ('package.module:ToolClass') or classes, got {tool!r}")


class CallHandle(PendingCall):
    """A submitted call: wait for its result, or cancel it, from any thread."""

    def __init__(self, session: Session, call_id: str, tool: str, on_progress: ProgressCallback | None):
        super().__init__(call_id, tool, on_progress)
        self.session = session

    def cancel(self) -> None:
        """Ask the supervisor to cancel: a queued call never starts; a running one gets TERM → 2 s → KILL."""
        if not self.done():
            self.session._send_quietly({"op": "cancel", "id": self.call_id})


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
        self._calls = PendingCalls()
        self._send_lock = threading.Lock()
        self._closing = False
        self._restarting = False
        self._dead: ToolResult | None = None  # set once the supervisor is gone (guarded by the calls' lock)
        self._ready = threading.Event()
        self._start_reply: dict[str, Any] | None = None
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
            self._launch.kill()  # never told to open the session (see peon.client.spawn)
            raise
        self._handshake()

    # -- life cycle ---------------------------------------------------------------------------------

    def _spawn(self, launch: Launch | None = None) -> None:
        if launch is not None and not (launch.matches(self.workspace, self._env) and launch.adopt()):
            launch.abandon()  # started for another workspace or environment, or already gone
            launch = None
        if launch is None:
            launch = Launch(self.workspace, self._env)
            launch.adopt()
        self._launch = launch
        self._proc, self._sock = launch.process, launch.sock
        self._rescue = Rescue(self._proc, self.session_id)

    def _handshake(self) -> None:
        rescue = self._rescue
        self._watchdog = Watchdog(self._calls, self._proc.pid, self.config.config.limits, rescue.kill)
        self._reading = ChannelReader(self._sock, self.max_message_bytes, self._watchdog, self._dispatch_line,
                                      lambda: self._on_supervisor_gone(rescue),
                                      thread_name=f"peon-session-{self.session_id[:8]}")
        self._reader = self._reading.thread
        self._reader.start()
        start: ClientStart = {
            "op": "start", "workspace": str(self.workspace), "session_id": self.session_id,
            "state_dir": str(self.state_dir), "config": self.config.to_wire(), "tools": self._tools, "env": self._env,
            # Without an approver the supervisor denies at once ("no-approver") instead of asking.
            "approver": self.approver is not None,
            "started_notices": True,  # say by when a running call must be answered (see peon.client.watchdog)
        }
        self._send(start)
        if not self._ready.wait(START_TIMEOUT_SECONDS):
            rescue.kill(f"did not start within {START_TIMEOUT_SECONDS:g} s and was killed with everything below it")
            self._reader.join(CLOSE_TIMEOUT_SECONDS)
            self._sock.close()
            raise SessionError(ErrorCode.SUPERVISOR_DIED, f"the supervisor {rescue.gave_up}")
        reply = self._start_reply or {}
        if reply.get("op") != "ready":
            self._proc.wait()
            self._reader.join()
            err = reply.get("error") or {
                "code": ErrorCode.SUPERVISOR_DIED.value,
                "message": f"the supervisor exited during start-up ({rescue.exit_description()}); see its stderr",
            }
            kind = {ErrorCode.CONFIG_INVALID.value: ConfigError, ErrorCode.REGISTRATION_FAILED.value: RegistrationError}
            if err.get("code") in kind:
                raise kind[err["code"]](err["message"], err.get("details"))
            raise SessionError(err["code"], err["message"], err.get("details"))
        self.info = {k: v for k, v in reply.items() if k != "op"}
        rescue.cgroup = (self.info.get("containment") or {}).get("cgroup")

    def close(self) -> None:
        with self._calls.lock:
            if self._closing:
                return
            self._closing = True
        self._stop_supervisor()
        self._calls.fail_all(ErrorCode.SESSION_CLOSED, "the session was closed before the call finished")

    def restart(self) -> None:
        """Start a fresh supervisor for this session — same id, state directory (so session grants and
        the audit log carry on), configuration, tools and environment.

        Use it after a call came back ``supervisor_died``. Calls pending on the old supervisor have
        already been answered (``supervisor_died``), or are answered ``session_closed`` if the old
        supervisor was still running and is stopped here; none of them is ever run again.
        """
        with self._calls.lock:
            if self._closing:
                raise SessionError(ErrorCode.SESSION_CLOSED, "the session is closed; open a new one instead")
            self._restarting = True
        try:
            self._stop_supervisor()
            self._calls.fail_all(ErrorCode.SESSION_CLOSED, "the supervisor was restarted before the call finished")
            with self._calls.lock:
                self._dead = None
            self._ready = threading.Event()
            self._start_reply = None
            self._spawn()
            self._handshake()
        finally:
            self._restarting = False

    def _stop_supervisor(self) -> None:
        self._send_quietly({"op": "close"})
        try:
            self._rescue.wait(CLOSE_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self._rescue.kill()
        self._reader.join(CLOSE_TIMEOUT_SECONDS)
        self._sock.close()

    def _on_supervisor_gone(self, rescue: Rescue) -> None:
        """The channel to the supervisor ``rescue`` watches has ended: clean what it left and, unless the
        session is closing or restarting, answer every pending call ``supervisor_died``, saying why."""
        self._ready.set()
        rescue.end(5.0)
        if self._closing or self._restarting:
            return
        message = f"the session's supervisor (pid {rescue.proc.pid}) {rescue.gave_up or rescue.exit_description()}"
        with self._calls.lock:
            self._dead = ToolResult.failure("", "", ErrorCode.SUPERVISOR_DIED, message)
        self._calls.fail_all(ErrorCode.SUPERVISOR_DIED, message)

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
        return self._dead is None and not self._closing and not self._reading.ended and self._proc.poll() is None

    @property
    def supervisor_pid(self) -> int:
        return self._proc.pid

    def tools(self) -> list[dict[str, Any]]:
        return list(self.info.get("tools", []))

    # -- calls --------------------------------------------------------------------------------------

    def submit(self, name: str, args: Any, *, on_progress: ProgressCallback | None = None,
               trace: Mapping[str, str] | None = None, auto_yield: bool = True) -> CallHandle:
        call_id = new_call_id()
        handle = CallHandle(self, call_id, name, on_progress)
        message: ClientCall = {"op": "call", "id": call_id, "tool": name, "args": args,
                               "progress": on_progress is not None}
        if trace:
            message["trace"] = dict(trace)  # W3C trace context: commands get TRACEPARENT/TRACESTATE
        if not auto_yield:  # its caller waits for the whole result itself (an MCP task)
            message["auto_yield"] = False
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
        with self._calls.lock:
            if self._dead is not None or self._closing:
                failure = self._dead or ToolResult.failure(call_id, name, ErrorCode.SESSION_CLOSED,
                                                           "the session is closed")
                handle._resolve(ToolResult(call_id, name, False, error=failure.error))
                return handle
            busy = self._calls.over_bounds(len(data), self.config.config.limits)
            if busy is not None:  # nothing is sent: the supervisor never holds more than the bound
                handle._resolve(ToolResult.failure(call_id, name, ErrorCode.BUSY, busy[0], busy[1]))
                return handle
            handle.size = len(data)
            handle.sent_at = time.monotonic()
            if isinstance(args, dict) and isinstance(args.get("yield_seconds"), (int, float)):
                handle.own_wait = min(max(float(args["yield_seconds"]), 0.0), 3600.0)
            self._calls.handles[call_id] = handle
            if self._watchdog.reader_asleep:
                self._watchdog.reader_asleep = False
                self._reading.wake()
        try:
            self._send_bytes(data)
        except OSError:
            pass  # the reader sees the EOF and fails the handle with supervisor_died
        return handle

    def call(self, name: str, args: Any, *, on_progress: ProgressCallback | None = None) -> ToolResult:
        handle = self.submit(name, args, on_progress=on_progress)
        if on_progress is None and not handle.done():
            self._reading.read_for(handle)
        return handle.result()

    # -- checkpoints --------------------------------------------------------------------------------

    def changes(self, call_id: str | None = None, *, since: str | None = None, diff: bool = True) -> dict[str, Any]:
        """What this session's calls changed in the workspace, from their checkpoints (docs/changes.md):
        without arguments the list of checkpointed calls and jobs; with ``call_id`` what that call changed
        (and its unified diff when ``diff``); with ``since`` everything changed since just before that
        call. A :class:`~peon.core.errors.SessionError` (``not_found``) when there is nothing to read."""
        from peon.checkpoints.review import ReviewError

        try:
            review = self._review()
            if call_id is None and since is None:
                return review.listing()
            return review.changes(call_id, since=since, diff=diff)
        except (ReviewError, OSError) as exc:
            raise SessionError(ErrorCode.NOT_FOUND, str(exc)) from None

    def rewind(self, call_id: str) -> dict[str, Any]:
        """Put the workspace back as it was just before ``call_id`` (docs/changes.md): its stored files
        restored, those added since removed, the workspace's ``.git`` left alone. The workspace is
        checkpointed first, so the rewind can be undone: ``rewind(result["id"])``. Not put to the
        approver: the embedding program asks for it (an agent asks through the ``rewind`` of
        ``peon mcp``/``peon rewind``)."""
        from peon.checkpoints.review import ReviewError

        try:
            return self._review().rewind(call_id)
        except (ReviewError, OSError) as exc:
            raise SessionError(ErrorCode.NOT_FOUND, str(exc)) from None

    def _review(self) -> Review:
        from peon.checkpoints.review import Review

        return Review(self.state_dir, self.workspace)

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

    # -- what the supervisor sends ------------------------------------------------------------------

    def _dispatch_line(self, line: bytes | Oversize, again: bool = False) -> None:
        """Dispatch one message; ``again``: the same line once more, after a reader was interrupted
        while it dispatched it (see :class:`~peon.client.reading.ChannelReader`)."""
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
        handle = self._calls.take(fields.get("id", ""), again) if names_a_call else None
        if handle is not None:
            handle._resolve(ToolResult.failure(handle.call_id, handle.tool, ErrorCode.TOO_LARGE,
                                               f"the supervisor sent {what} for this call",
                                               {"limit": self.max_message_bytes}))
            return
        if not again:  # dispatched once already: its call was answered then
            self._watchdog.give_up(f"sent {what}, which names no call")

    def _dispatch(self, message: dict[str, Any], again: bool = False) -> None:
        op = message.get("op")
        if op in ("ready", "fatal"):
            self._start_reply = message
            self._ready.set()
        elif op == "result":
            handle = self._calls.take(str(message.get("id")), again)
            if handle is not None:
                handle._resolve(ToolResult.from_message(handle.call_id, handle.tool, message))
        elif op == "started":
            self._calls.started(str(message.get("id")), message.get("answer_by"))
        elif op in ("worker", "worker_gone"):
            self._rescue.track_worker(message)
        elif op == "progress":
            handle = self._calls.handles.get(str(message.get("id")))
            if handle is not None and handle.on_progress is not None:
                handle.on_progress({k: v for k, v in message.items() if k not in ("op", "id")})
        elif op == "approval_request":
            self._calls.asked(str(message.get("call_id")), message.get("timeout_seconds"))
            helper_thread(self._answer_approval, args=(message,)).start()

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
        fields = {k: answer[k] for k in ("decision", "scope", "prefix", "save", "reason", "approver_error")
                  if k in answer}
        try:
            message = encode({"op": "approval_answer", "request_id": request.get("request_id"), **fields})
        except (TypeError, ValueError):
            message = encode({"op": "approval_answer", "request_id": request.get("request_id"), "decision": "deny",
                              "reason": "the approver's answer is not representable as JSON", "approver_error": True})
        try:
            self._send_bytes(message)
        except OSError:
            pass
