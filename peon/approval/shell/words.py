"""The value bash gives a word: quote removal, escapes, and whether it expands at run time.

Promise: :func:`literal` returns a word's value exactly as bash would after quote removal (backslashes,
single, double and ``$'...'`` quotes), or None whenever bash could make it anything else — a glob, a
brace or tilde expansion, a parameter, a substitution, an escape it does not model. It never guesses:
None is the answer for anything it does not fully understand. Pure, and linear in the word's length.
Owns the reading of single words; which words make a command is :mod:`peon.approval.shell.walk`'s.
"""

from __future__ import annotations

import re
from typing import Any


_BRACE_EXPANSION = re.compile(r"\{[^{}\s]*(,|\.\.)[^{}\s]*\}")  # {a,b} and {1..3}; {} stays literal
_ANSI_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _may_brace_expand(text: str) -> bool:
    """Whether ``{`` then ``,`` or ``..`` then ``}`` occur in this order (one linear scan)."""
    opening = text.find("{")
    if opening < 0:
        return False
    comma, dots = text.find(",", opening), text.find("..", opening)
    separator = min(i for i in (comma, dots, len(text)) if i >= 0)
    return separator < len(text) and text.find("}", separator) >= 0


def _unquote_bare(text: str) -> str | None:
    """A bare word's value: backslashes removed; None if bash would expand it (glob, brace, tilde, $)."""
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 < len(text):
                if text[i + 1] != "\n":  # backslash-newline is a line continuation
                    out.append(text[i + 1])
                i += 2
                continue
            out.append(ch)
        elif ch in "*?[$`" or (ch == "~" and i == 0) or (ch == "{" and _BRACE_EXPANSION.match(text, i)):
            return None
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _unquote_double(inner: str) -> str:
    out = []
    i = 0
    while i < len(inner):
        ch = inner[i]
        if ch == "\\" and i + 1 < len(inner) and inner[i + 1] in '$`"\\\n':
            if inner[i + 1] != "\n":
                out.append(inner[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _unquote_ansi_c(inner: str) -> str | None:
    out = []
    i = 0
    while i < len(inner):
        ch = inner[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(inner):
            return None
        nxt = inner[i + 1]
        if nxt in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[nxt])
            i += 2
            continue
        match = re.match(r"x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})|([0-7]{1,3})", inner[i + 1:])
        if match is None:
            return None  # \c and friends: not worth guessing
        digits = next(g for g in match.groups() if g is not None)
        code = int(digits, 8 if match.group(4) else 16)
        if code == 0 or code > 0x10FFFF:
            return None  # bash ends the word at NUL
        out.append(chr(code))
        i += 1 + match.end()
    return "".join(out)


def literal(node: Any) -> str | None:
    """The value bash gives a word node after quote removal, or None if it is computed at run time."""
    kind = node.type
    text = node.text.decode("utf-8", "surrogateescape")
    if kind == "word" or (kind == "number" and node.named_child_count == 0):
        return _unquote_bare(text)
    if kind == "raw_string":
        return text[1:-1] if len(text) >= 2 and text.endswith("'") else None
    if kind == "string":
        if any(child.type != "string_content" for child in node.named_children) or not text.endswith('"'):
            return None
        return _unquote_double(text[1:-1])
    if kind == "ansi_c_string":
        return _unquote_ansi_c(text[2:-1]) if len(text) >= 3 and text.endswith("'") else None
    if kind == "concatenation":
        if _may_brace_expand(text):
            return None  # {a,'b'}: brace expansion across quoted parts
        parts = [literal(child) for child in node.children]
        return None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)
    return None  # expansions, substitutions, translated strings, arrays...


def joined_words(nodes: list[Any]) -> list[str | None]:
    """Literal words; nodes with nothing between them are one word to bash (the grammar sometimes
    splits ``$'a'b`` in two)."""
    words: list[str | None] = []
    previous_end = -1
    for node in nodes:
        value = literal(node)
        if node.start_byte == previous_end and words:
            last = words[-1]
            words[-1] = None if last is None or value is None else last + value
        else:
            words.append(value)
        previous_end = node.end_byte
    return words


def written_words(nodes: list[Any]) -> list[str]:
    """Each word of :func:`joined_words` as it is written in the command line (before expansion), so a
    word computed at run time can be shown as typed (``~/``, ``$HOME``) rather than as unknown."""
    written: list[str] = []
    previous_end = -1
    for node in nodes:
        text = node.text.decode("utf-8", "surrogateescape")
        if node.start_byte == previous_end and written:
            written[-1] += text
        else:
            written.append(text)
        previous_end = node.end_byte
    return written


def heredoc_delimiter(word: str) -> str | None:
    if "$" in word or "`" in word:
        return None
    out, quote = [], ""
    i = 0
    while i < len(word):
        ch = word[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"' and i + 1 < len(word):
                i += 1
                out.append(word[i])
            else:
                out.append(ch)
        elif ch in "'\"":
            quote = ch
        elif ch == "\\" and i + 1 < len(word):
            i += 1
            out.append(word[i])
        else:
            out.append(ch)
        i += 1
    return "".join(out)
