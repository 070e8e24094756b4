"""Unified diffs of one file's change, bounded (pure).

Promise: :func:`unified_diff` renders the change from ``old`` to ``new`` as a unified diff (``---``/``+++``
headers, ``@@`` hunks with 3 lines of context, true line numbers) of at most ``max_bytes`` bytes: a longer
diff keeps its head and tail (:class:`peon.core.output.truncation.HeadTail`) and says how much was left out. It costs
what the change costs, not what the file costs: the common leading and trailing lines are found by
comparing slices (``memcmp``), so diffing one changed line in a 50 MiB file compares the rest once and
hands :mod:`difflib` only the changed lines and their context. Counts of added and removed lines are exact.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from peon.core.output.truncation import HeadTail

CONTEXT_LINES = 3
DEFAULT_MAX_DIFF_BYTES = 64 << 10


@dataclass(frozen=True)
class Diff:
    text: str
    added: int  # lines
    removed: int
    truncated: bool
    total_bytes: int  # of the whole diff before truncation


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix: galloping chunks, then bisection (each comparison a memcmp)."""
    low, limit, step = 0, min(len(a), len(b)), 1 << 16
    while low < limit:
        end = min(limit, low + step)
        if a[low:end] != b[low:end]:
            high = end - 1  # a[low:end] differs: the answer is in [low, end)
            while low < high:
                mid = (low + high + 1) // 2
                if a[low:mid] == b[low:mid]:
                    low = mid
                else:
                    high = mid - 1
            return low
        low, step = end, step * 2
    return low


def _common_suffix(a: str, b: str, limit: int) -> int:
    """Length of the longest common suffix not overlapping the first ``limit`` characters of either."""
    n = min(len(a), len(b)) - limit
    low, high = 0, n
    while low < high:
        mid = (low + high + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            low = mid
        else:
            high = mid - 1
    return low


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def _nth_line_start_back(text: str, index: int, lines: int) -> int:
    """Start of the line ``lines`` lines above the one holding ``index``."""
    start = _line_start(text, index)
    for _ in range(lines):
        if start == 0:
            break
        start = _line_start(text, start - 1)
    return start


def _nth_line_end_forward(text: str, index: int, lines: int) -> int:
    """End (after its newline) of the line ``lines`` lines below the one starting at ``index``."""
    end = index
    for _ in range(lines):
        nl = text.find("\n", end)
        if nl < 0:
            return len(text)
        end = nl + 1
    return end


def unified_diff(path: str, old: str, new: str, max_bytes: int = DEFAULT_MAX_DIFF_BYTES) -> Diff:
    """The bounded unified diff of ``old`` → ``new`` for ``path`` (empty when they are equal)."""
    if old == new:
        return Diff("", 0, 0, False, 0)
    prefix = _line_start(old, _common_prefix(old, new))  # whole lines only
    suffix = _common_suffix(old, new, prefix)
    # Back to whole lines: the changed region ends where a line ends in both texts.
    old_end, new_end = len(old) - suffix, len(new) - suffix
    while old_end < len(old) and ((old_end > 0 and old[old_end - 1] != "\n")
                                  or (new_end > 0 and new[new_end - 1] != "\n")):
        old_end += 1
        new_end += 1
    # Context around the changed region (difflib adds it back from these lines).
    start = _nth_line_start_back(old, prefix, CONTEXT_LINES) if prefix else 0
    first_line = old.count("\n", 0, start)
    old_stop = _nth_line_end_forward(old, old_end, CONTEXT_LINES)
    new_stop = new_end + (old_stop - old_end)
    a = old[start:old_stop].splitlines(keepends=True)
    b = new[start:new_stop].splitlines(keepends=True)
    out = HeadTail(max(2, max_bytes))
    out.feed(f"--- a/{path}\n+++ b/{path}\n".encode())
    added = removed = 0
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(CONTEXT_LINES):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.feed(f"@@ -{_range(first_line + i1, i2 - i1)} +{_range(first_line + j1, j2 - j1)} @@\n".encode())
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines = [" " + line for line in a[a1:a2]]
            else:
                lines = ["-" + line for line in a[a1:a2]] + ["+" + line for line in b[b1:b2]]
                removed += a2 - a1
                added += b2 - b1
            for line in lines:
                out.feed((line if line.endswith("\n") else line + "\n\\ No newline at end of file\n").encode())
    rendered = out.render()
    return Diff(rendered.text, added, removed, rendered.truncated, rendered.total_bytes)


def _range(start: int, length: int) -> str:
    """A hunk range in unified-diff notation (1-based; an empty range names the line before it)."""
    first = start + 1 if length else start
    return f"{first}" if length == 1 else f"{first},{length}"
