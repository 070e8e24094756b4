"""The outcome of one call as the embedding API returns it.

Promise: every call produces exactly one :class:`ToolResult`: ``ok`` with the tool's JSON ``value``, or
not ``ok`` with an :class:`ErrorInfo` whose ``code`` is one of :class:`~peon.errors.ErrorCode`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ErrorCode


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

    @classmethod
    def from_message(cls, call_id: str, tool: str, message: dict[str, Any]) -> ToolResult:
        if message.get("ok"):
            return cls(call_id, tool, True, value=message.get("value") or {})
        err = message.get("error") or {}
        return cls(call_id, tool, False, error=ErrorInfo(
            str(err.get("code", ErrorCode.TOOL_FAILED.value)), str(err.get("message", "")),
            dict(err.get("details") or {}),
        ))

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
        return out
