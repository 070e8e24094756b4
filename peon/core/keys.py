"""What an agent types into a running job: text and named keys, as a sequence of tokens and as the bytes
a terminal (or a pipe) would send for them (pure).

Promise: :func:`tokens_of` turns ``job_write``'s ``text`` and ``keys`` into one sequence of
:class:`Token` — every character of ``text`` and every entry of ``keys`` in order, text first — where
each control character of ``text`` is named as the key a terminal sends it for (``"\\n"`` and ``"\\r"``
are ``Enter``, ``"\\x7f"`` ``Backspace``, ``"\\x03"`` ``C-c``...), so that what a write *does* is
judged from the same tokens whichever way it was spelled. A ``keys`` entry is a key name of
:data:`KEYS` or ``C-<letter>``; any other entry is literal text (``"hello"``, ``":wq"``), which must
hold no control character. :func:`encode` gives the bytes: xterm's sequences on a terminal; on a pipe
``Enter`` is ``"\\n"`` (no terminal turns ``"\\r"`` into a newline there). Nothing else is encoded:
an unknown key name in a place where it cannot be text is a :class:`ValueError`.
"""

from __future__ import annotations

from dataclasses import dataclass

# xterm's bytes for the named keys (normal cursor mode: what a program sees until it asks otherwise)
KEYS: dict[str, bytes] = {
    "Enter": b"\r", "Tab": b"\t", "Escape": b"\x1b", "Backspace": b"\x7f", "Space": b" ",
    "Up": b"\x1b[A", "Down": b"\x1b[B", "Right": b"\x1b[C", "Left": b"\x1b[D",
    "Home": b"\x1b[H", "End": b"\x1b[F", "Insert": b"\x1b[2~", "Delete": b"\x1b[3~",
    "PageUp": b"\x1b[5~", "PageDown": b"\x1b[6~",
    "F1": b"\x1bOP", "F2": b"\x1bOQ", "F3": b"\x1bOR", "F4": b"\x1bOS", "F5": b"\x1b[15~", "F6": b"\x1b[17~",
    "F7": b"\x1b[18~", "F8": b"\x1b[19~", "F9": b"\x1b[20~", "F10": b"\x1b[21~", "F11": b"\x1b[23~",
    "F12": b"\x1b[24~",
    "C-\\": b"\x1c", "C-]": b"\x1d", "C-^": b"\x1e", "C-_": b"\x1f", "C-@": b"\x00",
}
for _letter in "abcdefghijklmnopqrstuvwxyz":
    KEYS[f"C-{_letter}"] = bytes([ord(_letter) - ord("a") + 1])
del _letter
# A control character of text is the key a terminal sends it for (the first name wins: "\r" is Enter).
_NAMED_BYTES = {"\r": "Enter", "\n": "Enter", "\t": "Tab", "\x1b": "Escape", "\x7f": "Backspace",
                "\x08": "C-h", "\x00": "C-@"}
for _name, _value in KEYS.items():
    if len(_value) == 1 and _value[0] < 0x20:
        _NAMED_BYTES.setdefault(_value.decode("ascii"), _name)
del _name, _value
MAX_KEYS = 256  # entries of one write's ``keys``
MAX_KEY_CHARS = 4096  # characters of one literal entry of ``keys``


@dataclass(frozen=True)
class Token:
    """One thing typed: a printable character (``key`` None) or a named key (``text`` empty)."""

    text: str = ""
    key: str | None = None


def is_control(ch: str) -> bool:
    """A character no terminal shows as itself: C0 controls, DEL, and C1 controls."""
    code = ord(ch)
    return code < 0x20 or 0x7F <= code < 0xA0


def tokens_of(text: str | None, keys: list[str] | tuple[str, ...] | None) -> list[Token]:
    """The tokens of a write (see the module's promise); ``ValueError`` for literal text in ``keys`` that
    holds a control character."""
    tokens: list[Token] = []
    for ch in text or "":
        tokens.append(_char_token(ch))
    for entry in keys or ():
        if entry in KEYS:
            tokens.append(Token(key=entry if entry != "Space" else None, text=" " if entry == "Space" else ""))
            continue
        if not entry or any(is_control(ch) for ch in entry):
            raise ValueError(f"{entry[:40]!r} is neither a key name (Enter, Tab, Escape, Up, C-c...) nor "
                             "text without control characters")
        tokens.extend(Token(text=ch) for ch in entry)
    return tokens


def _char_token(ch: str) -> Token:
    if ch in _NAMED_BYTES:
        return Token(key=_NAMED_BYTES[ch])
    if is_control(ch):
        return Token(key=f"U+{ord(ch):04X}")  # a C1 control: no name, never modelled
    return Token(text=ch)


def encode(tokens: list[Token], *, terminal: bool) -> bytes:
    """The bytes of ``tokens``, on a terminal (``terminal``) or a pipe (see the module's promise)."""
    out = bytearray()
    for token in tokens:
        if token.key is None:
            out += token.text.encode("utf-8")  # a lone surrogate: UnicodeEncodeError, a ValueError
        elif token.key == "Enter" and not terminal:
            out += b"\n"
        elif token.key in KEYS:
            out += KEYS[token.key]
        elif token.key.startswith("U+"):
            out += chr(int(token.key[2:], 16)).encode("utf-8")
        else:
            raise ValueError(f"no bytes for the key {token.key!r}")
    return bytes(out)
