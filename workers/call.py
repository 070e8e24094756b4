"""Serving one call in a worker: the tool's context, its execution within its deadline and cancel, its
progress and output messages, and its one bounded result.

Promises:

* :func:`serve_call` answers the call it is given with exactly one ``result`` on the call's channel,
  after every ``progress`` and ``output`` message of the call; before the result, no process the call
  started is alive (the worker's own tree is swept even if the tool forgot to), and a tool that
  declared it starts no process but left one fails ``tool_failed``; it offers to serve again only while
  the worker's process attributes are those of its start (:mod:`peon.workers.process_state`);
* :func:`execute` abandons a tool that ignores cancellation or its deadline (its task cancelled)
  :data:`ABANDON_GRACE_SECONDS` after the deadline or after the cancel grace, and turns whatever the tool
  did into a result message: a value (a JSON object), or its ``ToolError``, ``timeout``, ``cancelled``
  or ``tool_failed``;
* :func:`encode_result` keeps a result within :data:`MAX_RESULT_BYTES` (the message bound less the
  envelope): a larger one, or one that is not JSON, becomes an error naming why, never a message the
  supervisor cannot read;
* an :class:`OutputStream` sends a command's output as ``output`` messages, in order: live (a
  background job) with back-pressure on the runner, or, for a foreground call, only its newest
  ``retain`` bytes, at the end (while past 1 MiB, in an unnamed close-on-exec file);
* a ``cancel`` on the channel, or the channel's end, cancels the call (its :class:`CancelToken`);
* a background job's ``input`` messages go, in order, to its input queue
  (:class:`peon.workers.job_input.JobInput`, bounded by ``jobs.max_queued_input_bytes``), which the
  process runner writes to its command; the first that cannot be taken (the command reads no more, or
  the queue is full) is answered ``input_closed``, and nothing after it is taken (:func:`take_input`).

Runs in a worker for each call (:mod:`peon.workers.worker`) and in the job host for each job
(:mod:`peon.workers.job_host`), which use the same context, execution, output stream and result.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import sys
import traceback
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from setproctitle import setproctitle

from peon.core.cancel import CancelToken, Deadline
from peon.core.environment import trace_context
from peon.core.errors import ErrorCode, PeonError, ToolError
from peon.core.framing import ENVELOPE_BYTES, MAX_MESSAGE_BYTES, encode_json
from peon.core.output.store import SPILL_BYTES, OutputRing, open_spill_file
from peon.core.redaction.redactor import Redactor
from peon.core.redaction.session import redactor_for
from peon.core.redaction.stream import StreamRedactor
from peon.core.tool import OutputLimits, SessionView, Tool, ToolContext

from peon.workers import process_state, proctree, runner
from peon.workers.channel import FrameChannel
from peon.workers.job_input import INPUT, JobInput
from peon.workers.messages import (
    MAX_OUTPUT_CHUNK,
    CallMessage,
    ResultMessage,
    WorkerErrorBody,
    encode_output,
    parse_input,
)
from peon.workers.reaper import REAPER
from peon.workers.reuse import may_offer
from peon.workers.runner import CANCEL_GRACE_SECONDS

ABANDON_GRACE_SECONDS = 1.0  # after cancel grace or deadline, how long a tool may still take
MAX_RESULT_BYTES = MAX_MESSAGE_BYTES - ENVELOPE_BYTES
OUTPUT_HIGH_WATER = 4 << 20  # queued output bytes at which the runner stops reading the command's pipe
OUTPUT_LOW_WATER = 1 << 20
# The kept output of a foreground call goes to the supervisor in messages of this size when it ends:
# each is copied a few times on its way (read, framed, received, parsed), so small ones keep the
# transfer's memory small (1 MiB messages made a 1 GiB flood peak ~5 MiB higher) at no measurable cost.
FLUSH_CHUNK = 256 << 10

# The channel the call served in this task answers on, set with the call's context (:func:`call_context`):
# each job of the job host has its own task. Only tests that play a broken worker or job host read it.
CHANNEL: contextvars.ContextVar[FrameChannel | None] = contextvars.ContextVar("peon_call_channel", default=None)


async def serve_call(channel: FrameChannel, data: bytes, session: SessionView, tools: dict[str, Tool],
                     reusable: bool = True) -> bool:
    """Serve the call in ``data``, answering on ``channel``; whether this worker may serve another (never
    without ``reusable``)."""
    message: CallMessage = json.loads(data)
    if not isinstance(message, dict) or message.get("op") != "call":
        return False  # retired while on standby
    call_id, tool_name = str(message["id"]), str(message["tool"])
    setproctitle(f"peon-worker {tool_name} {call_id}")
    if reusable:
        process_state.record_once()
    runner.begin_call()
    token = CancelToken()
    ctx = call_context(message, session, token, channel)
    progress = _ProgressSender(channel, call_id)
    ctx.report_progress = progress.report
    stream = message.get("stream")
    redactor = redactor_for(session) if stream in ("live", "end") else None
    output = (OutputStream(channel, call_id, None, redactor=redactor) if stream == "live"
              else OutputStream(channel, call_id, int(session.config.jobs.output_buffer_bytes), session.spill_dir,
                                redactor) if stream == "end" else None)
    ctx.output = output
    job_input = JobInput(int(session.config.jobs.max_queued_input_bytes)) if stream == "live" else None
    INPUT.set(job_input)  # the runner feeds it to a command started with stdin "pipe" or "tty"
    listener = asyncio.create_task(_listen(channel, token, call_id, job_input))
    tool = tools.get(tool_name)
    if tool is None:
        reply = error_result(call_id, ErrorCode.UNKNOWN_TOOL, f"this worker has no tool named {tool_name!r}")
    else:
        reply = await execute(tool, message["args"], ctx)
    listener_ended = listener.done()  # the channel broke, or the supervisor sent what it should not
    listener.cancel()
    progress.stop()
    # Whatever the tool did, nothing it started may outlive the call (a worker with no child has
    # nothing below it: it is a subreaper).
    left_children = proctree.has_children()
    if left_children:
        if proctree.kill_tree(os.getpid(), reap=REAPER.reap):
            reply = error_result(call_id, ErrorCode.TOOL_FAILED,
                                 f"some processes {tool_name} started could not be killed")
        elif tool is not None and not tool.starts_processes:  # and its worker is not reused
            reply = error_result(call_id, ErrorCode.TOOL_FAILED,
                                 f"{tool_name} declares that it starts no process (starts_processes is false) but "
                                 "left processes behind; they were killed")
    if output is not None:  # every output message precedes the result
        await output.flush()
    again = reusable and tool is not None and not listener_ended and may_offer(
        reply, starts_processes=tool.starts_processes, commands_ended_clean=runner.commands_ended_clean(),
        left_children=left_children, cancelled=token.cancelled, streams_live=stream == "live")
    # Last, and only for a worker that would serve again: its limits, priority, scheduling, umask and signal
    # handlers must be what they were at its start, or the next call gets a fresh worker.
    again = again and not process_state.changes()
    if again:
        reply = {**reply, "reuse": True}
        setproctitle("peon-worker standby")  # its call is over once the result is out
    await channel.send(encode_result(reply, tool_name, call_id))
    return again


def call_context(message: CallMessage, session: SessionView, token: CancelToken, channel: FrameChannel) -> ToolContext:
    """The tool's context for the call in ``message`` (a worker's call, or a job in the job host), answered on
    ``channel``, which becomes this task's :data:`CHANNEL`."""
    CHANNEL.set(channel)
    return ToolContext(
        call_id=str(message["id"]),
        workspace=session.workspace,
        deadline=Deadline(message["deadline"]),
        cancel=token,
        limits=OutputLimits(
            max_output_bytes=session.config.limits.max_output_bytes,
            read_max_bytes=session.config.limits.read_max_bytes,
        ),
        session=session,
        approved=message.get("approved") or {},
        wants_progress=bool(message.get("progress")),
        trace=trace_context(message.get("trace")),
    )


def encode_result(reply: ResultMessage, tool_name: str, call_id: str) -> bytes:
    """The result message, within :data:`MAX_RESULT_BYTES` whatever the tool returned."""
    try:
        data = encode_json(reply)
    except ValueError as exc:
        data = encode_json(error_result(call_id, ErrorCode.TOOL_FAILED,
                                        f"{tool_name} returned a value that is not valid JSON: {exc}"))
    if len(data) > MAX_RESULT_BYTES:
        data = encode_json(error_result(
            call_id, ErrorCode.TOO_LARGE,
            f"the result of {tool_name} is {len(data)} bytes encoded; a result may be at most {MAX_RESULT_BYTES} "
            f"bytes (the {MAX_MESSAGE_BYTES}-byte message bound less {ENVELOPE_BYTES} for its envelope)",
            {"bytes": len(data), "limit": MAX_RESULT_BYTES},
        ))
    return data


class _ProgressSender:
    """At most one progress message in flight; a newer report replaces one not yet sent."""

    def __init__(self, channel: FrameChannel, call_id: str):
        self.channel = channel
        self.call_id = call_id
        self._latest: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def report(self, **fields: Any) -> None:
        if self._stopped:
            return
        self._latest = fields
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._latest is not None and not self._stopped:
            fields, self._latest = self._latest, None
            try:
                payload = encode_json({"op": "progress", "id": self.call_id, **fields})
            except ValueError:
                continue
            if len(payload) <= MAX_RESULT_BYTES:
                await self.channel.send(payload)

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()


class OutputStream:
    """The call's command output as ``output`` messages, in order, one sender at a time.

    Live (a background job, ``retain`` None): sent as it comes; a backlog past
    :data:`OUTPUT_HIGH_WATER` bytes pauses the process runner's reading (``push`` says so) until it
    is back under :data:`OUTPUT_LOW_WATER`. At the end (a foreground call, which nobody can read
    while it runs): only the newest ``retain`` bytes — what the supervisor's store would keep of
    the job anyway — are kept here (:class:`peon.core.output.store.OutputRing`: past
    :data:`~peon.core.output.store.SPILL_BYTES`, in an unnamed close-on-exec file in the session's state
    directory, so a flood costs the worker page cache, not memory) and sent by :meth:`flush`, one
    chunk at a time with their absolute offsets, so a flood costs a foreground call no channel
    traffic while it runs. If the channel breaks, what is queued is dropped and reading resumes (the
    listener cancels the call).

    With a ``redactor`` (the session's), what is sent has its secrets redacted
    (:class:`peon.core.redaction.stream.StreamRedactor`: a secret split between two reads is caught):
    live, as it comes, a bounded tail held back until more comes or :meth:`flush`; at the end, only the
    retained bytes, as they are sent — from a cut, when older bytes were dropped. Offsets then count the
    redacted bytes: each message starts where the one before ended."""

    def __init__(self, channel: FrameChannel, call_id: str, retain: int | None, spill_dir: Path | None = None,
                 redactor: Redactor | None = None):
        self.channel = channel
        self.call_id = call_id
        self.offset = 0
        self.backlog = 0
        self._queue: deque[tuple[bytes, int]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._resume: Callable[[], None] | None = None
        self._broken = False
        spill = (lambda: open_spill_file(spill_dir)) if spill_dir is not None else None
        self._ring = OutputRing(retain, SPILL_BYTES, spill) if retain is not None else None
        self._redactor = redactor
        self._live = StreamRedactor(redactor) if redactor is not None and retain is None else None

    def spawned(self) -> None:
        self._enqueue(encode_json({"op": "spawned", "id": self.call_id}), 0)

    def push(self, data: bytes | memoryview) -> bool:
        if self._ring is not None:
            self._ring.append(data)
            return True
        if self._live is not None:
            data = self._live.feed(data)
        return self._send(data)

    def _send(self, data: bytes | memoryview) -> bool:
        for start in range(0, len(data), MAX_OUTPUT_CHUNK):
            piece = data[start : start + MAX_OUTPUT_CHUNK]
            payload = encode_output(self.call_id, self.offset, piece)
            self.offset += len(piece)
            self._enqueue(payload, len(piece))
        return self.backlog <= OUTPUT_HIGH_WATER

    def when_drained(self, callback: Callable[[], None]) -> None:
        if self.backlog <= OUTPUT_LOW_WATER or self._broken:
            callback()
        else:
            self._resume = callback

    def _enqueue(self, payload: bytes, size: int) -> None:
        if self._broken:
            return
        self._queue.append((payload, size))
        self.backlog += size
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._queue:
            payload, size = self._queue[0]
            try:
                await self.channel.send(payload)
            except OSError:
                self._broken = True
                self._queue.clear()
                self.backlog = 0
            else:
                self._queue.popleft()
                self.backlog -= size
            if self._resume is not None and self.backlog <= OUTPUT_LOW_WATER:
                resume, self._resume = self._resume, None
                resume()

    async def flush(self) -> None:
        if self._ring is not None:  # one chunk at a time: never a second copy of what the ring holds
            ring, self._ring = self._ring, None
            await self.flush()
            offset, sent = ring.start, ring.start
            redacting = (StreamRedactor(self._redactor, cut_before=ring.start > 0) if self._redactor is not None
                         else None)
            while offset < ring.total and not self._broken:
                page = ring.read(offset, FLUSH_CHUNK)
                sent = await self._send_now(sent, page.data if redacting is None else redacting.feed(page.data))
                ring.drop_oldest(len(page.data))
                offset = page.next_offset
            if redacting is not None and not self._broken:
                await self._send_now(sent, redacting.finish())
            ring.close()
            return
        if self._live is not None:
            self._send(self._live.finish())
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _send_now(self, offset: int, data: bytes) -> int:
        """Send ``data`` from ``offset`` at once, in messages of at most MAX_OUTPUT_CHUNK bytes; where the
        next message starts."""
        for start in range(0, len(data), MAX_OUTPUT_CHUNK):
            piece = data[start : start + MAX_OUTPUT_CHUNK]
            try:
                await self.channel.send(encode_output(self.call_id, offset, piece))
            except OSError:
                self._broken = True
                return offset
            offset += len(piece)
        return offset


async def _listen(channel: FrameChannel, token: CancelToken, call_id: str, job_input: JobInput | None) -> None:
    closed_told = False
    while True:
        data = await channel.recv_or_end()
        if data is None:
            token.cancel("the supervisor went away")
            return
        try:
            message = json.loads(data)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("op") == "cancel":
            token.cancel(str(message.get("reason") or "cancelled by the client"))
        elif (isinstance(message, dict) and message.get("op") == "input" and not take_input(job_input, message)
              and not closed_told):
            closed_told = True
            await channel.send(json.dumps({"op": "input_closed", "id": call_id}).encode())


def take_input(job_input: JobInput | None, message: dict[str, Any]) -> bool:
    """Queue an ``input`` message's bytes for the job's command; False when they were not taken (no
    input, a malformed message, the command reads no more, the queue is full): then the input is closed,
    so that no later input reaches the command past a gap."""
    parsed = parse_input(message)
    if job_input is None:
        return False
    if parsed is None or not job_input.put(*parsed):
        job_input.close()
        return False
    return True


def error_result(call_id: str, code: ErrorCode, message: str, details: dict[str, Any] | None = None) -> ResultMessage:
    """The ``result`` message of a call that failed with ``code``."""
    return _failed(call_id, ToolError(code, message, details))


def _failed(call_id: str, error: PeonError) -> ResultMessage:
    return {"op": "result", "id": call_id, "ok": False, "error": cast(WorkerErrorBody, error.to_dict())}


async def execute(tool: Tool, args: Any, ctx: ToolContext) -> ResultMessage:
    """Run the tool; abandon it (cancel its task) 1 s after its deadline, or after the cancel grace."""
    call_id = ctx.call_id
    try:
        async with asyncio.timeout_at(ctx.deadline.at + ABANDON_GRACE_SECONDS) as scope:
            shorten = asyncio.create_task(_shorten_on_cancel(ctx, scope))
            try:
                value = await tool.execute(args, ctx)
            finally:
                shorten.cancel()
    except TimeoutError:
        if ctx.cancel.cancelled and not ctx.deadline.expired:
            return error_result(call_id, ErrorCode.CANCELLED, f"{tool.name} was cancelled ({ctx.cancel.reason})")
        return error_result(call_id, ErrorCode.TIMEOUT, f"{tool.name} did not finish before its deadline")
    except PeonError as exc:
        return _failed(call_id, exc)
    except asyncio.CancelledError:
        return error_result(call_id, ErrorCode.CANCELLED, f"{tool.name} was cancelled")
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return error_result(call_id, ErrorCode.TOOL_FAILED,
                            f"{tool.name} failed unexpectedly: {type(exc).__name__}: {exc}")
    if not isinstance(value, dict):
        return error_result(call_id, ErrorCode.TOOL_FAILED,
                            f"{tool.name} returned {type(value).__name__}, expected a JSON object")
    return {"op": "result", "id": call_id, "ok": True, "value": value}


async def _shorten_on_cancel(ctx: ToolContext, scope: asyncio.Timeout) -> None:
    await ctx.cancel.wait()
    limit = (ctx.cancel.cancelled_at or 0.0) + CANCEL_GRACE_SECONDS + ABANDON_GRACE_SECONDS
    when = scope.when()
    if when is None or limit < when:
        scope.reschedule(limit)
