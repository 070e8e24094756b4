"""JSON-lines framing, sans I/O: bytes in, messages out; messages in, bytes out.

Promise: :class:`LineDecoder` never holds more than ``max_line_bytes`` of an unfinished line; a longer
line is discarded up to its newline and reported once as an :class:`Oversize` item, so a peer cannot
make the reader grow without bound or lose its place in the stream. :func:`encode` produces exactly one
line of UTF-8 JSON (JSON escapes control characters, so the message never contains a raw newline) or
raises ``ValueError`` for values JSON cannot carry (NaN, infinities, lone surrogates, nesting deeper
than the interpreter's recursion limit).

Used for the supervisor's channels to its client and workers, and for MCP's stdio transport.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass(frozen=True)
class Oversize:
    """Placeholder for a line longer than the decoder's bound (its content was dropped)."""

    length: int


class LineDecoder:
    def __init__(self, max_line_bytes: int = 64 * 1024 * 1024):
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._discarding = 0  # > 0 while skipping the rest of an oversize line

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
                self._buffer.clear()
            else:
                self._buffer += chunk
            if newline < 0:
                return
            if self._discarding:
                yield Oversize(self._discarding)
                self._discarding = 0
            else:
                line = bytes(self._buffer)
                self._buffer.clear()
                if line.strip():
                    yield line
            start = newline + 1

    @property
    def pending(self) -> int:
        return len(self._buffer) + self._discarding


def encode(message: Any) -> bytes:
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError as exc:
        raise ValueError(f"a string contains a lone surrogate (position {exc.start}) and is not valid Unicode") from None
    except RecursionError:
        raise ValueError("the value is nested too deeply to encode") from None
