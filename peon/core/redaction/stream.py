"""Redacting a stream of output chunks so that a secret split across two chunks is still caught.

Promise: the bytes :meth:`StreamRedactor.feed` returns, followed by those of :meth:`StreamRedactor.finish`,
are what :meth:`peon.core.redaction.redactor.Redactor.redact` would make of the whole stream at once —
however it was cut into chunks — for every secret that does not span a newline (a private key block
does: it is held whole). To get there a bounded tail is held back from each chunk until more comes or
the stream ends: of the last, unfinished line (its last :data:`HOLD_BYTES` at most), what may be the
start of a secret still forming (:meth:`~peon.core.redaction.redactor.Redactor.forming_from`: from a
format's anchor, or the first bytes of an anchor or a session secret at its end), from a ``-----BEGIN``
with no end yet (up to :data:`~peon.core.redaction.rules.KEY_BLOCK_BYTES`), and any secret that reaches
into that tail. So what is emitted never ends with the first half of a secret, nothing held is lost
(:meth:`finish` emits it), and a prompt or a line being typed goes out at once (a program waiting for
input is seen waiting).

Cost: each byte is scanned once as it is emitted, plus the held tail again with the next chunk
(bounded by :data:`HOLD_BYTES` plus one secret).
"""

from __future__ import annotations

from collections import Counter

from peon.core.redaction.cuts import redact_cut
from peon.core.redaction.redactor import Redactor
from peon.core.redaction.rules import KEY_BEGIN, KEY_BLOCK_BYTES

HOLD_BYTES = 1024  # longer than any format's longest match but a key block: an unfinished line is held up to this
_KEY_HOLD = KEY_BLOCK_BYTES + 128


class StreamRedactor:
    """One stream's redaction state; :attr:`counts` is what it redacted so far."""

    __slots__ = ("_cut_before", "_pending", "counts", "redactor")

    def __init__(self, redactor: Redactor, *, cut_before: bool = False):
        """``cut_before``: the stream starts where bytes before it were dropped, so its start may be the
        rest of a secret (:func:`peon.core.redaction.cuts.redact_cut`)."""
        self.redactor = redactor
        self.counts: Counter[str] = Counter()
        self._pending = b""
        self._cut_before = cut_before

    @property
    def held(self) -> int:
        """Bytes fed and not yet emitted."""
        return len(self._pending)

    def feed(self, data: bytes | bytearray | memoryview) -> bytes:
        """The redacted bytes of ``data`` (after what was held) that no later chunk can change."""
        buf = self._pending + bytes(data) if self._pending else bytes(data)
        cut = _hold_from(buf, self.redactor)
        if cut == 0:
            self._pending = buf
            return b""
        spans = self.redactor.spans(buf)
        for span in spans:  # a secret reaching into the held tail is held whole
            if span.start < cut < span.end:
                cut = span.start
                break
        self._pending = buf[cut:]
        if self._cut_before:
            self._cut_before = False
            return redact_cut(self.redactor, buf[:cut], self.counts, cut_before=True)
        return self.redactor.replace(buf[:cut], [span for span in spans if span.end <= cut], self.counts)

    def finish(self) -> bytes:
        """The rest, redacted: the stream has ended."""
        buf, self._pending = self._pending, b""
        if not buf:
            return b""
        return redact_cut(self.redactor, buf, self.counts, cut_before=self._cut_before)


def _hold_from(buf: bytes, redactor: Redactor) -> int:
    """Where the tail of ``buf`` that must wait for the next chunk starts."""
    size = len(buf)
    line = max(buf.rfind(b"\n") + 1, size - HOLD_BYTES)
    cut = line + redactor.forming_from(buf[line:]) if line < size else size
    begin = buf.rfind(KEY_BEGIN, max(0, size - _KEY_HOLD))
    if begin >= 0 and begin < cut:
        end = buf.find(b"-----END", begin)
        if end < 0 or buf.find(b"\n", end) < 0:  # no end yet, or its line not whole: the block is held whole
            cut = begin
    return cut
