"""Whether a worker may serve another call after the one it just answered (pure, no I/O).

Promise: a worker serves another call only after a call whose outcome was a value or an expected
refusal of its input or of the workspace's state (:data:`CLEAN_ERRORS`), and, for a tool that starts
processes (``Tool.starts_processes``), whose commands all ended by themselves with nothing left below
the worker (:func:`may_offer`). Any other outcome — a timeout, a cancel, an exceeded limit, a
descendant left behind, an unexpected failure, a too-large result, a crash, a protocol break — may have
left the worker in a state nobody chose, so it is replaced (fail closed: a code not listed here
retires the worker). The worker decides what only it knows and says so in its result (``reuse``); the
supervisor's pool accepts the offer only where :func:`serves_again` holds too, the call was not
cancelled, and the worker is under ``limits.worker_max_calls``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peon.core.errors import ErrorCode

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


def may_offer(reply: Mapping[str, Any], *, starts_processes: bool, commands_ended_clean: bool,
              left_children: bool, cancelled: bool, streams_live: bool) -> bool:
    """Whether a worker offers to serve another call after ``reply``: a tool that starts processes only
    after it ran commands that all ended clean; never after a cancel, with a child left, or after a
    background job (its worker serves that job alone)."""
    if cancelled or left_children or streams_live or (starts_processes and not commands_ended_clean):
        return False
    return serves_again(reply)


def serves_again(reply: Mapping[str, Any]) -> bool:
    """Whether the outcome in ``reply`` (a ``result`` message) leaves its worker fit for another call."""
    if reply.get("op", "result") != "result":
        return False
    if reply.get("ok") is True:
        return True
    error = reply.get("error")
    return isinstance(error, Mapping) and error.get("code") in CLEAN_ERRORS
