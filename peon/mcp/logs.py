"""MCP logging, sans I/O: the level a client asked for, what Peon tells it, and how often.

Promises:

* ``logging/setLevel`` takes one of the eight syslog levels the protocol names; anything else is
  :class:`LevelProblem` (``-32602``);
* :class:`LogFeed` turns events of the session — approvals, kills, limits, supervisor restarts — into
  ``notifications/message`` at or above the client's level, at most :data:`BURST` at once and
  :data:`RATE` a second on average; what it drops is counted and said in the next message it sends;
* a message carries only Peon's own facts (tool, call id, error code, decision, decider): never a
  command's output, a file's content or an error's free text, which could quote either; and what it
  carries is redacted all the same (:func:`peon.core.redaction.redactor.formats_only`: a tool name or
  call id a client made up in a credential's format does not come back in a log message).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from peon.client.result import ToolResult
from peon.core.redaction.redactor import formats_only

from peon.mcp.jsonrpc import shown

Level = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
LEVELS: tuple[Level, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
LOGGER = "peon"
RATE = 5.0  # messages a second, on average
BURST = 20

# Results worth a message, by error code: what the session did to a call (kills, limits), at what level.
_RESULT_LEVELS: dict[str, Level] = {
    "denied": "notice", "timeout": "warning", "too_large": "warning", "limit_exceeded": "warning",
    "busy": "warning", "worker_crashed": "error", "worker_oom": "error", "worker_hung": "error",
    "supervisor_died": "critical", "audit_failed": "critical", "sandbox_unavailable": "error",
    "job_limit_reached": "warning", "cancelled": "info",
}


class LevelProblem(ValueError):
    pass


def check_level(params: Mapping[str, Any]) -> Level:
    level = params.get("level")
    for known in LEVELS:
        if level == known:
            return known
    raise LevelProblem(f'"level" must be one of {", ".join(LEVELS)}, got {shown(level)}')


def result_event(result: ToolResult) -> tuple[Level, dict[str, Any]] | None:
    """The message a finished call is worth, if any: its error code, or a process call's timeout."""
    if result.ok:
        value = result.value or {}
        if value.get("timed_out"):
            return "warning", {"event": "killed", "reason": "timeout", "tool": result.tool,
                               "call_id": result.call_id}
        if value.get("truncated") and "exit_code" in value:
            return "info", {"event": "limit", "limit": "max_output_bytes", "tool": result.tool,
                            "call_id": result.call_id}
        return None
    assert result.error is not None
    level = _RESULT_LEVELS.get(result.error.code)
    if level is None:
        return None
    return level, {"event": "call_failed", "code": result.error.code, "tool": result.tool, "call_id": result.call_id}


def approval_event(request: Mapping[str, Any], answer: Mapping[str, Any]) -> tuple[Level, dict[str, Any]]:
    decision = str(answer.get("decision"))
    return ("notice" if decision != "deny" else "warning"), {
        "event": "approval", "decision": decision, "decided_by": "client",
        "tool": request.get("tool"), "call_id": request.get("call_id"), "risk": request.get("risk")}


@dataclass
class LogFeed:
    """The client's level and the rate limit (a token bucket); the caller supplies the clock."""

    level: Level | None = None  # None: the client never asked, nothing is sent
    tokens: float = BURST
    last: float = 0.0
    dropped: int = 0
    sent: int = field(default=0)

    def set_level(self, level: Level) -> None:
        self.level = level

    def message(self, level: Level, data: dict[str, Any], now: float) -> dict[str, Any] | None:
        """The notification to send now, or ``None`` (below the level, or over the rate)."""
        if self.level is None or LEVELS.index(level) < LEVELS.index(self.level):
            return None
        self.tokens = min(float(BURST), self.tokens + (now - self.last) * RATE) if self.last else self.tokens
        self.last = now
        if self.tokens < 1.0:
            self.dropped += 1
            return None
        self.tokens -= 1.0
        if self.dropped:
            data = {**data, "dropped_before": self.dropped}
            self.dropped = 0
        self.sent += 1
        return {"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": level, "logger": LOGGER, "data": formats_only().redact_value(data)}}
