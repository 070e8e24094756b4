"""Bounded output, shared by every tool that returns text it did not write itself.

Promise: :class:`HeadTail` holds at most ``limit`` bytes however much is fed to it (the first half
and the last half of the stream) and counts every byte it saw. Rendering never splits a UTF-8
character at a cut, and reports undecodable bytes instead of raising: they become U+FFFD and
``invalid_utf8`` is set, so the text is always valid JSON and the flag says it is not byte-exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def utf8_prefix_end(data: bytes | bytearray, limit: int) -> int:
    """The largest ``n <= limit`` such that ``data[:n]`` does not end inside a UTF-8 character.

    ``data[:limit]`` is treated as cut from a longer stream: a trailing character whose lead byte
    announces more bytes than follow it is dropped.
    """
    n = min(limit, len(data))
    back = 0  # continuation bytes (10xxxxxx) at the end
    while back < 3 and n - back > 0 and (data[n - back - 1] & 0xC0) == 0x80:
        back += 1
    if n - back > 0:
        lead = data[n - back - 1]
        width = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
        if width > back + 1:
            return n - back - 1
    return n


def utf8_suffix_start(data: bytes | bytearray, start: int) -> int:
    """The smallest ``s >= start`` such that ``data[s:]`` does not begin inside a UTF-8 character."""
    s = start
    while s < len(data) and s - start < 3 and (data[s] & 0xC0) == 0x80:
        s += 1
    return s


def decode(data: bytes | bytearray) -> tuple[str, bool]:
    """Text and whether any byte was invalid UTF-8 (and replaced by U+FFFD)."""
    try:
        return bytes(data).decode("utf-8"), False
    except UnicodeDecodeError:
        return bytes(data).decode("utf-8", errors="replace"), True


@dataclass(frozen=True)
class BoundedText:
    text: str
    total_bytes: int  # every byte seen
    kept_bytes: int  # bytes of the source present in ``text``
    truncated: bool
    invalid_utf8: bool


class HeadTail:
    def __init__(self, limit: int):
        if limit < 2:
            raise ValueError("limit must be at least 2 bytes")
        self.limit = limit
        self.head_cap = limit // 2
        self.tail_cap = limit - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def newest(self, limit: int) -> bytes:
        """The last ``limit`` bytes seen that are still kept."""
        source = self.tail if self.tail else self.head
        return bytes(source[-limit:]) if limit > 0 else b""

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        n = len(data)
        if not n:
            return
        self.total += n
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
            n = len(data)
            if not n:
                return
        if n >= self.tail_cap:
            self.tail[:] = data[n - self.tail_cap :]
        else:
            overflow = len(self.tail) + n - self.tail_cap
            if overflow > 0:
                del self.tail[:overflow]
            self.tail += data

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def render(self, clean: Callable[[str], str] | None = None,
               redact: Callable[[bytes, bool, bool], bytes] | None = None) -> BoundedText:
        """The kept text; ``clean`` (e.g. :func:`peon.core.output.terminal.clean_terminal_text`) is applied to
        the head and the tail separately, never to the omission marker; so is ``redact`` (bytes, whether
        they were cut from what came before, whether from what came after: see
        :func:`peon.core.redaction.cuts.redact_cut`), before they are decoded."""
        keep: Callable[[str], str] = clean or (lambda text: text)
        if not self.truncated:
            whole = bytes(self.head + self.tail)
            text, invalid = decode(redact(whole, False, False) if redact is not None else whole)
            return BoundedText(keep(text), self.total, self.total, False, invalid)
        head = bytes(self.head[: utf8_prefix_end(self.head, len(self.head))])
        tail = bytes(self.tail[utf8_suffix_start(self.tail, 0) :])
        omitted = self.total - len(head) - len(tail)
        kept = len(head) + len(tail)
        if redact is not None:
            head, tail = redact(head, False, True), redact(tail, True, False)
        head_text, bad_head = decode(head)
        tail_text, bad_tail = decode(tail)
        marker = f"\n[... {omitted} bytes omitted ...]\n"
        return BoundedText(keep(head_text) + marker + keep(tail_text), self.total, kept, True,
                           bad_head or bad_tail)
