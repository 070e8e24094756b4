"""An asyncio message channel over a connected Unix stream socket, one JSON object per line.

Promise: messages arrive whole and in order; concurrent senders never interleave their bytes;
:meth:`Channel.recv` returns ``None`` exactly once the peer has closed its end (or died), so a dead
peer is never mistaken for a slow one. A line longer than the bound is a :class:`ChannelError`.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import deque
from typing import Any

from peon.framing import LineDecoder, Oversize, encode

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
RECV_CHUNK = 64 * 1024


class ChannelError(Exception):
    pass


class Channel:
    def __init__(self, sock: socket.socket, max_message_bytes: int = MAX_MESSAGE_BYTES):
        sock.setblocking(False)
        self.sock = sock
        self._decoder = LineDecoder(max_message_bytes)
        self._pending: deque[Any] = deque()
        self._send_lock = asyncio.Lock()
        self._eof = False
        # One reused receive buffer: a fresh large bytes object per recv makes the allocator's
        # footprint creep in a process that lives for days.
        self._chunk = bytearray(RECV_CHUNK)

    async def recv(self) -> dict | None:
        loop = asyncio.get_running_loop()
        while not self._pending:
            if self._eof:
                return None
            try:
                n = await loop.sock_recv_into(self.sock, self._chunk)
            except (ConnectionResetError, BrokenPipeError):
                n = 0
            data = bytes(memoryview(self._chunk)[:n])
            if not n:
                self._eof = True
                continue
            for line in self._decoder.feed(data):  # decode the whole chunk: a bad line loses only itself
                if isinstance(line, Oversize):
                    self._pending.append(ChannelError(f"message of {line.length} bytes exceeds the channel bound"))
                    continue
                try:
                    self._pending.append(json.loads(line))
                except (ValueError, RecursionError) as exc:
                    self._pending.append(ChannelError(f"peer sent a line that is not JSON: {exc}"))
        item = self._pending.popleft()
        if isinstance(item, ChannelError):
            raise item
        return item

    async def send(self, message: dict) -> None:
        data = encode(message)
        async with self._send_lock:
            await asyncio.get_running_loop().sock_sendall(self.sock, data)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
