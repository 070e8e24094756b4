"""The in-flight call book of an MCP server: the calls a transport submitted to its :class:`peon.Session`,
and what each still owes its client. Both transports keep their calls here — ``peon mcp`` on stdin/stdout
(:mod:`peon.mcp.stdio`) and ``peon serve`` over HTTP (:mod:`peon.serve.calls`) — so a call behaves the same
whichever carries it.

Promises:

* a request id names at most one running call of a client (a :class:`Peer`): a second request with it is
  refused, and the running call is untouched;
* a call answers its request exactly once — with its result, or for a prompts/resources/completion
  request with what its plan makes of the result — and a cancelled call never answers;
* an approval question goes only to a call that is still pending, of a client that can be asked; it is
  asked the way the call's revision defines: an ``elicitation/create`` request (2025-11-25 and earlier)
  or an ``input_required`` answer to the call's request with a ``requestState`` this book signed
  (2026-07-28). Every question ends in one decision: the client's answer, or a denial when the call is
  cancelled or finishes, the server closes, or no answer comes within :attr:`CallBook.approval_wait`;
* a retry (2026-07-28) resumes its call only with a ``requestState`` this book issued for a call still
  waiting, repeating the call's name and arguments; at most :data:`MAX_AWAITING_RETRY` calls wait for a
  retry (the oldest is forgotten), and a finished one keeps its result for :data:`RETRY_KEEP_SECONDS`;
* progress is reported only while the call's request waits for it, and only forward
  (:func:`peon.mcp.progress.progress_notification`);
* a supervisor that died is replaced by one restart at a time, never once the book is closing; the calls
  it took with it were answered ``supervisor_died`` by the session and none is ever run again.

Rule: this module owns the call records and every decision about them; the transport owns the I/O. Nothing
here reads or writes a client, waits, or locks, except :meth:`CallBook.recover` (which restarts the
session). A book is not thread-safe: its transport serializes every use of it (stdio under its lock, HTTP
on its event loop), and a :class:`PendingApproval` wakes its waiter from there.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

from peon.client.result import ToolResult
from peon.core.answers import suggested_prefix
from peon.core.errors import PeonError

from peon.mcp.connection import ClientReply, Feature, StartCall
from peon.mcp.elicitation import (
    APPROVAL_KEY, APPROVAL_META_KEY, RequestStateSigner, approval_elicitation, decision_from_elicitation,
    decision_from_retry, input_required,
)
from peon.mcp.features import Answer, Step, settle
from peon.mcp.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, error_response, shown
from peon.mcp.progress import progress_notification
from peon.mcp.revisions import ServerIdentity, is_modern, respond
from peon.mcp.tasks import RELATED_TASK_KEY
from peon.mcp.tools import call_result

RETRY_KEEP_SECONDS = 600.0  # how long a finished call waits for the retry of its input_required answer
MAX_AWAITING_RETRY = 256
REGISTRATION_WAIT_SECONDS = 5.0  # an approval request follows its call's submit by this much at most
APPROVAL_MARGIN_SECONDS = 5.0  # beyond the session's approval timeout: the supervisor's own timeout decides


def approval_wait(limits: Any) -> float:
    """How long a question waits for the client, for a session with these ``limits`` (its resolved
    configuration's table)."""
    return float(limits.approval_timeout_seconds) + APPROVAL_MARGIN_SECONDS


@dataclass(kw_only=True)
class PendingApproval:
    """An approval request put to the client; ``wake`` tells whoever waits for it that it has its answer."""

    request: dict[str, Any]
    wake: Callable[[], None]
    answer: dict[str, Any] | None = None
    elicitation_id: str | None = None  # 2025-11-25 and earlier: the elicitation/create request that asks
    elicitation: dict[str, Any] | None = None  # what is asked (the params of an elicitation/create)

    def resolve(self, answer: dict[str, Any]) -> None:
        """Decide the question (the first decision stands)."""
        if self.answer is None:
            self.answer = answer
            self.wake()


@dataclass(kw_only=True, eq=False)
class Peer:
    """One client that keeps state between requests: its running calls by request id and its open
    ``elicitation/create`` questions. (``peon serve``'s stateless 2026-07-28 requests belong to no client:
    their calls have no peer.)"""

    calls: dict[Any, Call] = field(default_factory=dict)
    elicitations: dict[str, PendingApproval] = field(default_factory=dict)


@dataclass(kw_only=True, eq=False)
class Call:
    """One request served by a session call: a ``tools/call``, or a prompts/resources/completion request
    whose plan is one call (``step``)."""

    request_id: Any  # the request to answer; None while an input_required answer awaits its retry
    name: str
    arguments: dict[str, Any]
    version: str
    progress_token: Any = None
    can_elicit: bool = False
    peer: Peer | None = None
    step: Step | None = None
    method: str = "tools/call"
    meta: Any = None  # the request's params._meta (its trace context)
    key: str = ""  # the session's call id, once submitted
    handle: Any = None
    cancelled: bool = False
    last_progress: float | None = None
    approval: PendingApproval | None = None
    final: ToolResult | None = None  # finished while no request was waiting for it
    finished_at: float = 0.0
    trace: Any = None  # its peon.otel.CallTrace, when telemetry is on
    task: Any = None  # the peon.mcp.tasks.Task it runs as (its request was answered with the task's handle)

    @classmethod
    def of_request(cls, ev: StartCall, peer: Peer | None, **more: Any) -> Self:
        """The call a ``tools/call`` request asks for."""
        return cls(request_id=ev.id, name=ev.name, arguments=ev.arguments, version=ev.version,
                   progress_token=ev.progress_token, can_elicit=ev.can_elicit, peer=peer, meta=ev.meta, **more)

    @classmethod
    def of_step(cls, ev: Feature, step: Step, peer: Peer | None, **more: Any) -> Self:
        """The call that serves a prompts, resources or completion request."""
        # The stateless revision's approval is an input_required answer to a tools/call retry, which these
        # methods do not have: a step that needs approval there is denied.
        return cls(request_id=ev.id, name=step.tool, arguments=step.arguments, version=ev.version,
                   can_elicit=ev.can_elicit and not is_modern(ev.version), peer=peer, step=step, method=ev.method,
                   meta=ev.params.get("_meta"), **more)


CallT = TypeVar("CallT", bound=Call)


class CallBook(Generic[CallT]):
    """The calls of one server (of its transport's kind of :class:`Call`), by the session's call id, and
    those waiting for a retry."""

    def __init__(self, identity: ServerIdentity, *, command: str, telemetry: Any = None,
                 structured_approvals: bool = False):
        self.identity = identity
        self.command = command  # how the user starts this server, for the advice in a denial
        self.telemetry = telemetry  # a peon.otel.Telemetry, or None (nothing of OpenTelemetry loaded)
        self.structured_approvals = structured_approvals  # questions carry the request for programs too
        self.approval_wait = 120.0 + APPROVAL_MARGIN_SECONDS  # until the session says its timeout
        self.running: dict[str, CallT] = {}  # by the session's call id
        self.awaiting_retry: dict[str, CallT] = {}  # by the session's call id, oldest first
        self.closing = False
        self._signer = RequestStateSigner(secrets.token_bytes(32))
        self._question_ids = itertools.count(1)
        self._restart_lock = threading.Lock()

    # -- requests ---------------------------------------------------------------------------------------

    @staticmethod
    def in_use(peer: Peer | None, request_id: Any) -> dict[str, Any] | None:
        """The error answer to a request whose id a running call of the same client already has."""
        if peer is None or request_id not in peer.calls:
            return None
        return error_response(request_id, INVALID_REQUEST,
                              f"request id {shown(request_id)} is already in use by a running call")

    @staticmethod
    def open(call: CallT) -> None:
        """The call's request is now its client's (see :meth:`in_use`)."""
        if call.peer is not None:
            call.peer.calls[call.request_id] = call

    def resume(self, retry: StartCall) -> CallT | dict[str, Any]:
        """The retry (a 2026-07-28 ``StartCall`` with a ``requestState``) of a call answered
        ``input_required``: the call, now answering the retry, or the error answer to the retry. A call that
        finished meanwhile has its ``final`` result; one still running has the retry's approval answer."""
        self._expire_retries()
        ref = self._signer.verify(retry.request_state)
        call = self.awaiting_retry.get(ref) if ref is not None else None
        if ref is None or call is None:
            reason = "was not issued by this server" if ref is None else "refers to a call that is no longer waiting"
            return error_response(retry.id, INVALID_PARAMS, f"Invalid params: requestState {reason}")
        if (retry.name, retry.arguments) != (call.name, call.arguments):
            return error_response(retry.id, INVALID_PARAMS, "Invalid params: a retry must repeat the name and "
                                                            "arguments of the original call")
        del self.awaiting_retry[ref]
        call.request_id, call.progress_token, call.version = retry.id, retry.progress_token, retry.version
        if call.final is None:
            self.open(call)
            approval = call.approval
            if approval is not None:
                approval.resolve(decision_from_retry(retry.input_responses, APPROVAL_KEY,
                                                     approval.request.get("scopes") or (),
                                                     suggested_prefix(approval.request)))
        return call

    def _expire_retries(self) -> None:
        now = time.monotonic()
        for ref, call in list(self.awaiting_retry.items()):
            if call.final is not None and now - call.finished_at > RETRY_KEEP_SECONDS:
                del self.awaiting_retry[ref]

    # -- submitting -------------------------------------------------------------------------------------

    @staticmethod
    def wants_progress(call: CallT) -> bool:
        """Whether to ask the session for the call's progress: only when it can be sent — the request has a
        token, or a 2026-07-28 retry may bring one. Without it, the worker runs no progress timer."""
        return call.progress_token is not None or (is_modern(call.version) and call.can_elicit)

    def tracing(self, call: CallT, session_id: str | None = None) -> dict[str, Any]:
        """Start the call's trace when telemetry is on; the keyword arguments that carry it to the session."""
        if self.telemetry is None:
            return {}
        call.trace = self.telemetry.call(call.name, call.method, call.meta, session_id)
        return {"trace": call.trace.traceparent()}

    def submitted(self, call: CallT, handle: Any) -> None:
        """The session took the call: from now on it is known by its call id. A call cancelled while it was
        being submitted (its request cancelled, or its stream closed) is cancelled in the session at once."""
        if call.trace is not None:
            call.trace.submitted(handle.call_id)
        call.handle, call.key = handle, handle.call_id
        self.running[call.key] = call
        if call.cancelled:
            handle.cancel()

    def registered(self, call_id: str) -> bool:
        """Whether an approval request about ``call_id`` need wait no longer for its call's submit."""
        return call_id in self.running or self.closing

    def progress(self, call: CallT, update: dict[str, Any]) -> dict[str, Any] | None:
        """The progress notification a session update is worth, if any."""
        if call.cancelled or call.request_id is None or call.progress_token is None:
            return None
        shaped = progress_notification(call.progress_token, update, call.last_progress)
        if shaped is None:
            return None
        message, call.last_progress = shaped
        return message

    # -- finishing ----------------------------------------------------------------------------------------

    def finish(self, call: CallT, result: ToolResult) -> dict[str, Any] | None:
        """The call's result came: the answer to its request, or ``None`` when it has none to send (it was
        cancelled, or its input_required answer still awaits the retry, which will get the result)."""
        if call.trace is not None:
            call.trace.finished(result)
        self.running.pop(call.key, None)
        if call.approval is not None:
            call.approval.resolve({"decision": "deny", "reason": "the call already finished"})
        if call.request_id is None:
            call.final, call.finished_at = result, time.monotonic()
            return None
        if call.peer is not None:
            call.peer.calls.pop(call.request_id, None)
        return None if call.cancelled else self.answer(call, result)

    def answer(self, call: CallT, result: ToolResult) -> dict[str, Any]:
        """The answer to the call's request for ``result``."""
        if call.step is not None:
            return self.step_answer(call.request_id, call.version, call.step, result)
        return respond(call.request_id, call.version, call_result(result, call.version), self.identity)

    def step_answer(self, request_id: Any, version: str, step: Step, result: ToolResult) -> dict[str, Any]:
        """The answer to a prompts/resources/completion request whose step's call gave ``result``."""
        settled = settle(step, result)
        if isinstance(settled, Answer):
            return respond(request_id, version, settled.result, self.identity)
        return error_response(request_id, settled.code, settled.message, settled.data)

    # -- cancelling ---------------------------------------------------------------------------------------

    @staticmethod
    def withdraw(call: CallT) -> bool:
        """Mark the call cancelled (its request gets no answer); ``False`` when it already was. The
        transport then cancels its handle and calls :meth:`deny_question`, in that order, so the
        supervisor learns of the cancel before the denial."""
        if call.cancelled:
            return False
        call.cancelled = True
        return True

    @staticmethod
    def deny_question(call: CallT, reason: str) -> dict[str, Any] | None:
        """Deny the withdrawn call's open question; the ``notifications/cancelled`` that withdraws its
        ``elicitation/create`` from the client, if one was sent."""
        approval = call.approval
        if approval is None:
            return None
        approval.resolve({"decision": "deny", "reason": reason})
        if approval.elicitation_id is None:
            return None
        return {"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": approval.elicitation_id, "reason": "the tool call was cancelled"}}

    def cancel(self, call: CallT, reason: str) -> dict[str, Any] | None:
        """:meth:`withdraw`, cancel the handle, :meth:`deny_question`: for a transport that may cancel the
        handle wherever it uses the book."""
        if not self.withdraw(call):
            return None
        if call.handle is not None:
            call.handle.cancel()
        return self.deny_question(call, reason)

    def deny_open_questions(self, reason: str) -> None:
        for call in list(self.running.values()):
            if call.approval is not None:
                call.approval.resolve({"decision": "deny", "reason": reason})

    # -- approval -----------------------------------------------------------------------------------------

    def askable(self, call_id: str) -> CallT | dict[str, Any]:
        """The call an approval request is about, or the denial when nobody can be asked."""
        call = self.running.get(call_id)
        if call is None or call.cancelled or self.closing or (call.request_id is None and call.task is None):
            return {"decision": "deny", "reason": "the call is no longer pending"}
        if not call.can_elicit:
            return {"decision": "deny", "reason": "the MCP client did not declare the elicitation capability, so "
                    f"nobody can be asked; allow the risk in the configuration (or with {self.command} --allow)"}
        return call

    def network_carrier(self) -> CallT | dict[str, Any]:
        """The call a question about a sandboxed command's connection (``sandbox.network_ask``) is put
        through, or the denial: the one call running a command (``bash``) — the proxy cannot tell which
        command connected, so with several running none is asked (another client must never answer for
        this one's command) — and only while it can be asked in the middle of its run (a client of
        2025-11-25 or earlier that declared elicitation: 2026-07-28 asks only by answering the request)."""
        running = [call for call in self.running.values() if call.name == "bash" and not call.cancelled]
        if self.closing or len(running) != 1:
            return {"decision": "deny", "reason": "a connection question is put to the client whose command "
                    "connects, and " + ("the session is closing" if self.closing else
                                        "no command is running" if not running else
                                        f"{len(running)} commands are running, so which one connects is not known")}
        call = running[0]
        if call.request_id is None or not call.can_elicit or is_modern(call.version) or call.approval is not None:
            return {"decision": "deny", "reason": "the MCP client of the command cannot be asked during its run "
                    "(it needs the elicitation capability, under protocol 2025-11-25 or earlier); name the host "
                    "in sandbox.network instead"}
        return call

    def ask(self, call: CallT, request: dict[str, Any],
            wake: Callable[[], None]) -> tuple[PendingApproval, dict[str, Any]]:
        """Put ``request`` to the call's client: the open question, and the message that asks it — an
        ``elicitation/create`` request (2025-11-25 and earlier: it has an ``elicitation_id``), or the
        ``input_required`` answer to the call's request (2026-07-28: the call now awaits the retry)."""
        approval = PendingApproval(request=request, wake=wake)
        call.approval = approval
        elicitation = approval_elicitation(request, call.version)
        if self.structured_approvals:
            elicitation["_meta"] = {APPROVAL_META_KEY: {k: v for k, v in request.items()
                                                        if k not in ("op", "request_id")}}
        if is_modern(call.version):
            return approval, self._park(call, elicitation)
        assert call.peer is not None  # a client of 2025-11-25 or earlier is always a peer
        approval.elicitation_id = f"peon-approval-{next(self._question_ids)}"
        call.peer.elicitations[approval.elicitation_id] = approval
        return approval, {"jsonrpc": "2.0", "id": approval.elicitation_id, "method": "elicitation/create",
                          "params": elicitation}

    def ask_in_task(self, call: CallT, request: dict[str, Any],
                    wake: Callable[[], None]) -> tuple[PendingApproval, dict[str, Any] | None]:
        """:meth:`ask` for a call that runs as a task: under 2025-11-25 the ``elicitation/create`` request,
        tagged with the task; under 2026-07-28 no message — the question is the task's input request
        (``approval.elicitation``), answered by ``tasks/update`` (:meth:`answer_in_task`)."""
        if not is_modern(call.version):
            approval, message = self.ask(call, request, wake)
            meta = message["params"].setdefault("_meta", {})
            meta[RELATED_TASK_KEY] = {"taskId": call.task.task_id}
            return approval, message
        approval = PendingApproval(request=request, wake=wake)
        approval.elicitation = approval_elicitation(request, call.version)
        call.approval = approval
        return approval, None

    @staticmethod
    def answer_in_task(call: CallT, responses: Any) -> None:
        """A ``tasks/update``'s responses to the task's open question (2026-07-28)."""
        approval = call.approval
        if approval is not None:
            approval.resolve(decision_from_retry(responses, APPROVAL_KEY, approval.request.get("scopes") or (),
                                                 suggested_prefix(approval.request)))

    def _park(self, call: CallT, elicitation: dict[str, Any]) -> dict[str, Any]:
        """2026-07-28: answer the call's request with input_required; the call waits for the client's retry."""
        while len(self.awaiting_retry) >= MAX_AWAITING_RETRY:
            del self.awaiting_retry[next(iter(self.awaiting_retry))]
        state = self._signer.sign(call.key)
        self.awaiting_retry[call.key] = call
        if call.peer is not None:
            call.peer.calls.pop(call.request_id, None)
        request_id, call.request_id = call.request_id, None
        return respond(request_id, call.version, input_required(APPROVAL_KEY, elicitation, state), self.identity)

    @staticmethod
    def reply(peer: Peer, reply: ClientReply) -> bool:
        """The client's response (a ``ClientReply``) to an ``elicitation/create``; ``False`` when no question
        has its id."""
        approval = peer.elicitations.get(str(reply.id))
        if approval is None:
            return False
        approval.resolve(decision_from_elicitation(reply.result, reply.error, approval.request.get("scopes") or (),
                                                   suggested_prefix(approval.request)))
        return True

    def answered(self, call: CallT, approval: PendingApproval, asked_ns: int) -> dict[str, Any]:
        """The question's decision once its wait is over (a denial when no answer came); the question is
        forgotten."""
        approval.resolve({"decision": "deny", "reason": f"no answer within {self.approval_wait:g} s"})
        if approval.elicitation_id is not None and call.peer is not None:
            call.peer.elicitations.pop(approval.elicitation_id, None)
        call.approval = None
        answer = approval.answer
        assert answer is not None
        if call.trace is not None:
            by_user = str(answer.get("reason", "")).startswith("answered by the user")
            call.trace.approval(asked_ns, str(answer.get("decision")), "client" if by_user else "peon")
        return answer

    # -- the session --------------------------------------------------------------------------------------

    def recover(self, session: Any, say: Callable[[int, str], None], adopt: Callable[[], None]) -> None:
        """If the session's supervisor died, start a fresh one for the same session (one restart at a time,
        none once closing), then ``adopt`` it (its tools and skills) before another call may start. ``say``
        logs, with a :mod:`logging` level. Blocks for the restart: call it where blocking is allowed."""
        with self._restart_lock:
            if self.closing or session.alive:
                return
            say(logging.WARNING, "the session's supervisor died; starting a fresh one for the same session")
            try:
                session.restart()
            except PeonError as exc:
                say(logging.ERROR, f"could not restart the session: {exc.code.value}: {exc.message}")
                return
            say(logging.INFO, f"session restarted (supervisor pid {session.supervisor_pid})")
            adopt()
