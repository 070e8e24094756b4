"""What an analysis of a ``bash`` command line says: its simple commands, what cannot be seen, where it writes.

Promise: the types here are frozen values (a :class:`ShellAnalysis` is safe to share and to keep); what an
approver is shown of one (:meth:`ShellAnalysis.to_dict`) is bounded: at most :data:`MAX_SHOWN_SEGMENTS`
segments, each word shortened to :data:`MAX_SHOWN_WORD_CHARS` characters with the count of what was cut.
Owns the result types and how they are shown; how they are found is :mod:`peon.approval.shell.walk`'s.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from peon.core.text import shorten, shorten_counted

MAX_SHOWN_SEGMENTS = 50  # an approval request shows at most this many segments
MAX_SHOWN_WORD_CHARS = 200


@dataclass(frozen=True)
class Redirect:
    operator: str  # ">", ">>", "&>", "<", "<<", "<<<", ">&", ...
    target: str | None  # the literal target word; None when computed at run time
    writes: bool

    def show(self) -> str:
        return f"{self.operator}{'?' if self.target is None else self.target}"


@dataclass(frozen=True)
class Segment:
    """One simple command, normalised: ``words[0]`` is the program as typed (after wrappers)."""

    words: tuple[str | None, ...]  # literal words; None for a word computed at run time
    source: str  # the text of the command as written
    wrappers: tuple[str, ...] = ()  # removed wrappers, outermost first (e.g. ("env", "nice"))
    assignments: tuple[str, ...] = ()  # names assigned for this command only (FOO=1 cmd)
    redirects: tuple[Redirect, ...] = ()
    origin: str = ""  # "", "command substitution", "find -exec", "xargs", "bash -c", ...
    cwds: tuple[str | None, ...] = (".",)  # where it may run, workspace-relative; None = unknown
    notes: tuple[str, ...] = ()  # why this segment alone can never be allowed by rules
    written: tuple[str, ...] = field(default=(), compare=False)  # each word as typed, when known (for display)

    @property
    def program(self) -> str | None:
        """The program's name without a directory (``/usr/bin/touch`` → ``touch``)."""
        first = self.words[0] if self.words else None
        return None if first is None else posixpath.basename(first) or first

    def as_written(self, index: int) -> str:
        """Word ``index`` as typed (a word computed at run time is shown so, never evaluated); ``?`` when
        the text is not known."""
        return _shown(self.written[index]) if len(self.written) == len(self.words) else "?"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"words": [_shown(w) if w is not None else self.as_written(i)
                                         for i, w in enumerate(self.words)]}
        for key in ("wrappers", "assignments", "notes"):
            if getattr(self, key):
                out[key] = list(getattr(self, key))
        if self.redirects:
            out["redirects"] = [r.show() for r in self.redirects]
        if self.origin:
            out["origin"] = self.origin
        return out


@dataclass(frozen=True)
class Write:
    target: str | None  # literal path as written; None when computed at run time
    cwds: tuple[str | None, ...]  # workspace-relative working directories it may be relative to


@dataclass(frozen=True)
class ShellAnalysis:
    segments: tuple[Segment, ...]
    opaque: tuple[str, ...] = ()  # parts no one can see statically: match every deny/ask rule
    dynamic: tuple[str, ...] = ()  # visible, but never allowed by rules
    writes: tuple[Write, ...] = ()
    command: str = ""  # the line analysed: an analysis is reused only for the line it is of

    @property
    def parsed(self) -> bool:
        return not self.opaque

    def to_dict(self) -> dict[str, Any]:
        shown = self.segments[:MAX_SHOWN_SEGMENTS]
        out: dict[str, Any] = {"segments": [s.to_dict() for s in shown]}
        if len(self.segments) > len(shown):
            out["segments_not_shown"] = len(self.segments) - len(shown)
        if self.opaque:
            out["unanalyzable"] = list(self.opaque)
        if self.dynamic:
            out["dynamic"] = list(self.dynamic)
        return out


def _shown(word: str) -> str:
    return shorten_counted(word, MAX_SHOWN_WORD_CHARS)


def one_line(text: str, limit: int = 60) -> str:
    """``text`` as a reason quotes it: on one line (newlines as \\n), at most ``limit`` characters."""
    text = text.replace("\n", "\\n")
    return shorten(text, limit)
