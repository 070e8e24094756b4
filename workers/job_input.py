"""A running command's input: what the supervisor wrote to a job, queued (bounded) and written to the
command's terminal or stdin pipe as the command reads it.

Promise: a :class:`JobInput` holds at most ``limit`` bytes not yet written (:meth:`JobInput.put` refuses
more, and the write is lost as a whole, never in part); :meth:`JobInput.pump` writes them, in order, to a
non-blocking descriptor without ever blocking the loop (it waits until the descriptor is writable), and
closes a pipe's end once an end of input was put and everything before it written. A command that no
longer reads (the descriptor fails: ``EPIPE``, ``EIO``) ends the pump; what was queued is dropped; so
does, on a terminal, a special character (erase, kill...) mapped to a printable one
(:func:`terminal_keeps_its_keys`), since the line a shell runs would then not be the one judged. The
queue of the call or job the current task serves is :data:`INPUT` (set per task, like the runner's
``SCOPE``): the runner pumps it into a command started with ``stdin`` ``"pipe"`` or ``"tty"``.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import termios
from collections import deque
from collections.abc import Callable

DEFAULT_LIMIT = 1 << 20


class JobInput:
    """Input for one running command (see the module's promise)."""

    def __init__(self, limit: int = DEFAULT_LIMIT, data: bytes = b"", eof: bool = False):
        self.limit = limit
        self._chunks: deque[bytes] = deque([data] if data else [])
        self.queued = len(data)
        self.eof = eof  # an end of input was put: close a pipe after the queued bytes
        self.closed = False  # the command reads no more (or the pump ended)
        self._wake = asyncio.Event()

    def put(self, data: bytes, eof: bool = False) -> bool:
        """Queue ``data`` (then, with ``eof``, the end of input); False, and nothing queued, when it would
        exceed the bound, the input was closed or the end of input was already put."""
        if self.closed or self.eof or self.queued + len(data) > self.limit:
            return False
        if data:
            self._chunks.append(data)
            self.queued += len(data)
        self.eof = eof
        self._wake.set()
        return True

    def close(self) -> None:
        """Take no more input: what is queued is dropped, and the pump ends."""
        self.closed = True
        self._chunks.clear()
        self.queued = 0
        self._wake.set()

    async def pump(self, fd: int, *, close_at_eof: bool, fit: Callable[[int], bool] | None = None) -> None:
        """Write what is queued to ``fd`` (non-blocking) until the end of input is written or the command
        reads no more; with ``close_at_eof`` (a pipe's end, owned here) ``fd`` is closed when it returns.
        ``fit``, asked before each write, may end the input instead (:func:`terminal_keeps_its_keys`)."""
        loop = asyncio.get_running_loop()
        owned = close_at_eof
        try:
            while True:
                while self._chunks:
                    chunk = self._chunks[0]
                    if fit is not None and not fit(fd):
                        return
                    try:
                        n = os.write(fd, chunk)
                    except BlockingIOError:
                        await _writable(loop, fd)
                        continue
                    except OSError:  # EPIPE, EIO: nothing reads it any more
                        return
                    self.queued -= n
                    if n == len(chunk):
                        self._chunks.popleft()
                    else:
                        self._chunks[0] = chunk[n:]
                if self.eof or self.closed:
                    return
                self._wake.clear()
                await self._wake.wait()
        finally:
            if owned:
                os.close(fd)
            self.closed = True
            self._chunks.clear()
            self.queued = 0


async def _writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def on_writable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, on_writable)
    try:
        await ready
    finally:
        loop.remove_writer(fd)


# The terminal's special characters a shell's line editing follows (readline binds them too).
_SPECIAL = tuple(getattr(termios, name) for name in (
    "VERASE", "VKILL", "VWERASE", "VLNEXT", "VREPRINT", "VINTR", "VQUIT", "VSUSP", "VEOF", "VEOL", "VEOL2",
    "VDISCARD", "VSTART", "VSTOP") if hasattr(termios, name))


def terminal_keeps_its_keys(fd: int) -> bool:
    """Whether the terminal (its master ``fd``) still edits lines with control characters only: a
    command that mapped one of its special characters to a printable one (``stty kill z``) would make a
    typed letter edit the line, so what the shell runs would not be what Peon judged — its input ends."""
    try:
        special = termios.tcgetattr(fd)[6]
    except (termios.error, OSError):
        return False
    for index in _SPECIAL:
        value = special[index]
        code = value[0] if isinstance(value, bytes) and value else value if isinstance(value, int) else 0
        if 0x20 <= code < 0x7F or code >= 0x80:
            return False
    return True


# The input of the call or job the current task serves (None: its commands read /dev/null or their data).
INPUT: contextvars.ContextVar[JobInput | None] = contextvars.ContextVar("peon_job_input", default=None)
