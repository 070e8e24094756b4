"""Message framing, sans I/O: bytes in, messages out; messages in, bytes out.

Promise: every channel of Peon carries messages of at most :data:`MAX_MESSAGE_BYTES` (one bound for
all of them), and no decoder ever holds more than its bound of an unfinished message or loses its
place in the stream:

* :class:`LineDecoder` (JSON lines: the client's channel and MCP's stdio transport) discards a line
  longer than its bound up to its newline and reports it once as an :class:`Oversize` item that keeps
  the line's first bytes (:attr:`Oversize.head`), so a reader can still say which message it was and
  answer it — it never drops a line silently;
* :class:`FrameDecoder` reads the length-prefixed frames of :mod:`multiprocessing.connection` (a
  4-byte big-endian length, or -1 and an 8-byte length for large ones), the format of the worker
  channels; a header announcing more than the bound is an :class:`OversizeFrame` error at once,
  before a byte of the payload is read. :func:`frame` builds such a frame.

:func:`encode` produces exactly one line of UTF-8 JSON (JSON escapes control characters, so the
message never contains a raw newline) or raises ``ValueError`` for values JSON cannot carry (NaN,
infinities, lone surrogates, nesting deeper than the interpreter's recursion limit).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# What the envelope of a result (op, id, ok) may add to a tool's value on its way to the client: a
# worker keeps its encoded result within MAX_MESSAGE_BYTES - ENVELOPE_BYTES, so every hop fits.
ENVELOPE_BYTES = 64 * 1024
OVERSIZE_HEAD_BYTES = 256


@dataclass(frozen=True)
class Oversize:
    """Placeholder for a line longer than the decoder's bound (its content was dropped but its
    first :data:`OVERSIZE_HEAD_BYTES` bytes, which name the message, are kept)."""

    length: int
    head: bytes = field(default=b"", compare=False)


_HEAD_FIELD = re.compile(rb'"(op|id)"\s*:\s*"((?:[^"\\]|\\.){1,200})"')


def head_fields(head: bytes) -> dict[str, str]:
    """The ``op`` and ``id`` string fields found in the first bytes of a message, if any."""
    found: dict[str, str] = {}
    for match in _HEAD_FIELD.finditer(head):
        key = match.group(1).decode()
        if key not in found:
            try:
                found[key] = json.loads(b'"' + match.group(2) + b'"')
            except ValueError:
                continue
    return found


class LineDecoder:
    def __init__(self, max_line_bytes: int = MAX_MESSAGE_BYTES):
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._discarding = 0  # > 0 while skipping the rest of an oversize line
        self._head = b""

    def feed(self, data: bytes) -> Iterator[bytes | Oversize]:
        start = 0
        while start < len(data):
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline
            chunk = data[start:end]
            if self._discarding:
                self._discarding += len(chunk)
            elif len(self._buffer) + len(chunk) > self.max_line_bytes:
                self._discarding = len(self._buffer) + len(chunk)
                self._head = (bytes(self._buffer[:OVERSIZE_HEAD_BYTES]) + chunk[:OVERSIZE_HEAD_BYTES])[
                    :OVERSIZE_HEAD_BYTES]
                self._buffer.clear()
            else:
                self._buffer += chunk
            if newline < 0:
                return
            if self._discarding:
                yield Oversize(self._discarding, self._head)
                self._discarding, self._head = 0, b""
            else:
                line = bytes(self._buffer)
                self._buffer.clear()
                if line.strip():
                    yield line
            start = newline + 1

    @property
    def pending(self) -> int:
        return len(self._buffer) + self._discarding


# -- length-prefixed frames, as multiprocessing.connection.Connection writes them ----------------------

_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!Q")


class OversizeFrame(ValueError):
    """A frame header announced more than the decoder's bound."""

    def __init__(self, length: int, bound: int):
        super().__init__(f"a message of {length} bytes exceeds the channel bound of {bound} bytes")
        self.length = length
        self.bound = bound


def frame(payload: bytes) -> bytes:
    """``payload`` as one frame of :meth:`multiprocessing.connection.Connection.send_bytes`."""
    n = len(payload)
    if n > 0x7FFFFFFF:
        return _SHORT.pack(-1) + _LONG.pack(n) + payload
    return _SHORT.pack(n) + payload


class FrameDecoder:
    """Feeds bytes, yields whole frame payloads; never buffers more than ``max_frame_bytes`` + 12."""

    def __init__(self, max_frame_bytes: int = MAX_MESSAGE_BYTES):
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._need: int | None = None  # payload length of the frame being read, once its header is in

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[bytes]:
        """Raises :class:`OversizeFrame` (the stream is unusable after it)."""
        self._buffer += data
        while True:
            if self._need is None:
                if len(self._buffer) < 4:
                    return
                (n,) = _SHORT.unpack_from(self._buffer)
                header = 4
                if n == -1:
                    if len(self._buffer) < 12:
                        return
                    (n,) = _LONG.unpack_from(self._buffer, 4)
                    header = 12
                if n < 0 or n > self.max_frame_bytes:
                    raise OversizeFrame(n, self.max_frame_bytes)
                del self._buffer[:header]
                self._need = n
            if len(self._buffer) < self._need:
                return
            with memoryview(self._buffer) as view:  # one copy of the payload, not a slice and a copy
                payload = bytes(view[: self._need])
            del self._buffer[: self._need]
            self._need = None
            yield payload

    @property
    def pending(self) -> int:
        return len(self._buffer)


def encode(message: Any) -> bytes:
    return encode_json(message) + b"\n"


# What ``json.dumps`` with these options would build for every message, built once (its encode is the same).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_json(message: Any) -> bytes:
    """``message`` as compact UTF-8 JSON (no trailing newline); ``ValueError`` if JSON cannot carry it."""
    try:
        text = _ENCODER.encode(message)
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"a string contains a lone surrogate (position {exc.start}) and is not valid Unicode") \
            from None
    except RecursionError:
        raise ValueError("the value is nested too deeply to encode") from None
