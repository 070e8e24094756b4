"""A background job's input side in the supervisor: what its command reads (a terminal or a pipe), the
shell's line as Peon follows it, the writes on their way to the worker that runs it, and its screen.

Promises:

* a job started with ``tty: true`` or ``stdin: "pipe"`` (its approved ``stdin`` details) has a
  :class:`JobIO`; any other job has none, and a write to it is ``no_input``;
* whether its input goes to a shell is decided once, from the analysis of its command
  (:func:`peon.approval.typed_input.reads_shell_input`: when in doubt, a shell);
* a write is sent only while the input is open and at the version it was approved at
  (``changed_since_approval`` otherwise: another write came between), and advances the version; at most
  :data:`MAX_PENDING_WRITES` writes wait to be sent to the worker (``too_large`` beyond: the worker
  bounds the bytes its command leaves unread, ``jobs.max_queued_input_bytes``);
* the worker's ``input_closed`` (its command reads no more, or left too much unread), or an end of
  input written, closes the input for good: every later write is ``no_input``;
* a terminal job's screen is rendered from the output store's retained bytes
  (:class:`peon.core.output.screen.Screen`), fed incrementally while the job runs and at most
  :data:`MAX_SCREEN_FEED_BYTES` per look (older output is skipped, and the screen says ``incomplete``);
  the emulator is pure Python and slow (about 0.1-0.2 MB/s on a loaded machine), so it is fed in a
  thread, one look at a time per job, and the supervisor's loop goes on meanwhile.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from peon.core.errors import ErrorCode, ToolError
from peon.core.jobs import InputState
from peon.core.output.screen import DEFAULT_COLS, DEFAULT_ROWS, Screen
from peon.core.output.store import OutputStore
from peon.workers.messages import InputMessage, encode_input

MAX_PENDING_WRITES = 64
MAX_SCREEN_FEED_BYTES = 256 << 10
_FEED_PAGE = 1 << 20


@dataclass
class JobIO:
    kind: Literal["tty", "pipe"]
    shell: bool
    rows: int = DEFAULT_ROWS
    cols: int = DEFAULT_COLS
    line: str | None = ""
    carry: str = ""
    version: int = 0
    open: bool = True
    inbox: asyncio.Queue[InputMessage] = field(default_factory=lambda: asyncio.Queue(MAX_PENDING_WRITES))
    screen: Screen | None = None
    screen_turn: asyncio.Lock = field(default_factory=asyncio.Lock)  # one look feeds the screen at a time


def job_io_for(call: dict[str, Any]) -> JobIO | None:
    """The input side of the background job ``call`` (the supervisor's record of it), or None."""
    approved = call.get("approved")
    stdin = approved.get("stdin") if isinstance(approved, dict) else None
    kind = stdin.get("kind") if isinstance(stdin, dict) else None
    if kind not in ("tty", "pipe"):
        return None
    from peon.approval.shell import analyze
    from peon.approval.typed_input import reads_shell_input

    command = call.get("args", {}).get("command")
    shell = not isinstance(command, str) or reads_shell_input(analyze(command))
    if kind == "tty":
        assert isinstance(stdin, dict)
        return JobIO("tty", shell, int(stdin.get("rows") or DEFAULT_ROWS), int(stdin.get("cols") or DEFAULT_COLS))
    return JobIO("pipe", shell)


def input_state(job_id: str, command: str | None, running: bool, io: JobIO | None) -> InputState:
    """The job's input now, or the error saying why nothing can be written to it."""
    if not running:
        raise ToolError(ErrorCode.JOB_ENDED, f"job {job_id} has ended; nothing can be written to it "
                                             "(job_output shows how it ended)", {"job_id": job_id})
    if io is None:
        raise ToolError(ErrorCode.NO_INPUT, f"job {job_id} takes no input: start it with tty: true (a terminal) "
                                            "or stdin: \"pipe\"", {"job_id": job_id})
    if not io.open:
        raise ToolError(ErrorCode.NO_INPUT, f"job {job_id}'s command reads no more input (it closed its input, "
                                            "ended it, or left jobs.max_queued_input_bytes unread)",
                        {"job_id": job_id})
    return InputState(job_id, command, io.kind, io.shell, io.line, io.carry, io.version)


def send(job_id: str, io: JobIO, data: bytes, *, eof: bool, version: int, line: str | None, carry: str) -> None:
    """Queue one write for the worker (see the module's promises)."""
    if version != io.version:
        raise ToolError(ErrorCode.CHANGED_SINCE_APPROVAL,
                        f"job {job_id}'s input changed since this write was approved (another write came "
                        "first); nothing was written", {"job_id": job_id})
    try:
        io.inbox.put_nowait(encode_input(job_id, data, eof and io.kind == "pipe"))
    except asyncio.QueueFull:
        raise ToolError(ErrorCode.TOO_LARGE, f"{MAX_PENDING_WRITES} writes to job {job_id} are still on their "
                                             "way; wait for its output first", {"job_id": job_id}) from None
    io.version += 1
    io.line, io.carry = line, carry
    if eof:
        io.open = False


async def render_screen(store: OutputStore, job_id: str, io: JobIO | None,
                        size: tuple[int, int] | None) -> dict[str, Any]:
    """The screen of a terminal job: ``io``'s, fed up to the newest byte, or for an ended one (``size``)
    a fresh one fed the newest retained bytes."""
    if io is None:
        rows, cols = size or (DEFAULT_ROWS, DEFAULT_COLS)
        return await asyncio.to_thread(_fed, Screen(rows, cols), _pending(store, job_id, 0))
    async with io.screen_turn:
        if io.screen is None:
            io.screen = Screen(io.rows, io.cols)
        return await asyncio.to_thread(_fed, io.screen, _pending(store, job_id, io.screen.fed))


def _pending(store: OutputStore, job_id: str, fed: int) -> list[tuple[int, bytes]]:
    """The retained output past ``fed``, at most its newest :data:`MAX_SCREEN_FEED_BYTES` (read here, on
    the loop: the store is the loop's)."""
    first = store.read(job_id, 0, 0)
    offset = max(fed, first.retained_from, first.total_bytes - MAX_SCREEN_FEED_BYTES)
    pages = []
    while offset < first.total_bytes:
        page = store.read(job_id, offset, _FEED_PAGE)
        if not page.data:
            break
        pages.append((page.offset, page.data))
        offset = page.next_offset
    return pages


def _fed(screen: Screen, pages: list[tuple[int, bytes]]) -> dict[str, Any]:
    for offset, data in pages:
        screen.feed_from(offset, data)
    return screen.render()
