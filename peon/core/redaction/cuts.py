"""Redacting bytes cut out of a longer stream, where a secret may have been cut in two.

Promise: :func:`redact_cut` redacts ``data`` like :meth:`~peon.core.redaction.redactor.Redactor.redact`
and, at each edge where ``data`` was cut from the bytes around it, also replaces the piece of a secret
that the cut may have left, which no rule can recognise whole (kind ``partial``):

* at its end (``cut_after``: a head kept before omitted bytes, or a stream still being written): the
  last run of non-blank bytes when it holds the start of a well-known format
  (:data:`~peon.core.redaction.rules.FORMAT_PREFIXES`; from there on) or a URL's ``user:`` (what
  follows it), follows a credential header
  (``Bearer``, ``Authorization: Basic``…), or ends with the start of one of the session's own secrets
  (at least :data:`MIN_PIECE` bytes of it); a private key block with no end is redacted to ``data``'s
  end by its rule;
* at its start (``cut_before``: a tail kept after omitted bytes): the first run of non-blank bytes when
  it ends with the rest of one of the session's own secrets, or is short enough to be the rest of a
  token (at most :data:`MAX_PIECE` bytes) and mixes letters and digits; and the body of a private key
  block whose beginning was cut off (through its ``-----END`` line).

A piece too long to be the rest of a secret, or of letters or digits only, is kept: a cut through
ordinary text changes nothing (what a cut leaves of a secret shorter than :data:`MIN_PIECE`, or of an
unmarked one, is the limit).
"""

from __future__ import annotations

import re
from collections import Counter

from peon.core.redaction.redactor import Redactor, Span
from peon.core.redaction.rules import FORMAT_PREFIXES

PARTIAL = "partial"
MIN_PIECE = 4
MAX_PIECE = 300  # longer than any format's token: a longer run cannot be the rest of one
_HEADER = re.compile(rb"(?:[Bb]earer|BEARER|[Bb]asic|BASIC|[Tt]oken|TOKEN)[ \t]+$")
_KEY_END = re.compile(rb"-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----")
_URL_USER = re.compile(rb"://[^/@\s]{1,128}:")
_BLANK = b" \t\r\n\"'`<>()[]{},;="


def _run_start(data: bytes, end: int) -> int:
    """Where the run of non-blank bytes that ends at ``end`` starts (at most MAX_PIECE bytes back)."""
    start = end
    floor = max(0, end - MAX_PIECE)
    while start > floor and data[start - 1] not in _BLANK:
        start -= 1
    return start


def _run_end(data: bytes, start: int) -> int:
    end = start
    ceiling = min(len(data), start + MAX_PIECE + 1)
    while end < ceiling and data[end] not in _BLANK:
        end += 1
    return end


def _cut_end_piece(redactor: Redactor, data: bytes, floor: int) -> int | None:
    """Where the piece of a secret the end of ``data`` may hold starts (None: there is none)."""
    size = len(data)
    start = max(_run_start(data, size), floor)
    if start >= size:
        return None
    run = data[start:]
    found = [at for at in (run.find(prefix) for prefix in FORMAT_PREFIXES) if at >= 0]
    if found:
        return start + min(found)
    password = _URL_USER.search(run)
    if password is not None:
        return start + password.end()
    if _HEADER.search(data, max(floor, start - 40), start):
        return start
    for value, _ in redactor.literals:
        for length in range(min(len(value) - 1, size - floor), MIN_PIECE - 1, -1):
            if data.endswith(value[:length]):
                return size - length
    return None


def _cut_start_piece(redactor: Redactor, data: bytes) -> int | None:
    """Where the piece of a secret the start of ``data`` may hold ends (None: there is none)."""
    end = _run_end(data, 0)
    key_end = _KEY_END.search(data, 0, 16384 + 128)
    if key_end is not None and b"-----BEGIN" not in data[:key_end.start()]:
        return key_end.end()
    for value, _ in redactor.literals:
        for length in range(min(len(value) - 1, len(data)), MIN_PIECE - 1, -1):
            if data.startswith(value[-length:]):
                return length
    if 0 < end <= MAX_PIECE:
        run = data[:end]
        if any(48 <= c <= 57 for c in run) and any(65 <= c <= 90 or 97 <= c <= 122 for c in run):
            return end
    return None


def redact_cut(redactor: Redactor, data: bytes, counts: Counter[str], *, cut_before: bool = False,
               cut_after: bool = False) -> bytes:
    """``data`` redacted, with what a cut may have left of a secret at either edge replaced too."""
    spans = redactor.spans(data)
    head_end = 0
    if cut_before and data:
        piece_end = _cut_start_piece(redactor, data)
        if piece_end is not None:
            spans = [span for span in spans if span.start >= piece_end]
            spans.insert(0, Span(0, piece_end, PARTIAL))
            head_end = piece_end
    if cut_after and data:
        floor = max([head_end, *(span.end for span in spans)])
        piece_start = _cut_end_piece(redactor, data, floor)
        if piece_start is not None:
            spans.append(Span(piece_start, len(data), PARTIAL))
    return redactor.replace(data, spans, counts)
