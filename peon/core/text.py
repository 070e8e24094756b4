"""Text for messages: shortening a string, and the one sentence for a string that is not UTF-8.

Shortening is the one helper every error, log and prompt line uses.

Promise: :func:`shorten` returns ``text`` unchanged when it fits, otherwise a prefix followed by the
ellipsis, never longer than ``limit`` characters in all. :func:`shorten_counted` keeps the first ``limit``
characters and says how many more there were, so a reader knows how much is not shown. Neither
escapes anything: callers quote (``repr``, JSON, :func:`peon.approvers.visible`) before shortening.
"""

from __future__ import annotations


def shorten(text: str, limit: int, ellipsis: str = "...") -> str:
    """``text`` if it has at most ``limit`` characters, else its start and ``ellipsis`` in ``limit`` characters."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(ellipsis))] + ellipsis


def shorten_counted(text: str, limit: int, ellipsis: str = "...", note: str = "more characters") -> str:
    """``text`` if it has at most ``limit`` characters, else its first ``limit`` characters, ``ellipsis``
    and ``[N more characters]`` (``note`` names what is counted)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}{ellipsis} [{len(text) - limit} {note}]"

def lone_surrogate(text: str) -> str | None:
    """Why ``text`` cannot be encoded (``"lone surrogate U+D800 at index 3"``), or ``None`` when it can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"lone surrogate U+{ord(text[exc.start]):04X} at index {exc.start}"
    return None
