"""Peon: a tool runtime for AI coding agents.

Every call is validated, risk-rated, approved, executed in an isolated worker process, bounded in time
and output, and cleaned up completely: nothing a call started outlives it.

The public surface: :class:`Session` / :class:`AsyncSession` (embedding), :class:`Tool` and
:class:`ToolRisk` (the extension contract), :class:`ToolResult` and :class:`ErrorCode` (outcomes).
"""

from ._packages import ensure_own_packages

ensure_own_packages()

from . import approvers  # noqa: E402
from .aio import AsyncSession  # noqa: E402
from .cancel import CancelToken, Deadline  # noqa: E402
from .errors import ConfigError, ErrorCode, PeonError, RegistrationError, SessionError, ToolError  # noqa: E402
from .result import ErrorInfo, ToolResult  # noqa: E402
from .session import CallHandle, Session  # noqa: E402
from .tool import RiskAssessment, SessionView, Tool, ToolContext, ToolRisk  # noqa: E402

__all__ = [
    "approvers", "AsyncSession", "CallHandle", "CancelToken", "ConfigError", "Deadline", "ErrorCode", "ErrorInfo",
    "PeonError", "RegistrationError", "RiskAssessment", "Session", "SessionError", "SessionView", "Tool",
    "ToolContext", "ToolError", "ToolResult", "ToolRisk",
]
__version__ = "0.1.0"
