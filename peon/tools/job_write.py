"""``job_write``: type text and keys into a running job (a terminal job, or one whose stdin is a pipe), then
return the output it produced. Risk: the job's (``process``, ``sandboxed`` inside the OS sandbox).

Promise: served by the supervisor, which owns the jobs (``ctx.jobs``); it writes only to a job of the
session that is running and takes input (``unknown_job``, ``job_ended``, ``no_input`` otherwise), at
most ``jobs.max_write_bytes`` per write (``too_large``). What is typed into a shell is a command: when
the job's command may run a shell (:func:`peon.approval.typed_input.reads_shell_input`), the lines the
write makes the shell run, as its line editing makes them (:func:`~peon.approval.typed_input.type_into_shell`),
are analysed and go to the policy exactly as a ``bash`` command does — its deny, ask and allow rules,
prefix grants — through the approval details' ``typed_command``; a write whose resulting line cannot be
known is refused before anyone is asked (``input_not_analyzable``). A write to any other program is
rated at the job's risk. Like every call, the write's decision line is in the audit log before a byte
is written; and it is written only if the job's input is still the one approved
(``changed_since_approval``). Then it waits up to ``wait_seconds`` for the output the write produced,
returning once the job has been quiet for :data:`QUIET_SECONDS` after its first new output, or has ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar

from peon.core.errors import ErrorCode, ToolError
from peon.core.jobs import JOB_STATES, DEFAULT_PAGE_BYTES, MAX_WAIT_SECONDS, InputState, page_value, session_jobs
from peon.core.keys import KEYS, MAX_KEY_CHARS, MAX_KEYS, Token, encode, tokens_of
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk

from peon.tools.job_output import JOB_ID_PROPERTY

DEFAULT_WAIT_SECONDS = 2.0
QUIET_SECONDS = 0.5  # after the first new output, this long without more ends the wait
MAX_TEXT_CHARS = 1 << 20  # the schema's bound; jobs.max_write_bytes bounds the bytes written


class JobWriteTool(Tool):
    name = "job_write"
    description = (
        "Type into a running job started with bash background: true and tty: true (or stdin: \"pipe\"): text, "
        "then named keys (Enter, Tab, Escape, Backspace, Up, Down, Left, Right, C-c, C-d...; other entries of "
        "keys are typed as text), then with eof: true the end of input. Returns the output the job produced "
        "within wait_seconds. Lines typed into a shell are approved like bash commands."
    )
    risk = ToolRisk.PROCESS
    served_by_supervisor = True
    input_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "properties": {
            "job_id": JOB_ID_PROPERTY,
            "text": {"type": "string", "maxLength": MAX_TEXT_CHARS,
                     "description": "Text to type (\"\\n\" is Enter)."},
            "keys": {"type": "array", "maxItems": MAX_KEYS,
                     "items": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS},
                     "description": "Typed after text, in order: key names (" + ", ".join(
                         name for name in KEYS if not name.startswith(("C-", "F"))) + ", F1-F12, C-a...C-z) "
                                    "or text."},
            "eof": {"type": "boolean", "description": "Then end the input (a pipe is closed; a terminal gets C-d)."},
            "wait_seconds": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS,
                             "description": f"Wait up to this long for the output (default {DEFAULT_WAIT_SECONDS:g})."},
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
            "written_bytes": {"type": "integer"},
            "offset": {"type": "integer", "description": "Where the returned output starts (absolute)."},
            "next_offset": {"type": "integer", "description": "Where job_output continues."},
            "output": {"type": "string", "description": "What the job wrote after the write."},
            "output_bytes": {"type": "integer"},
            "eof": {"type": "boolean"},
        },
        "required": ["job_id", "state", "written_bytes", "offset", "next_offset", "output"],
    }

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """The job's risk; for a shell, the command the write makes it run, analysed (``typed_command``
        and the analysis' segments in the details); see the module's promise."""
        state = session_jobs().input_state(args["job_id"])
        data, typed = _what_is_typed(args, state, session)
        details: dict[str, Any] = {"job_id": state.job_id, "job_command": state.command, "input": state.kind,
                                   "shell": state.shell, "bytes": len(data), "eof": bool(args.get("eof")),
                                   "input_version": state.version}
        analysis = None
        if typed is not None:
            details["typed_command"] = typed.command
            if typed.analysis is not None:
                analysis = typed.analysis
                details.update(analysis.to_dict())
        sandboxed = bool(session.sandbox.get("active"))
        reason = (f"typed into job {state.job_id} ({state.command}), rated at the job's risk"
                  + (", inside the OS sandbox" if sandboxed else ""))
        shown = typed.command if typed is not None and typed.command is not None else _shown(args)
        verb = "run in the shell of" if typed is not None and typed.command is not None else "type into"
        return Prepared(self.risk, reason, f"{verb} job {state.job_id}: {shown}", details,
                        timeout_seconds=_wait(args) + 5.0, sandboxed=sandboxed, command_analysis=analysis)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        jobs = ctx.jobs
        job_id = args["job_id"]
        state = jobs.input_state(job_id)
        if state.version != ctx.approved.get("input_version"):
            raise ToolError(ErrorCode.CHANGED_SINCE_APPROVAL,
                            f"job {job_id}'s input changed since this write was approved (another write came "
                            "first); nothing was written", {"job_id": job_id})
        data, typed = _what_is_typed(args, state, ctx.session)
        if (typed.command if typed is not None else None) != ctx.approved.get("typed_command"):
            raise ToolError(ErrorCode.CHANGED_SINCE_APPROVAL, f"the line this write would make job {job_id}'s shell "
                            "run is not the one approved; nothing was written", {"job_id": job_id})
        start = jobs.info(job_id).output_bytes
        line, carry = (typed.after.line, typed.after.carry) if typed is not None else (state.line, state.carry)
        jobs.write(job_id, data, eof=bool(args.get("eof")), version=state.version, line=line, carry=carry)
        await _wait_for_output(jobs, job_id, start, min(_wait(args), max(ctx.deadline.remaining() - 1.0, 0.0)))
        info = jobs.info(job_id)
        page = jobs.read(job_id, start, DEFAULT_PAGE_BYTES)
        value = page_value(page, raw=False, clean=jobs.clean_output, finished=info.state != "running")
        return {"job_id": job_id, "state": info.state, "exit_code": info.exit_code, "written_bytes": len(data),
                "offset": value["offset"], "next_offset": value["next_offset"], "output": value["output"],
                "output_bytes": value["output_bytes"], "eof": value["eof"]}


def _what_is_typed(args: Mapping[str, Any], state: InputState, session: SessionView) -> tuple[bytes, Any]:
    """The bytes of the write, and for a shell what it makes the shell run
    (:class:`peon.approval.typed_input.Typed`; None for another program)."""
    try:
        tokens = tokens_of(args.get("text"), args.get("keys"))
        if args.get("eof") and state.kind == "tty":
            tokens = [*tokens, Token(key="C-d")]
        data = encode(tokens, terminal=state.kind == "tty")
    except ValueError as exc:
        raise ToolError(ErrorCode.INVALID_INPUT, f"job_write: {exc}") from None
    limit = int(session.config.jobs.max_write_bytes)
    if len(data) > limit:
        raise ToolError(ErrorCode.TOO_LARGE, f"the write holds {len(data)} bytes; jobs.max_write_bytes is {limit}",
                        {"limit": "jobs.max_write_bytes", "value": limit, "bytes": len(data)})
    if not state.shell:
        return data, None
    from peon.approval.typed_input import LineState, type_into_shell  # the supervisor's: workers never load it

    typed_tokens = tokens[:-1] if args.get("eof") and state.kind == "tty" else tokens
    typed = type_into_shell(LineState(state.line, state.carry), typed_tokens, terminal=state.kind == "tty",
                            eof=bool(args.get("eof")))
    if typed.refused is not None:
        raise ToolError(ErrorCode.INPUT_NOT_ANALYZABLE, f"job {state.job_id} runs a shell: {typed.refused}; "
                                                        "nothing was written", {"job_id": state.job_id})
    return data, typed


async def _wait_for_output(jobs: Any, job_id: str, start: int, seconds: float) -> None:
    """Wait up to ``seconds`` for output past ``start``, then until the job is quiet or has ended."""
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    offset = start
    while loop.time() < until:
        info = jobs.info(job_id)
        if info.state != "running":
            return
        if info.output_bytes > offset:
            offset = info.output_bytes
            await jobs.wait(job_id, offset, min(QUIET_SECONDS, until - loop.time()))
            if jobs.info(job_id).output_bytes == offset:
                return  # quiet
            continue
        await jobs.wait(job_id, offset, until - loop.time())


def _wait(args: Mapping[str, Any]) -> float:
    value = args.get("wait_seconds")
    return min(float(DEFAULT_WAIT_SECONDS if value is None else value), MAX_WAIT_SECONDS)


def _shown(args: Mapping[str, Any]) -> str:
    keys = args.get("keys") or []
    text = repr(args.get("text")) if args.get("text") else ""
    return " ".join(part for part in (text, " ".join(keys), "EOF" if args.get("eof") else "") if part) or "nothing"
