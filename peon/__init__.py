"""Peon: a tool runtime for AI coding agents.

Every call is validated, risk-rated, approved, executed in an isolated worker process, bounded in time
and output, and cleaned up completely: nothing a call started outlives it.

The public surface: :class:`Session` / :class:`AsyncSession` (embedding), :class:`RemoteSession` /
:class:`AsyncRemoteSession` (the same API for a session behind ``peon serve``), :class:`Tool` and
:class:`ToolRisk` (the extension contract), :class:`ToolResult` and :class:`ErrorCode` (outcomes),
:mod:`peon.approvers`.

Names are imported on first use, so a process that only needs the tool contract (a worker) does not
load the embedding API and its configuration machinery.
"""

from importlib import import_module

from ._packages import ensure_own_packages

ensure_own_packages()

_EXPORTS = {
    "AsyncSession": "aio", "CallHandle": "session", "Session": "session",
    "AsyncRemoteSession": "remote", "RemoteCallHandle": "remote", "RemoteSession": "remote",
    "CancelToken": "cancel", "Deadline": "cancel",
    "ConfigError": "errors", "ErrorCode": "errors", "PeonError": "errors", "RegistrationError": "errors",
    "SessionError": "errors", "ToolError": "errors",
    "ErrorInfo": "result", "ToolResult": "result",
    "RiskAssessment": "tool", "SessionView": "tool", "Tool": "tool", "ToolContext": "tool", "ToolRisk": "tool",
}

__all__ = ["approvers", *_EXPORTS]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "approvers":
        return import_module(".approvers", __name__)
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'peon' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
