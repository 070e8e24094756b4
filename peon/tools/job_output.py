"""``job_output``: a job's output from an absolute byte offset, and its state. Risk: read-only.

Promise: served by the supervisor, which owns the jobs (``ctx.jobs``, :class:`peon.core.jobs.JobsAccess`);
it reads only the session's output store and never touches a process. Offsets are absolute positions
in everything the job wrote: paging with ``next_offset`` reads every retained byte exactly once, and
``dropped_before`` says when the bytes asked for were already evicted (the page then starts at the
oldest retained byte). ``wait_seconds`` waits (at most :data:`peon.core.jobs.MAX_WAIT_SECONDS` and the
call's deadline) until the job has output past ``offset`` or has ended. ``output`` is cleaned like
``bash``'s (``jobs.clean_output``); ``raw: true`` returns the text as written plus ``output_base64``,
the exact bytes. ``screen: true`` adds, for a terminal job (``bash`` with ``tty: true``), its screen as a
person would see it — rows of text, the cursor, whether a full-screen program shows — rendered from the
retained output by a terminal emulator (:mod:`peon.core.output.screen`); for any other job it is
``invalid_input``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from peon.core.errors import ErrorCode, ToolError
from peon.core.jobs import DEFAULT_PAGE_BYTES, JOB_STATES, MAX_PAGE_BYTES, MAX_WAIT_SECONDS, page_value
from peon.core.output.screen import SCREEN_SCHEMA
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk

JOB_ID_PROPERTY = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9_-]+$",
                   "description": "The job_id a bash or agent result carried."}


class JobOutputTool(Tool):
    name = "job_output"
    description = (
        "Read a job's output (any bash or agent call's job_id, background or finished) from an absolute byte "
        "offset, with its state (running, exited with exit_code/signal, or killed). Continue with next_offset; "
        "wait_seconds waits for new output or the job's end. dropped_before says what the bounded store evicted."
    )
    risk = ToolRisk.READ_ONLY
    served_by_supervisor = True
    input_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "properties": {
            "job_id": JOB_ID_PROPERTY,
            "offset": {"type": "integer", "minimum": 0, "maximum": 2**62,
                       "description": "Absolute byte offset to read from (default 0)."},
            "limit": {"type": "integer", "minimum": 4, "maximum": MAX_PAGE_BYTES,
                      "description": f"Most bytes to return (default {DEFAULT_PAGE_BYTES})."},
            "wait_seconds": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS,
                             "description": "Wait up to this long for output past offset or the job's end."},
            "raw": {"type": "boolean", "description": "Return the bytes as written (and base64) instead of "
                                                      "text without escape sequences."},
            "screen": {"type": "boolean", "description": "For a terminal job (bash tty: true): also return its "
                                                         "screen as a person would see it."},
        },
        "required": ["job_id"],
        "additionalProperties": False,
    }

    output_schema: ClassVar[Mapping[str, Any] | None] = {
        "type": "object",
        "properties": {
            "job_id": {"type": "string"},
            "state": {"type": "string", "enum": list(JOB_STATES)},
            "exit_code": {"type": ["integer", "null"]},
            "signal": {"type": ["string", "null"]},
            "timed_out": {"type": "boolean"},
            "offset": {"type": "integer", "description": "Absolute offset of the first byte returned."},
            "next_offset": {"type": "integer", "description": "Where the next read continues."},
            "output": {"type": "string"},
            "returned_bytes": {"type": "integer"},
            "output_bytes": {"type": "integer", "description": "Everything the job wrote so far."},
            "retained_from": {"type": "integer", "description": "The oldest offset still retained."},
            "dropped_before": {"type": ["integer", "null"],
                               "description": "Bytes before this offset were evicted before they were read."},
            "output_invalid_utf8": {"type": "boolean"},
            "eof": {"type": "boolean", "description": "The job has ended and nothing is left to read."},
            "output_base64": {"type": "string", "description": "With raw: the exact bytes."},
            "screen": SCREEN_SCHEMA,
        },
        "required": ["job_id", "state", "offset", "next_offset", "output", "output_bytes", "eof"],
    }

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        wait = min(float(args.get("wait_seconds") or 0.0), MAX_WAIT_SECONDS)
        return Prepared(self.risk, self.declared_risk_reason(), f"read the output of job {args['job_id']}",
                        timeout_seconds=wait + 5.0)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        jobs = ctx.jobs
        job_id = args["job_id"]
        offset = int(args.get("offset") or 0)
        jobs.info(job_id)  # unknown_job before waiting
        wait = min(float(args.get("wait_seconds") or 0.0), MAX_WAIT_SECONDS, max(ctx.deadline.remaining() - 1.0, 0.0))
        if wait > 0:
            await jobs.wait(job_id, offset, wait)
        info = jobs.info(job_id)
        page = jobs.read(job_id, offset, int(args.get("limit") or DEFAULT_PAGE_BYTES))
        value = page_value(page, raw=bool(args.get("raw")), clean=jobs.clean_output, finished=info.state != "running")
        if args.get("screen"):
            screen = await jobs.screen(job_id)
            if screen is None:
                raise ToolError(ErrorCode.INVALID_INPUT, f"job {job_id} has no terminal (screen: true is for a bash "
                                                         "job started with tty: true)", {"job_id": job_id})
            value["screen"] = screen
        return {"job_id": job_id, "state": info.state, "exit_code": info.exit_code, "signal": info.signal,
                "timed_out": info.timed_out, **value}
