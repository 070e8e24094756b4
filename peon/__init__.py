"""Peon: a tool runtime for AI coding agents.

Every call is validated, risk-rated, approved, executed in an isolated worker process, bounded in time
and output, and cleaned up completely: nothing a call started outlives it.

The public surface: :class:`Session` / :class:`AsyncSession` (embedding), :class:`RemoteSession` /
:class:`AsyncRemoteSession` (the same API for a session behind ``peon serve``), :class:`Tool` and
:class:`ToolRisk` (the extension contract), :class:`ToolResult` and :class:`ErrorCode` (outcomes),
:mod:`peon.approvers`.

Names are imported on first use, so a process that only needs the tool contract (a worker) does not
load the embedding API and its configuration machinery. Type checkers and IDEs read the same names from
the ``TYPE_CHECKING`` imports below, so every public name has its real type (the package ships
``py.typed``).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import approvers as approvers
    from .client.aio import AsyncSession as AsyncSession
    from .core.cancel import CancelToken as CancelToken, Deadline as Deadline
    from .core.errors import (
        ConfigError as ConfigError,
        ErrorCode as ErrorCode,
        PeonError as PeonError,
        RegistrationError as RegistrationError,
        SessionError as SessionError,
        ToolError as ToolError,
    )
    from .client.remote import (
        AsyncRemoteSession as AsyncRemoteSession,
        RemoteCallHandle as RemoteCallHandle,
        RemoteSession as RemoteSession,
    )
    from .client.result import ErrorInfo as ErrorInfo, ToolResult as ToolResult
    from .client.session import CallHandle as CallHandle, Session as Session
    from .core.tool import (
        Prepared as Prepared,
        RiskAssessment as RiskAssessment,
        SessionView as SessionView,
        Tool as Tool,
        ToolContext as ToolContext,
    )
    from .core.risk import ToolRisk as ToolRisk

_EXPORTS = {
    "AsyncSession": "client.aio", "CallHandle": "client.session", "Session": "client.session",
    "AsyncRemoteSession": "client.remote", "RemoteCallHandle": "client.remote", "RemoteSession": "client.remote",
    "CancelToken": "core.cancel", "Deadline": "core.cancel",
    "ConfigError": "core.errors", "ErrorCode": "core.errors", "PeonError": "core.errors",
    "RegistrationError": "core.errors", "SessionError": "core.errors", "ToolError": "core.errors",
    "ErrorInfo": "client.result", "ToolResult": "client.result",
    "Prepared": "core.tool", "RiskAssessment": "core.tool", "SessionView": "core.tool", "Tool": "core.tool",
    "ToolContext": "core.tool",
    "ToolRisk": "core.risk",
}

__all__ = [
    "AsyncRemoteSession", "AsyncSession", "CallHandle", "CancelToken", "ConfigError", "Deadline", "ErrorCode",
    "ErrorInfo", "PeonError", "Prepared", "RegistrationError", "RemoteCallHandle", "RemoteSession",
    "RiskAssessment", "Session", "SessionError", "SessionView", "Tool", "ToolContext", "ToolError", "ToolResult",
    "ToolRisk", "approvers",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "approvers":
        return import_module(".approvers", __name__)
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'peon' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
