"""The calls a session has sent to its supervisor and not yet had answered.

Promises:

* the table is bounded: a call beyond ``limits.max_queued_calls`` unanswered calls, or whose encoded
  input would take the unanswered calls past ``limits.max_queued_bytes``, is refused
  (:meth:`PendingCalls.over_bounds`) before it is sent — a lone call is always held;
* a call leaves the table once (:meth:`PendingCalls.take`, :meth:`PendingCalls.fail_all`), so it is
  answered once; the one taken last stays known, so that a reader interrupted between taking a call
  and answering it can answer it when it dispatches the same line again;
* what the liveness watch needs about each call is recorded here: when it was sent, how long it asked to
  wait, by when the supervisor said it must be answered (``started``), by when its approver must have
  answered (``approval_request``).

Every field is guarded by :attr:`PendingCalls.lock`, which the session also holds for what it decides
together with the table (its death, the reader's sleep).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from peon.client.result import PendingResult, ToolResult
from peon.core.errors import ErrorCode

if TYPE_CHECKING:  # annotations only: the client loads the configuration code after its supervisor starts
    from peon.client.config.model import Limits

ProgressCallback = Callable[[dict[str, Any]], None]


class PendingCall(PendingResult):
    """One call sent to the supervisor: its result, and what the session knows of its sending."""

    def __init__(self, call_id: str, tool: str, on_progress: ProgressCallback | None):
        super().__init__(call_id, tool)
        self.on_progress = on_progress
        self.size = 0  # encoded bytes, counted against limits.max_queued_bytes while unanswered
        self.sent_at = 0.0  # time.monotonic() when it was sent
        self.own_wait = 0.0  # its yield_seconds: how long it asked to wait before its answer


class PendingCalls:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.handles: dict[str, PendingCall] = {}  # in the order they were sent
        self.answer_by: dict[str, float] = {}  # running calls: when the supervisor must have answered
        self.asked_until: dict[str, float] = {}  # calls put to the approver: when the supervisor denies them
        self.last_answer_at = 0.0  # when the supervisor last answered a call: the next may start then
        self.answering: PendingCall | None = None  # the call whose answer was dispatched last

    def over_bounds(self, size: int, limits: Limits) -> tuple[str, dict[str, Any]] | None:
        """Why a call of ``size`` encoded bytes cannot be held now (limits.max_queued_calls and
        max_queued_bytes count the calls submitted and not yet answered); a lone call is always held.
        The caller holds :attr:`lock`."""
        held = len(self.handles)
        if held >= limits.max_queued_calls:
            return (f"the session already holds {held} unanswered calls; limits.max_queued_calls is "
                    f"{limits.max_queued_calls}", {"limit": "max_queued_calls", "value": limits.max_queued_calls})
        held_bytes = sum(h.size for h in self.handles.values())
        if held and held_bytes + size > limits.max_queued_bytes:
            return (f"the session's unanswered calls hold {held_bytes} bytes of input and this call {size} more; "
                    f"limits.max_queued_bytes is {limits.max_queued_bytes}",
                    {"limit": "max_queued_bytes", "value": limits.max_queued_bytes})
        return None

    def take(self, call_id: str, again: bool = False) -> PendingCall | None:
        """The pending call ``call_id``, no longer pending; ``again``: also the one taken last, which a
        reader interrupted before it could answer it."""
        with self.lock:
            self.answer_by.pop(call_id, None)
            self.asked_until.pop(call_id, None)
            handle = self.handles.pop(call_id, None)
            if handle is not None:
                self.answering = handle
                self.last_answer_at = time.monotonic()
            elif again and self.answering is not None and self.answering.call_id == call_id:
                handle = self.answering
        return handle

    def started(self, call_id: str, answer_by: Any) -> None:
        """The supervisor started ``call_id`` and must answer it by ``answer_by`` (``time.monotonic()``)."""
        with self.lock:
            if call_id in self.handles and isinstance(answer_by, (int, float)):
                self.answer_by[call_id] = float(answer_by)

    def asked(self, call_id: str, timeout: Any) -> None:
        """The supervisor put ``call_id`` to the approver, who has ``timeout`` seconds to answer."""
        with self.lock:
            if call_id in self.handles and isinstance(timeout, (int, float)):
                self.asked_until[call_id] = time.monotonic() + min(float(timeout), 1e6)

    def fail_all(self, code: ErrorCode, message: str) -> None:
        """Answer every pending call with the error ``code``; none is pending afterwards."""
        with self.lock:
            handles, self.handles = list(self.handles.values()), {}
            self.answer_by.clear()
            self.asked_until.clear()
        for handle in handles:
            handle._resolve(ToolResult.failure(handle.call_id, handle.tool, code, message))
