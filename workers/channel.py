"""asyncio message channels over connected Unix stream sockets.

Promise, for both kinds: messages arrive whole and in order; concurrent senders never interleave
their bytes; :meth:`recv` returns ``None`` exactly once the peer has closed its end (or died), so a
dead peer is never mistaken for a slow one; nothing larger than :data:`peon.core.framing.MAX_MESSAGE_BYTES`
is ever buffered or sent.

* :class:`Channel` — one JSON object per line (the client's channel). A line over the bound or that
  is not JSON is a :class:`ChannelError` carrying the ``op`` and ``id`` the line began with, so the
  reader can answer the message it could not read; the stream goes on after it.
* :class:`FrameChannel` — the frames of :mod:`multiprocessing.connection` (a worker's channel, made
  with ``multiprocessing.Pipe``; a worker may read it with ``Connection.recv_bytes``). It carries
  bytes; :mod:`peon.workers.messages` says what they must hold. A frame over the bound is a
  :class:`ChannelError` and ends the stream: a peer that sends one is broken.

``multiprocessing.connection.Connection`` itself has blocking methods only; these classes give the
same wire formats to an event loop that must never wait on a stopped or flooding peer.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections import deque
from typing import Any

from peon.core.framing import (MAX_MESSAGE_BYTES, FrameDecoder, LineDecoder, Oversize, OversizeFrame, encode, frame,
                          head_fields)

RECV_CHUNK = 64 * 1024
MAX_RECV_CHUNK = 1 << 20


class ChannelError(Exception):
    """A message that cannot be read; ``op``/``call_id`` say which one, when its first bytes did."""

    def __init__(self, message: str, op: str | None = None, call_id: str | None = None):
        super().__init__(message)
        self.op = op
        self.call_id = call_id


class _Socket:
    """The socket's receive side stays watched by the event loop between messages: ``sock_recv_into``
    registered and unregistered it for every message, and that ``epoll_ctl`` pair was 8% of the
    supervisor's main thread (py-spy, back-to-back ``read`` calls). It is unwatched when it is closed,
    and when it becomes readable while nobody waits to read (a reader holding back, or a peer's stray
    bytes), so that a ready socket never spins the loop."""

    def __init__(self, sock: socket.socket):
        sock.setblocking(False)
        self.sock = sock
        self._send_lock = asyncio.Lock()
        self._eof = False
        # One reused receive buffer: a fresh large bytes object per recv makes the allocator's
        # footprint creep in a process that lives for days.
        self._chunk = bytearray(RECV_CHUNK)
        self._watcher: asyncio.AbstractEventLoop | None = None  # the loop watching the socket, while one does
        self._watched = -1  # the descriptor it watches (its number, even once the socket is closed)
        self._readable: asyncio.Future[None] | None = None  # what a waiting receive awaits

    async def _recv_chunk(self) -> memoryview | None:
        while not self._eof:
            try:
                n = self.sock.recv_into(self._chunk)
            except (BlockingIOError, InterruptedError):
                await self._wait_readable()
                continue
            except (ConnectionResetError, BrokenPipeError):
                n = 0
            except OSError:
                if self.sock.fileno() >= 0:
                    raise
                n = 0  # closed while a receive waited: the end of the stream
            if not n:
                self._eof = True
                return None
            view = memoryview(self._chunk)[:n]
            if n == len(self._chunk) < MAX_RECV_CHUNK:  # a flood (streamed output): larger reads from now on
                self._chunk = bytearray(MAX_RECV_CHUNK)
            return view
        return None

    async def _wait_readable(self) -> None:
        loop = asyncio.get_running_loop()
        if self._watcher is not loop:
            self._unwatch()
            self._watched = self.sock.fileno()
            loop.add_reader(self._watched, self._on_readable)
            self._watcher = loop
        waiter = self._readable = loop.create_future()
        try:
            await waiter
        finally:
            if self._readable is waiter:
                self._readable = None

    def _on_readable(self) -> None:
        waiter = self._readable
        if waiter is None or waiter.cancelled():  # nobody reads now: stop watching until someone does
            self._unwatch()
        elif not waiter.done():
            waiter.set_result(None)

    def _unwatch(self) -> None:
        if self._watcher is not None:
            self._watcher.remove_reader(self._watched)  # nothing once the loop is closed
            self._watcher = None

    async def send_bytes(self, data: bytes) -> None:
        async with self._send_lock:
            await asyncio.get_running_loop().sock_sendall(self.sock, data)

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self._unwatch()
        if self._readable is not None and not self._readable.done():
            self._readable.set_result(None)  # a waiting receive sees the end of the stream
        try:
            self.sock.close()
        except OSError:
            pass


class Channel(_Socket):
    def __init__(self, sock: socket.socket, max_message_bytes: int = MAX_MESSAGE_BYTES):
        super().__init__(sock)
        self.max_message_bytes = max_message_bytes
        self._decoder = LineDecoder(max_message_bytes)
        self._pending: deque[Any] = deque()

    async def recv(self) -> dict[str, Any] | None:
        while not self._pending:
            chunk = await self._recv_chunk()
            if chunk is None:
                return None
            for line in self._decoder.feed(bytes(chunk)):  # the whole chunk: a bad line loses only itself
                self._pending.append(self._parse(line))
        item = self._pending.popleft()
        if isinstance(item, ChannelError):
            raise item
        return item

    def _parse(self, line: bytes | Oversize) -> Any:
        if isinstance(line, Oversize):
            fields = head_fields(line.head)
            return ChannelError(f"a message of {line.length} bytes exceeds the channel bound of "
                                f"{self.max_message_bytes} bytes", fields.get("op"), fields.get("id"))
        try:
            message = json.loads(line)
        except (ValueError, RecursionError) as exc:
            fields = head_fields(line[:256])
            return ChannelError(f"a line is not JSON: {exc}", fields.get("op"), fields.get("id"))
        if not isinstance(message, dict):
            return ChannelError(f"a line is a JSON {type(message).__name__}, not an object")
        return message

    async def send(self, message: dict[str, Any]) -> None:
        """Send one message (``op`` and ``id`` first, so a reader that must drop it can still name it);
        ``ValueError`` if it cannot be encoded or exceeds the bound."""
        ordered: dict[str, Any] = {key: message[key] for key in ("op", "id") if key in message}
        ordered.update(message)
        data = encode(ordered)
        if len(data) > self.max_message_bytes:
            raise ValueError(f"a message of {len(data)} bytes exceeds the channel bound "
                             f"of {self.max_message_bytes} bytes")
        await self.send_bytes(data)


class FrameChannel(_Socket):
    def __init__(self, sock: socket.socket, max_message_bytes: int = MAX_MESSAGE_BYTES):
        super().__init__(sock)
        self.max_message_bytes = max_message_bytes
        self._decoder = FrameDecoder(max_message_bytes)
        self._pending: deque[bytes] = deque()
        self._broken: ChannelError | None = None

    async def recv(self) -> bytes | None:
        """The next frame's payload, or None at end of stream; :class:`ChannelError` for a frame over
        the bound (and for every call after it)."""
        while not self._pending:
            if self._broken is not None:
                raise self._broken
            chunk = await self._recv_chunk()
            if chunk is None:
                if self._decoder.pending:
                    self._broken = ChannelError(f"the stream ended inside a message ({self._decoder.pending} bytes)")
                    raise self._broken
                return None
            try:
                self._pending.extend(self._decoder.feed(chunk))
            except OversizeFrame as exc:
                self._broken = ChannelError(str(exc))
        return self._pending.popleft()

    async def recv_or_end(self) -> bytes | None:
        """The next frame's payload, or None once the stream ended or broke: a worker's channel carries its
        supervisor's word, and a channel that cannot be read any more means the same as one that closed."""
        try:
            return await self.recv()
        except Exception:
            return None

    async def send(self, payload: bytes) -> None:
        if len(payload) > self.max_message_bytes:
            raise ValueError(f"a message of {len(payload)} bytes exceeds the channel bound "
                             f"of {self.max_message_bytes} bytes")
        await self.send_bytes(frame(payload))


def socket_of(connection: Any, *, close: bool = True) -> socket.socket:
    """The socket of a ``multiprocessing.connection.Connection`` made by ``Pipe(duplex=True)`` (a
    duplicate, close-on-exec); the connection is closed unless ``close`` is false."""
    try:
        return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(connection.fileno()))
    finally:
        if close:
            connection.close()
