"""What the job tools (``job_output``, ``job_stop``, ``job_list``, ``job_write``) may ask of the supervisor
that owns a session's jobs, and how a page of output is shown to the model (pure).

Promise: :class:`JobsAccess` is the whole surface the job tools see — they run in the supervisor
(``Tool.served_by_supervisor``) and never touch a job's worker or its process. :func:`page_value`
turns a :class:`~peon.core.output.store.Page` into a result whose ``next_offset`` continues exactly where
the returned bytes end: a page never ends inside a UTF-8 character (the character is left for the next
page) and never begins inside one, so paging with ``next_offset`` returns every retained byte once.

``job_write`` is approved in the supervisor before it runs, from the job's input as it is then
(:meth:`JobsAccess.input_state`, reached through :func:`session_jobs`: the supervisor registers its
table with :func:`serve_jobs`); :meth:`JobsAccess.write` writes only while the job's input is still the
one approved (its ``version``), else ``changed_since_approval``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from peon.core.errors import ErrorCode, ToolError

from peon.core.output.store import Page
from peon.core.output.terminal import clean_terminal_text
from peon.core.output.truncation import decode, utf8_prefix_end, utf8_suffix_start

JobState = Literal["running", "exited", "killed"]
JOB_STATES: tuple[JobState, ...] = ("running", "exited", "killed")
MAX_PAGE_BYTES = 1 << 20  # the most one job_output call returns
DEFAULT_PAGE_BYTES = 65536
MAX_WAIT_SECONDS = 60.0  # job_output's wait_seconds is clamped to this (and to limits.max_timeout_seconds)


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    tool: str
    command: str | None  # a bash job's command line; None for an agent
    background: bool
    state: JobState
    exit_code: int | None
    signal: str | None
    timed_out: bool
    started_at: str  # UTC, ISO 8601
    ended_at: str | None
    output_bytes: int  # everything it wrote
    output_retained_bytes: int  # what the output store still holds of it
    retained_from: int  # the oldest retained offset
    # Why a job ended without a result of its command (its worker or job host failed...): the error's
    # code, message and details; None otherwise.
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "job_id": self.job_id, "tool": self.tool, "command": self.command, "background": self.background,
            "state": self.state, "exit_code": self.exit_code, "signal": self.signal,
            "timed_out": self.timed_out, "started_at": self.started_at, "ended_at": self.ended_at,
            "output_bytes": self.output_bytes, "output_retained_bytes": self.output_retained_bytes,
            "retained_from": self.retained_from}
        if self.error is not None:
            value["error"] = self.error
        return value


@dataclass(frozen=True)
class InputState:
    """A running job's input as the supervisor follows it: its kind (a terminal or a pipe), whether it goes
    to a shell (:func:`peon.approval.typed_input.reads_shell_input`), the shell's line being typed (None:
    not known) and its unfinished command (``carry``), and the ``version`` every write advances."""

    job_id: str
    command: str | None
    kind: Literal["tty", "pipe"]
    shell: bool
    line: str | None
    carry: str
    version: int


class JobsAccess(Protocol):
    clean_output: bool

    def info(self, job_id: str) -> JobInfo:
        """The job's state; ``ToolError(unknown_job)`` when the session has no such job."""

    def list(self) -> list[JobInfo]:
        """Every job the session still has a record of, oldest first."""

    def read(self, job_id: str, offset: int, limit: int) -> Page:
        """Retained output from ``offset`` (absolute), at most ``limit`` bytes."""

    async def wait(self, job_id: str, offset: int, seconds: float) -> None:
        """Return once the job has output past ``offset`` or is no longer running, or after ``seconds``."""

    async def stop(self, job_id: str) -> JobInfo:
        """Cancel a running job (TERM to its group, the cancel grace, KILL, every descendant) and
        return its final state; a job that has ended is returned as it is."""

    def input_state(self, job_id: str) -> InputState:
        """The job's input now; ``unknown_job``, ``job_ended`` or ``no_input`` when nothing can be written."""

    def write(self, job_id: str, data: bytes, *, eof: bool, version: int, line: str | None, carry: str) -> None:
        """Send ``data`` (then, with ``eof``, the end of input) to the job's command, if its input is
        still at ``version``; the shell's line and unfinished command are then ``line`` and ``carry``."""

    async def screen(self, job_id: str) -> dict[str, Any] | None:
        """A terminal job's screen (:meth:`peon.core.output.screen.Screen.render`); None for another job."""


_SESSION_JOBS: list[JobsAccess] = []


def serve_jobs(jobs: JobsAccess) -> None:
    """Make ``jobs`` the session's jobs that :func:`session_jobs` returns (the supervisor, once)."""
    _SESSION_JOBS[:] = [jobs]


def session_jobs() -> JobsAccess:
    """The jobs of the session this process serves; ``no_input`` where there are none (not a supervisor)."""
    if not _SESSION_JOBS:
        raise ToolError(ErrorCode.NO_INPUT, "this process serves no session's jobs")
    return _SESSION_JOBS[0]


JOB_INFO_PROPERTIES: dict[str, Any] = {
    "job_id": {"type": "string"},
    "tool": {"type": "string"},
    "command": {"type": ["string", "null"]},
    "background": {"type": "boolean"},
    "state": {"type": "string", "enum": list(JOB_STATES)},
    "exit_code": {"type": ["integer", "null"]},
    "signal": {"type": ["string", "null"]},
    "timed_out": {"type": "boolean"},
    "started_at": {"type": "string"},
    "ended_at": {"type": ["string", "null"]},
    "output_bytes": {"type": "integer"},
    "output_retained_bytes": {"type": "integer"},
    "retained_from": {"type": "integer"},
    "error": {"type": "object", "description": "Why the job ended without its command's result (code, message, "
                                               "details), e.g. its job host crashed; absent otherwise."},
}


def page_value(page: Page, *, raw: bool, clean: bool, finished: bool) -> dict[str, Any]:
    """The ``job_output`` fields for one page (see the module's promise)."""
    data = page.data
    start = 0 if raw or page.dropped_before is None else utf8_suffix_start(data, 0)
    end = len(data)
    if not raw and not (finished and page.next_offset == page.total_bytes):
        cut = utf8_prefix_end(data, end)
        if cut > start:
            end = cut
    data = data[start:end]
    text, invalid = decode(data)
    value: dict[str, Any] = {
        "offset": page.offset + start,
        "next_offset": page.offset + end,
        "output": text if raw or not clean else clean_terminal_text(text),
        "returned_bytes": len(data),
        "output_bytes": page.total_bytes,
        "retained_from": page.retained_from,
        "dropped_before": page.dropped_before,
        "output_invalid_utf8": invalid,
        "eof": finished and page.offset + end >= page.total_bytes,
    }
    if raw:
        value["output_base64"] = base64.b64encode(data).decode("ascii")
    return value
