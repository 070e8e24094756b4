"""A terminal job's screen as a person would see it, rendered by a terminal emulator (``pyte``) (pure).

Promise: a :class:`Screen` of ``rows`` x ``cols`` (within :data:`MAX_ROWS` x :data:`MAX_COLS`) is fed
the bytes a program wrote to its terminal, in order and in pieces of any size (a UTF-8 character or an
escape sequence split between pieces is joined), and :meth:`Screen.render` returns its rows of text
(trailing spaces removed), the cursor's position (0-based) and whether the program switched to the
alternate screen (full-screen programs such as ``vim``, ``less`` and ``top`` do). Whatever the program
writes, feeding never fails: a sequence the emulator cannot take restarts its parser (the screen is then
``incomplete``). Feeding work is
bounded by what is fed: the caller feeds only the bytes its output store retained
(:meth:`Screen.feed_from`: a gap — bytes evicted before they were fed — starts the screen afresh from
the oldest retained byte, and says so in ``incomplete``). ``pyte`` is imported on the first screen,
so a process that never renders one never loads it.
"""

from __future__ import annotations

from typing import Any

MAX_ROWS = 500
MAX_COLS = 1000
DEFAULT_ROWS = 24
DEFAULT_COLS = 80
_ALTERNATE_MODES = (47, 1047, 1049)  # DEC private modes of the alternate screen (pyte shifts them by << 5)


class Screen:
    """One terminal's screen (see the module's promise)."""

    def __init__(self, rows: int = DEFAULT_ROWS, cols: int = DEFAULT_COLS):
        import pyte  # here: only a process that renders a screen pays for the emulator

        if not (1 <= rows <= MAX_ROWS and 1 <= cols <= MAX_COLS):
            raise ValueError(f"a screen is 1..{MAX_ROWS} rows by 1..{MAX_COLS} columns")
        self.rows, self.cols = rows, cols
        self._pyte = pyte
        self._screen = _screen_class(pyte)(cols, rows)
        self._stream = pyte.ByteStream(self._screen)
        self.fed = 0  # absolute offset one past the last byte fed
        self.incomplete = False  # output was evicted before it was fed: the screen starts after a gap
        self.alternate = False

    def feed(self, data: bytes) -> None:
        self._watch_alternate(data)
        try:
            self._stream.feed(data)
        except Exception:  # a sequence the emulator chokes on: its parser is spent, start a new one
            self._stream = self._pyte.ByteStream(self._screen)
            self.incomplete = True
        self.fed += len(data)

    def feed_from(self, offset: int, data: bytes) -> None:
        """Feed ``data``, which begins at absolute ``offset`` of the program's output."""
        if offset > self.fed:  # a gap: what the screen showed is unknown, start afresh
            self._screen = _screen_class(self._pyte)(self.cols, self.rows)
            self._stream = self._pyte.ByteStream(self._screen)
            self.incomplete = True
            self.fed = offset
        elif offset < self.fed:
            data = data[self.fed - offset:]
        if data:
            self.feed(data)

    def _watch_alternate(self, data: bytes) -> None:
        # pyte draws on one buffer; whether the program is on the alternate screen is told from its modes.
        for mode in _ALTERNATE_MODES:
            if f"\x1b[?{mode}h".encode() in data:
                self.alternate = True
            if f"\x1b[?{mode}l".encode() in data:
                self.alternate = False

    def render(self) -> dict[str, Any]:
        lines = [line.rstrip() for line in self._screen.display]
        return {"rows": self.rows, "cols": self.cols, "lines": lines,
                "cursor": {"row": self._screen.cursor.y, "col": self._screen.cursor.x},
                "alternate_screen": self.alternate, "incomplete": self.incomplete}


_SCREEN_CLASS: list[Any] = []


def _screen_class(pyte: Any) -> Any:
    """pyte's screen, which ignores the private SGR sequences (``CSI > ... m``, xterm's modifyOtherKeys:
    vim sends them) that pyte 0.8 passes to a method that does not take them."""
    if not _SCREEN_CLASS:
        class PrivateSgrScreen(pyte.Screen):  # type: ignore[misc]
            def select_graphic_rendition(self, *attrs: int, private: bool = False) -> None:
                if not private:
                    super().select_graphic_rendition(*attrs)

        _SCREEN_CLASS.append(PrivateSgrScreen)
    return _SCREEN_CLASS[0]


SCREEN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "With screen: true, a terminal job's screen as a person would see it.",
    "properties": {
        "rows": {"type": "integer"}, "cols": {"type": "integer"},
        "lines": {"type": "array", "items": {"type": "string"}, "description": "Each row's text."},
        "cursor": {"type": "object", "properties": {"row": {"type": "integer"}, "col": {"type": "integer"}}},
        "alternate_screen": {"type": "boolean", "description": "A full-screen program (vim, less) is showing."},
        "incomplete": {"type": "boolean",
                       "description": "Output was evicted before it was rendered: the screen starts after it."},
    },
}
