"""Stable error codes and the exceptions that carry them.

Promise: every failure Peon reports has a code from :class:`ErrorCode` (a stable, machine-readable
string that never changes meaning) and a human sentence naming the rule that was broken and the value
that broke it. Codes are only ever added, never renamed or removed.
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class ErrorCode(str, Enum):
    # The call itself
    INVALID_INPUT = "invalid_input"  # input is not a JSON object or fails the tool's schema
    UNKNOWN_TOOL = "unknown_tool"  # no tool registered under that name
    DENIED = "denied"  # the approval policy or the approver refused the call
    CANCELLED = "cancelled"  # cancelled before it started, or a non-process tool was cancelled
    TIMEOUT = "timeout"  # a non-process tool ran past its deadline
    TOO_LARGE = "too_large"  # an input, file or message exceeds a configured bound
    # Reserved, never produced by Peon: a per-call resource limit (memory, processes) is a result, reported
    # in the process result's ``limit_exceeded`` field (docs/embedding.md). Codes are never removed.
    LIMIT_EXCEEDED = "limit_exceeded"
    TOOL_FAILED = "tool_failed"  # the tool raised an unexpected exception (a bug in the tool)
    BUSY = "busy"  # the session's call queue is full (limits.max_queued_calls / max_queued_bytes)
    AUDIT_FAILED = "audit_failed"  # the decision could not be written to the audit log, so the call did not run

    # The runtime
    WORKER_CRASHED = "worker_crashed"  # the worker process died before reporting a result
    WORKER_OOM = "worker_oom"  # the worker was killed by the out-of-memory killer
    WORKER_HUNG = "worker_hung"  # the worker did not finish within deadline + grace and was killed
    SUPERVISOR_DIED = "supervisor_died"  # the session's supervisor process is gone
    SESSION_CLOSED = "session_closed"  # the session was closed before the call finished
    CONFIG_INVALID = "config_invalid"  # a configuration file or override is invalid
    REGISTRATION_FAILED = "registration_failed"  # a tool could not be registered

    # Workspace files
    INVALID_PATH = "invalid_path"  # not a workspace-relative UTF-8 path (absolute, NUL, empty)
    OUTSIDE_WORKSPACE = "outside_workspace"  # the path resolves outside the workspace
    NOT_FOUND = "not_found"
    ALREADY_EXISTS = "already_exists"
    NOT_A_REGULAR_FILE = "not_a_regular_file"
    NOT_A_DIRECTORY = "not_a_directory"
    NOT_UTF8 = "not_utf8"
    STALE = "stale"  # expected_sha256 does not match the file on disk
    IO_ERROR = "io_error"  # an operating-system error not covered by a more specific code
    CHANGED_SINCE_APPROVAL = "changed_since_approval"  # what the call would open is not what was approved
    AMBIGUOUS = "ambiguous"  # an edit's old_string occurs more than once (and replace_all is not set)
    INVALID_PATCH = "invalid_patch"  # an apply_patch input breaks the patch grammar
    INVALID_PATTERN = "invalid_pattern"  # a grep regex or glob pattern that ripgrep refuses

    # Agents and skills
    ADAPTER_UNAVAILABLE = "adapter_unavailable"  # the agent executable is not on PATH
    UNKNOWN_SKILL = "unknown_skill"
    SKILL_MOVED = "skill_moved"  # the skill no longer resolves inside its original root

    # The OS sandbox
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"  # the sandbox is required (or was approved) but cannot be applied

    # Jobs (bash with background = true, job_output, job_stop, job_list)
    UNKNOWN_JOB = "unknown_job"  # no job of this session has that id (or its record was evicted)
    JOB_LIMIT_REACHED = "job_limit_reached"  # the session already runs jobs.max_running background jobs
    JOB_ENDED = "job_ended"  # job_write to a job that is no longer running
    NO_INPUT = "no_input"  # job_write to a job that takes none (no tty, no stdin "pipe") or whose command reads no more
    INPUT_NOT_ANALYZABLE = "input_not_analyzable"  # what a write to a shell would run cannot be known

    # Remote sessions (peon.RemoteSession talking to peon serve)
    CONNECTION_LOST = "connection_lost"  # the server was unreachable, or the connection broke before the result
    UNAUTHORIZED = "unauthorized"  # the server refused the request's bearer token, Host or Origin


class PeonError(Exception):
    """An error with a stable code, a human message and optional machine-readable details."""

    def __init__(self, code: ErrorCode | str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.details = dict(details or {})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code.value, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value!r}, {self.message!r})"


def error_reply(code: ErrorCode, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body of a failed call's answer, ``{"ok": false, "error": {code, message, details?}}``: the one
    builder the supervisor and the pool use for the failures they make up."""
    return {"ok": False, "error": PeonError(code, message, details).to_dict()}


class ToolError(PeonError):
    """Raised by a tool's executor (or by Peon on its behalf) to fail one call cleanly."""


class ConfigError(PeonError):
    """The configuration could not be loaded; the message names the file, key and expected type."""

    def __init__(self, message: str, details: dict[str, Any] | None = None):
        super().__init__(ErrorCode.CONFIG_INVALID, message, details)


class RegistrationError(PeonError):
    """A tool could not be registered (duplicate name, invalid schema, bad import path...)."""

    def __init__(self, message: str, details: dict[str, Any] | None = None):
        super().__init__(ErrorCode.REGISTRATION_FAILED, message, details)


class SessionError(PeonError):
    """The session cannot serve calls (supervisor failed to start, died, or was closed)."""
