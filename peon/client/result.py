"""The outcome of one call as the embedding API returns it.

Promise: every call produces exactly one :class:`ToolResult`: ``ok`` with the tool's JSON ``value``, or
not ``ok`` with an :class:`ErrorInfo` whose ``code`` is one of :class:`~peon.core.errors.ErrorCode`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from peon.core.errors import ErrorCode

CHANGE_COUNTS = ("added", "modified", "deleted", "renamed", "mode_changes")


def new_call_id() -> str:
    """A call's id: 12 hex digits, 48 random bits. (``uuid4`` made the same bits through an object that
    cost ~50 µs more on a cold CPU, on every call's path.)"""
    return os.urandom(6).hex()


def change_counts(changes: Mapping[str, Any]) -> str:
    """What a call's ``changes`` counts, in words ("1 added, 2 modified (+3 -1 lines)"); "" when it counts
    nothing. The one phrase the MCP result line and ``peon changes``/``peon rewind`` show."""
    parts = [f"{changes.get(key)} {key.replace('_', ' ')}" for key in CHANGE_COUNTS if changes.get(key)]
    if not parts:
        return ""
    return f"{', '.join(parts)} (+{changes.get('lines_added', 0)} -{changes.get('lines_removed', 0)} lines)"


@dataclass(frozen=True)
class ErrorInfo:
    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    tool: str
    ok: bool
    value: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    notes: tuple[str, ...] = ()  # for the agent, from the user's after-call hooks
    # What the call changed in the workspace, from its checkpoints (docs/changes.md); None when it was not
    # checkpointed (a read-only tool, or checkpoints.enabled = false).
    changes: dict[str, Any] | None = None

    @classmethod
    def from_message(cls, call_id: str, tool: str, message: dict[str, Any]) -> ToolResult:
        given = message.get("notes")
        notes = tuple(str(n) for n in given) if isinstance(given, list) else ()
        changes = message.get("changes") if isinstance(message.get("changes"), dict) else None
        if message.get("ok"):
            return cls(call_id, tool, True, value=message.get("value") or {}, notes=notes, changes=changes)
        err = message.get("error") or {}
        return cls(call_id, tool, False, error=ErrorInfo(
            str(err.get("code", ErrorCode.TOOL_FAILED.value)), str(err.get("message", "")),
            dict(err.get("details") or {}),
        ), notes=notes, changes=changes)

    @classmethod
    def failure(cls, call_id: str, tool: str, code: ErrorCode, message: str,
                details: dict[str, Any] | None = None) -> ToolResult:
        return cls(call_id, tool, False, error=ErrorInfo(code.value, message, dict(details or {})))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"call_id": self.call_id, "tool": self.tool, "ok": self.ok}
        if self.ok:
            out["value"] = self.value
        else:
            assert self.error is not None
            out["error"] = {"code": self.error.code, "message": self.error.message}
            if self.error.details:
                out["error"]["details"] = self.error.details
        if self.notes:
            out["notes"] = list(self.notes)
        if self.changes is not None:
            out["changes"] = self.changes
        return out


class PendingResult:
    """The one result of a submitted call, awaited from any thread: the first :meth:`_resolve` wins,
    later ones are ignored, and every callback runs exactly once (at once when added after the result)."""

    def __init__(self, call_id: str, tool: str) -> None:
        self.call_id = call_id
        self.tool = tool
        self._result: ToolResult | None = None
        self._callbacks: list[Callable[[ToolResult], None]] = []
        self._lock = threading.Lock()
        # Held until the result is set, then passed by each waiter in turn: a waiter wakes in one lock
        # hand-off, where a threading.Event's Condition took ~50 µs more per call on a cold CPU.
        self._latch = threading.Lock()
        self._latch.acquire()

    def done(self) -> bool:
        return self._result is not None

    def result(self, timeout: float | None = None) -> ToolResult:
        if self._result is None:
            if not self._latch.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
                raise TimeoutError(f"call {self.call_id} ({self.tool}) has not finished after {timeout} s")
            self._latch.release()
        assert self._result is not None
        return self._result

    def add_done_callback(self, fn: Callable[[ToolResult], None]) -> None:
        with self._lock:
            if self._result is None:
                self._callbacks.append(fn)
                return
        fn(self._result)

    def _resolve(self, result: ToolResult) -> None:
        with self._lock:
            if self._result is not None:
                return
            self._result = result
            callbacks, self._callbacks = self._callbacks, []
        self._latch.release()
        for fn in callbacks:
            fn(result)
