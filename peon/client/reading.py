"""Reading a supervisor's channel, shared by the session's reader thread and a caller waiting for its answer.

Promises:

* one thread at a time reads and dispatches (:attr:`ChannelReader.turn`): the reader thread, or a caller
  in :meth:`peon.Session.call` reading its own answer (:meth:`ChannelReader.read_for`), while the reader
  thread stands aside — so the answer wakes the caller directly instead of waking the reader thread,
  which would wake the caller in turn (docs/architecture.md, "The caller reads its own answer");
* every line read is dispatched, in order, and leaves the queue only once dispatched: a reader
  interrupted in the middle of one (a signal handler that raises, Ctrl-C) leaves it for whoever reads
  next, which dispatches it again, marked as such;
* whoever reads watches the supervisor meanwhile (:class:`~peon.client.watchdog.Watchdog`), and the
  reader thread ends only when the channel ends, then calls ``on_end`` once.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections import deque
from collections.abc import Callable

from peon.core.framing import LineDecoder, Oversize
from peon.core.threads import helper_thread

from peon.client.result import PendingResult
from peon.client.watchdog import LIVENESS_CHECK_MS, Watchdog

DispatchLine = Callable[[bytes | Oversize, bool], None]  # a line, and whether it is dispatched again


def _read_some(fd: int) -> bool:
    try:
        return bool(os.read(fd, 64))
    except BlockingIOError:
        return False


class ChannelReader:
    """What reading the channel takes: the line decoder and buffer, the reader thread, and the hand-over
    of the channel to a caller that reads its own answer. One per supervisor."""

    def __init__(self, sock: socket.socket, max_message_bytes: int, watchdog: Watchdog, dispatch: DispatchLine,
                 on_end: Callable[[], None], thread_name: str):
        self.sock = sock
        self.watchdog = watchdog
        self.dispatch = dispatch
        self.on_end = on_end
        self.decoder = LineDecoder(max_message_bytes)
        self.chunk = bytearray(64 * 1024)  # reused: a fresh large buffer per recv makes RSS creep
        # Lines read and not yet dispatched. A caller reading in the main thread may be interrupted by
        # a signal handler that raises (Ctrl-C) in the middle of one: the line stays here and whoever
        # reads next dispatches it again, which answers its call if the first dispatch did not.
        self.lines: deque[bytes | Oversize] = deque()
        self.dispatching = False  # True from a line's dispatch until it left ``lines``
        self.turn = threading.Lock()  # held while reading and dispatching
        self.borrower = threading.Lock()  # one caller at a time reads for itself
        self.socket_poll = select.poll()  # the borrowing caller's
        self.socket_poll.register(sock, select.POLLIN)
        self.lending = threading.Condition()  # guards and signals ``borrowed``
        self.borrowed = False
        self.ended = False  # the channel has ended: the supervisor is gone or going
        # Written when a call is submitted to a reader asleep without a timeout (Watchdog.reader_asleep).
        self.wake_r, self.wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.thread = helper_thread(self.run, name=thread_name)

    def wake(self) -> None:
        """Wake the reader thread (the caller holds the calls' lock, as the thread does when it closes the pipe)."""
        try:
            os.write(self.wake_w, b"\0")
        except OSError:
            pass

    def lent(self) -> bool:
        """Whether a caller reads for itself; if so, wait until it is done (True)."""
        if not self.borrowed:
            return False
        with self.lending:
            while self.borrowed:
                self.lending.wait()
        return True

    def run(self) -> None:
        """The reader thread: read and dispatch until the channel ends, standing aside while a caller reads."""
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        try:
            while True:
                wait_ms = self.watchdog.wait_ms()
                ready = {fd for fd, _ in poller.poll(wait_ms)}
                if self.wake_r in ready:
                    while _read_some(self.wake_r):
                        pass
                if self.lent():
                    continue  # a caller read what woke this thread, and watched the supervisor meanwhile
                answered = self.sock.fileno() in ready
                if wait_ms is not None:
                    self.watchdog.check(quiet=not answered)
                if answered and not self.receive():
                    break
        finally:
            self.ended = True
            with self.watchdog.calls.lock:  # no submit writes to the pipe once it is closed (its number may be reused)
                self.watchdog.reader_asleep = False
                for fd in (self.wake_r, self.wake_w):
                    os.close(fd)
            self.on_end()

    def receive(self) -> bool:
        """Read what the supervisor sent and dispatch each message; False once the channel has ended.
        Whoever gets here second after a wake-up finds the data taken and returns True."""
        with self.turn:
            self.dispatch_read()  # what an interrupted caller left (see ``lines``)
            try:
                n = self.sock.recv_into(self.chunk, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return True
            except OSError:
                n = 0
            if not n:
                return False  # the end stays readable: the reader thread sees it too, and answers for it
            self.lines.extend(self.decoder.feed(bytes(memoryview(self.chunk)[:n])))
            self.dispatch_read()
        return True

    def dispatch_read(self) -> None:
        while self.lines:
            again, self.dispatching = self.dispatching, True
            self.dispatch(self.lines[0], again)
            self.lines.popleft()  # only once dispatched: see ``lines``
            self.dispatching = False

    def read_for(self, handle: PendingResult) -> None:
        """Read the channel in the calling thread until ``handle`` is answered: the reply then wakes the
        caller itself, not the reader thread, which would have to wake the caller in turn. The reader
        thread stands aside meanwhile (:meth:`lent`) and this thread watches the supervisor as it
        would. One caller at a time; any other waits for whoever reads."""
        if threading.current_thread() is self.thread or not self.borrower.acquire(blocking=False):
            return
        try:
            self.borrowed = True  # read without the lock by the reader thread as it wakes
            while not handle.done() and not self.ended:
                wait_ms = self.watchdog.wait_ms()
                answered = bool(self.socket_poll.poll(LIVENESS_CHECK_MS if wait_ms is None else wait_ms))
                self.watchdog.check(quiet=not answered)
                if answered and not self.receive():
                    break  # the channel ended: the reader thread answers every pending call
        finally:
            with self.lending:
                self.borrowed = False
                self.lending.notify_all()
            self.borrower.release()
