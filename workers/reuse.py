"""Whether a worker may serve another call after the one it just answered (pure, no I/O).

Promise: :func:`serves_again` is the one rule the worker and the supervisor's pool both apply, so they
agree without a message about it. A worker serves another call only after a call of a tool that
starts no process (``Tool.starts_processes`` false) whose outcome was a value or an expected refusal
of its input or of the workspace's state (:data:`CLEAN_ERRORS`): any other outcome — a timeout, a
cancel, an unexpected failure, a too-large result, a crash — may have left the worker in a state
nobody chose, so it is replaced (fail closed: a code not listed here retires the worker). The pool
adds what only it knows: the call was not cancelled, and the worker is under ``limits.worker_max_calls``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peon.errors import ErrorCode

# Errors a tool raises about its input or the workspace, through its ordinary path: the worker is in
# the state it was in before the call.
CLEAN_ERRORS: frozenset[str] = frozenset(code.value for code in (
    ErrorCode.INVALID_INPUT,
    ErrorCode.INVALID_PATH,
    ErrorCode.OUTSIDE_WORKSPACE,
    ErrorCode.NOT_FOUND,
    ErrorCode.ALREADY_EXISTS,
    ErrorCode.NOT_A_REGULAR_FILE,
    ErrorCode.NOT_A_DIRECTORY,
    ErrorCode.NOT_UTF8,
    ErrorCode.STALE,
    ErrorCode.IO_ERROR,
    ErrorCode.CHANGED_SINCE_APPROVAL,
    ErrorCode.UNKNOWN_SKILL,
    ErrorCode.SKILL_MOVED,
))


def serves_again(starts_processes: bool, reply: Mapping[str, Any]) -> bool:
    """Whether the worker that sent ``reply`` (a ``result`` message) for a tool that does (or does not)
    start processes may be handed another call."""
    if starts_processes or reply.get("op", "result") != "result":
        return False
    if reply.get("ok") is True:
        return True
    error = reply.get("error")
    return isinstance(error, Mapping) and error.get("code") in CLEAN_ERRORS
