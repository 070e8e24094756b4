"""Terminal output made readable for a model (pure).

Promise: :func:`clean_terminal_text` removes ANSI/VT escape sequences (CSI such as colours and cursor
moves, OSC such as window titles and hyperlinks, two-byte ESC sequences and C1 CSI), including a
sequence cut off at the end of the text, and collapses each line's carriage-return rewrites (progress
bars, spinners) to what a terminal would finally show on it. ``\\r\\n`` is a line end. Other text,
newlines and tabs are kept as they are, so text without escapes or carriage returns is returned
unchanged. It works on decoded text, so it never splits a UTF-8 character; the raw bytes are what the
output store keeps.
"""

from __future__ import annotations

import re

# CSI: ESC [ params intermediates final; OSC: ESC ] ... (BEL | ESC \\); other ESC sequences: ESC then
# intermediates and one final byte; the 8-bit CSI (U+009B). Each alternative also matches a sequence
# cut off at the end of the text, so a truncated head never leaves half an escape behind.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*(?:[@-~]|\Z)"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\|\Z)"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\|\Z)"
    r"|\x1b[ -/]*(?:[0-~]|\Z)"
    r"|\x9b[0-?]*[ -/]*(?:[@-~]|\Z)"
)


def strip_escapes(text: str) -> str:
    return _ESCAPES.sub("", text) if ("\x1b" in text or "\x9b" in text) else text


def _overlay(line: str) -> str:
    """What a terminal shows of one line whose parts were each written from column 0."""
    parts = line.split("\r")
    shown = parts[0]
    for part in parts[1:]:
        shown = part + shown[len(part) :] if len(part) < len(shown) else part
    return shown


def collapse_carriage_returns(text: str) -> str:
    if "\r" not in text:
        return text
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(_overlay(line) if "\r" in line else line for line in lines)


def clean_terminal_text(text: str) -> str:
    return collapse_carriage_returns(strip_escapes(text))


def newest_lines(data: bytes, count: int, width: int) -> list[str]:
    """The last ``count`` non-blank lines of ``data`` (the newest bytes of a stream; it may begin
    inside a character), cleaned, each shortened to at most ``width`` UTF-8 bytes."""
    if count <= 0 or not data:
        return []
    start = 0
    while start < len(data) and start < 3 and (data[start] & 0xC0) == 0x80:
        start += 1
    text = clean_terminal_text(data[start:].decode("utf-8", errors="replace"))
    lines = [line for line in text.split("\n") if line.strip()][-count:]
    return [_shorten(line, width) for line in lines]


def _shorten(line: str, width: int) -> str:
    encoded = line.encode("utf-8")
    if len(encoded) <= width:
        return line
    return encoded[: max(width - 3, 0)].decode("utf-8", errors="ignore") + "..."
