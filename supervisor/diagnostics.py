"""The supervisor's stderr: diagnostics that never block the session, bounded, drops counted.

Promises, once :func:`install` ran (first thing in the supervisor, before it starts any process):

* no write to descriptor 2 blocks for longer than it takes a helper thread to be scheduled — not the
  supervisor's event loop, its forker thread, the forkserver or a worker (they inherit descriptor 2):
  descriptor 2 is a pipe of the supervisor's own that one thread ("peon-diagnostics") keeps emptying
  into a bounded buffer, whatever the host does with the real stderr;
* that thread writes the buffer to the real stderr without ever blocking on it (a descriptor of its
  own opened non-blocking, ``MSG_DONTWAIT`` on a socket, ``poll`` for room first); a host that pipes
  stderr and never reads it gets the first :data:`BUFFER_BYTES` of diagnostics and nothing more;
* what does not fit is dropped by whole lines (never a line spliced onto another) and counted; as soon
  as a line fits again — and at exit, if room allows — one line says how many lines and bytes were
  dropped (:func:`drop_notice`);
* memory is bounded: :data:`BUFFER_BYTES` of buffer plus one read of :data:`READ_BYTES`;
* the real stderr reaches no process: the supervisor's copy is close-on-exec, and what the forkserver
  and workers inherit as descriptor 2 is the pipe.

:class:`DiagnosticBuffer` is the pure part (what is kept, what is dropped, the notice); the rest moves
bytes.
"""

from __future__ import annotations

import fcntl
import os
import select
import socket
import stat
import threading
import time
from dataclasses import dataclass

from peon.core.threads import helper_thread

BUFFER_BYTES = 256 * 1024
READ_BYTES = 64 * 1024
# Written to the real stderr at most this much at a time: a pipe with room (POLLOUT) takes a write of
# up to PIPE_BUF bytes whole, without blocking.
WRITE_BYTES = select.PIPE_BUF
EXIT_DRAIN_SECONDS = 0.2


def drop_notice(lines: int, size: int) -> bytes:
    return (f"peon-supervisor: {lines} diagnostic line(s) ({size} bytes) dropped: stderr was not being read "
            f"fast enough (at most {BUFFER_BYTES} bytes are held)\n").encode()


@dataclass
class DiagnosticBuffer:
    """Bytes on their way to stderr, at most ``limit`` held; overflow dropped by whole lines and counted."""

    limit: int = BUFFER_BYTES

    def __post_init__(self) -> None:
        self.data = bytearray()
        self.dropped_lines = 0  # since the last notice
        self.dropped_bytes = 0
        self.total_dropped_lines = 0
        self.dropping = False  # inside a line whose start was dropped: drop up to its newline
        self.line_open = False  # the last byte kept ends no line

    def feed(self, chunk: bytes) -> None:
        while chunk:
            if self.dropping:
                cut = chunk.find(b"\n")
                if cut < 0:
                    self._drop(chunk, ends_line=False)
                    return
                self._drop(chunk[:cut + 1], ends_line=True)
                chunk = chunk[cut + 1:]
                self.dropping = False
                continue
            self._note_drops()
            room = self.limit - len(self.data)
            if len(chunk) <= room:
                self.data += chunk
                self.line_open = not chunk.endswith(b"\n")
                return
            # Keep the whole lines that fit; the rest starts a drop. A line begun in an earlier chunk
            # and cut here is ended, so the next line kept is not spliced onto it.
            cut = chunk.rfind(b"\n", 0, room)
            kept = chunk[:cut + 1] if cut >= 0 else b""
            if not kept and self.line_open:
                self.data += b"\n"  # one byte past the limit at most
            self.data += kept
            self.line_open = False
            self.dropping = True
            chunk = chunk[len(kept):]

    def _drop(self, part: bytes, *, ends_line: bool) -> None:
        self.dropped_bytes += len(part)
        if ends_line:
            self.dropped_lines += 1
            self.total_dropped_lines += 1

    def _note_drops(self) -> None:
        """Put the notice of the drops so far in the buffer, if it fits (else later)."""
        if not self.dropped_bytes or self.dropping:
            return
        notice = drop_notice(self.dropped_lines, self.dropped_bytes)
        if len(self.data) + len(notice) <= self.limit:
            self.data += notice
            self.dropped_lines = self.dropped_bytes = 0

    def finish(self) -> None:
        """At exit: a line cut short is counted as a line, and the notice goes in if it fits."""
        if self.dropping:
            self.dropped_lines += 1
            self.total_dropped_lines += 1
            self.dropping = False
        self._note_drops()

    def peek(self, size: int) -> bytes:
        return bytes(self.data[:size])

    def consume(self, size: int) -> None:
        del self.data[:size]
        self._note_drops()

    def discard_all(self) -> None:
        """The real stderr is gone: whatever is held is dropped (counted, nobody to tell)."""
        self._drop(bytes(self.data), ends_line=False)
        self.dropped_lines += self.data.count(b"\n")
        self.total_dropped_lines += self.data.count(b"\n")
        self.data.clear()


class _Pump:
    """The thread between the supervisor's stderr pipe and the real stderr."""

    def __init__(self, source: int, target: int, is_socket: bool):
        self.source, self.target, self.is_socket = source, target, is_socket
        self.buffer = DiagnosticBuffer()
        self.lock = threading.Lock()
        self.broken = False  # the real stderr is closed or failing: drop everything
        self.idle = threading.Event()
        self.watching_target = False  # the real stderr is polled for room (something is buffered)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

    def wake(self) -> None:
        """Make the thread look at the buffer again (something was added from outside it)."""
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass

    def run(self) -> None:
        poller = select.poll()
        poller.register(self.source, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        self.watching_target = False
        while True:
            try:
                self._step(poller)
            except Exception:  # never stop emptying the pipe: every writer of descriptor 2 would block
                with self.lock:
                    self.broken = True
                    self.buffer.discard_all()
                if self.watching_target:
                    poller.unregister(self.target)
                    self.watching_target = False

    def _step(self, poller: select.poll) -> None:
        with self.lock:
            wants_out = bool(self.buffer.data) and not self.broken
        if wants_out != self.watching_target:
            if wants_out:
                poller.register(self.target, select.POLLOUT)
            else:
                poller.unregister(self.target)
            self.watching_target = wants_out
        if not wants_out and self._source_empty():
            self.idle.set()
        for fd, events in poller.poll(None):
            if fd == self.source:
                self._read()
            elif fd == self._wake_r:
                while _read_some(self._wake_r):
                    pass
            elif events & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                self._break()
            else:
                self._write()

    def _source_empty(self) -> bool:
        return _pending(self.source) == 0

    def _read(self) -> None:
        self.idle.clear()  # before the read: drain() must not see it idle with bytes in hand
        try:
            chunk = os.read(self.source, READ_BYTES)
        except BlockingIOError:
            return
        with self.lock:
            if self.broken:
                self.buffer._drop(chunk, ends_line=False)
            else:
                self.buffer.feed(chunk)

    def _write(self) -> None:
        with self.lock:
            chunk = self.buffer.peek(WRITE_BYTES)
        try:
            written = _send_nowait(self.target, chunk) if self.is_socket else os.write(self.target, chunk)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._break()
            return
        with self.lock:
            self.buffer.consume(written)

    def _break(self) -> None:
        with self.lock:
            self.broken = True
            self.buffer.discard_all()


def _read_some(fd: int) -> bool:
    try:
        return bool(os.read(fd, 64))
    except BlockingIOError:
        return False


def _send_nowait(fd: int, data: bytes) -> int:
    sock = socket.socket(fileno=fd)
    try:
        return sock.send(data, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
    finally:
        sock.detach()


def _pending(fd: int) -> int:
    """Bytes waiting in the pipe ``fd``."""
    import termios

    buf = bytearray(4)
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf)
    except OSError:
        return 0
    return int.from_bytes(buf, "little")


def _nonblocking_copy(fd: int) -> tuple[int, bool]:
    """A close-on-exec descriptor for writing to what ``fd`` is without blocking, and whether it is a
    socket. A FIFO, pipe or terminal is opened anew (its own open file description: setting
    ``O_NONBLOCK`` on a shared one would change the host's own stderr); a socket is written with
    ``MSG_DONTWAIT``; a regular file never waits for a reader."""
    info = os.fstat(fd)
    copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    if stat.S_ISSOCK(info.st_mode):
        return copy, True
    if stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode):
        try:
            fresh = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError:
            return copy, False  # poll for room, then at most PIPE_BUF per write
        os.close(copy)
        return fresh, False
    return copy, False


_installed: _Pump | None = None


def install() -> None:
    """Make descriptor 2 the supervisor's own pipe, emptied by the diagnostics thread. Idempotent. With
    no usable stderr (closed), descriptor 2 becomes ``/dev/null``."""
    global _installed
    if _installed is not None:
        return
    try:
        target, is_socket = _nonblocking_copy(2)
    except OSError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        return
    source, sink = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(source, False)
    os.dup2(sink, 2)  # inheritable: the forkserver and the workers write here too
    os.close(sink)
    pump = _Pump(source, target, is_socket)
    helper_thread(pump.run, name="peon-diagnostics").start()
    _installed = pump


def dropped_lines() -> int:
    """Diagnostic lines dropped so far (0 before :func:`install`)."""
    if _installed is None:
        return 0
    with _installed.lock:
        return _installed.buffer.total_dropped_lines


def drain(timeout: float = EXIT_DRAIN_SECONDS) -> None:
    """Before the supervisor exits: give what is held up to ``timeout`` to reach stderr, then add the
    drop notice if there is room (and give it the rest of the time)."""
    pump = _installed
    if pump is None:
        return
    until = time.monotonic() + timeout
    while time.monotonic() < until and not (pump.idle.is_set() and not pump.buffer.data
                                            and _pending(pump.source) == 0):
        time.sleep(0.005)
    with pump.lock:
        pump.buffer.finish()
    pump.wake()
    while time.monotonic() < until and pump.buffer.data:
        with pump.lock:
            if pump.broken:
                return
        time.sleep(0.005)


