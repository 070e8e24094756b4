"""Why a string is not valid UTF-8, in the one sentence every error message about it uses.

Promise: :func:`lone_surrogate` never raises; it names the first lone surrogate (the only thing that
stops a Python ``str`` from encoding as UTF-8) by code point and index, or returns ``None``.
"""

from __future__ import annotations


def lone_surrogate(text: str) -> str | None:
    """Why ``text`` cannot be encoded (``"lone surrogate U+D800 at index 3"``), or ``None`` when it can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"lone surrogate U+{ord(text[exc.start]):04X} at index {exc.start}"
    return None
