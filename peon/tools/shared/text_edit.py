"""Exact string edits of a text, all or nothing (pure: no I/O).

Promises:

* :func:`apply_edits` applies the edits in order, each to the result of the previous one. An edit's
  ``old_string`` must occur exactly once in that text, or it must set ``replace_all``; otherwise the
  whole call fails and nothing is changed: ``not_found`` (with the closest match, its line and its
  similarity) or ``ambiguous`` (with the line of every occurrence). Errors name the edit by its index.
* Nothing is guessed: a model's typical slips are recognised and refused with a hint saying what to
  send instead (``details.hint``) — line-number prefixes copied from a numbered listing, a difference
  in trailing whitespace only, and a difference in Unicode normalisation only (NFC against NFD).
* Line endings are kept: in a file whose every line break is CRLF the edits match and insert with
  ``\\n`` or ``\\r\\n`` alike and the result has CRLF again; any other file is matched byte for byte.
* :func:`decode_utf8` refuses a file that is not UTF-8 with ``not_utf8`` and the offset.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from peon.core.errors import ErrorCode, ToolError

MAX_LISTED_OCCURRENCES = 100
MAX_SHOWN_CHARS = 2000  # of a closest match
CLOSEST_MATCH_MAX_LINES = 200_000  # lines scanned for the closest match (a hint, not a search)
LINE_NUMBER_PREFIX = re.compile(r"^ *\d+(?:\t|→|: | \| |\| )")

LineEnding = Literal["lf", "crlf"]


@dataclass(frozen=True)
class Edit:
    old: str
    new: str
    replace_all: bool = False


@dataclass(frozen=True)
class Applied:
    text: str
    replacements: int  # occurrences replaced, over all edits
    line_ending: LineEnding


def decode_utf8(data: bytes, shown: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(ErrorCode.NOT_UTF8, f"{shown} is not valid UTF-8 at offset {exc.start} ({exc.reason}); "
                        "only UTF-8 text files can be edited", {"offset": exc.start}) from None


def line_ending_of(text: str) -> LineEnding:
    """``crlf`` when the text has line breaks and every one of them is CRLF."""
    newlines = text.count("\n")
    return "crlf" if newlines and text.count("\r\n") == newlines else "lf"


def line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def occurrence_lines(text: str, needle: str, limit: int = MAX_LISTED_OCCURRENCES) -> tuple[list[int], int]:
    """(the 1-based lines of the first ``limit`` non-overlapping occurrences, their total count)."""
    lines: list[int] = []
    count, start, line, counted_to = 0, 0, 1, 0
    while (found := text.find(needle, start)) >= 0:
        count += 1
        if len(lines) < limit:
            line += text.count("\n", counted_to, found)
            counted_to = found
            lines.append(line)
        start = found + max(1, len(needle))
    return lines, count


def apply_edits(text: str, edits: Sequence[Edit], shown: str) -> Applied:
    """``text`` with every edit applied in order, or a ToolError naming the edit that cannot apply."""
    ending = line_ending_of(text)
    work = text.replace("\r\n", "\n") if ending == "crlf" else text
    replacements = 0
    for index, edit in enumerate(edits):
        old, new = edit.old, edit.new
        if ending == "crlf":
            old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
        where = f"edit {index} of {shown}"
        if not old:
            raise ToolError(ErrorCode.INVALID_INPUT, f"{where}: old_string is empty; give the exact text to replace "
                            "(use write to create a file)", {"edit": index, "rule": "old_string"})
        if old == new:
            raise ToolError(ErrorCode.INVALID_INPUT, f"{where}: old_string and new_string are the same; the edit "
                            "would change nothing", {"edit": index, "rule": "no_change"})
        lines, count = occurrence_lines(work, old)
        if count == 0:
            raise not_found(work, old, index, where)
        if count > 1 and not edit.replace_all:
            listed = ", ".join(map(str, lines)) + (" ..." if count > len(lines) else "")
            raise ToolError(ErrorCode.AMBIGUOUS,
                            f"{where}: old_string occurs {count} times (lines {listed}); include more surrounding "
                            "text so it occurs once, or set replace_all",
                            {"edit": index, "occurrences": count, "lines": lines})
        work = work.replace(old, new) if edit.replace_all else work.replace(old, new, 1)
        replacements += count if edit.replace_all else 1
    return Applied(work.replace("\n", "\r\n") if ending == "crlf" else work, replacements, ending)


# -- why an old_string was not found ---------------------------------------------------------------------


def _strip_line_numbers(old: str) -> str | None:
    lines = old.split("\n")
    numbered = [line for line in lines if line.strip()]
    if not numbered or not all(LINE_NUMBER_PREFIX.match(line) for line in numbered):
        return None
    return "\n".join(LINE_NUMBER_PREFIX.sub("", line, count=1) for line in lines)


def _loose_pattern(old: str) -> re.Pattern[str]:
    """``old`` with trailing spaces and tabs allowed to differ at the end of each of its lines."""
    lines = [re.escape(line.rstrip(" \t")) for line in old.split("\n")]
    tail = r"[ \t]*(?=\n|\Z)" if old.split("\n")[-1] != old.split("\n")[-1].rstrip(" \t") else ""
    return re.compile(r"[ \t]*\n".join(lines) + tail)


def _hint(work: str, old: str) -> tuple[str, str] | None:
    """(rule, sentence) for a recognised slip, or None."""
    stripped = _strip_line_numbers(old)
    if stripped is not None and stripped and stripped in work:
        return ("line_number_prefix", "old_string starts its lines with line numbers (as a numbered listing shows "
                "them); send the file's text without them")
    if old.strip() and _loose_pattern(old).search(work):
        return ("trailing_whitespace", "old_string differs from the file only in trailing whitespace at the end of "
                "some lines; copy the lines exactly as the file has them")
    if unicodedata.normalize("NFC", old) in unicodedata.normalize("NFC", work):
        return ("unicode_normalization", "old_string matches only after Unicode normalisation: the file and "
                "old_string write some characters in different forms (NFC and NFD); copy the characters exactly "
                "as the file has them")
    return None


def closest_match(work: str, old: str) -> tuple[str, int, float] | None:
    """(the run of the file's lines most like ``old``, its first line, similarity 0..1), scanning at most
    :data:`CLOSEST_MATCH_MAX_LINES` lines."""
    file_lines = work.split("\n", CLOSEST_MATCH_MAX_LINES)[:CLOSEST_MATCH_MAX_LINES]
    wanted = old.strip("\n").split("\n")
    anchor = next((line.strip() for line in wanted if line.strip()), "")
    if not anchor or not file_lines:
        return None
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(anchor)
    best, best_line = 0.0, -1
    for number, line in enumerate(file_lines):
        candidate = line.strip()
        if not candidate:
            continue
        matcher.set_seq1(candidate)
        if matcher.real_quick_ratio() <= best or matcher.quick_ratio() <= best:
            continue
        ratio = matcher.ratio()
        if ratio > best:
            best, best_line = ratio, number
    if best_line < 0:
        return None
    offset = next(i for i, line in enumerate(wanted) if line.strip())
    first = max(0, best_line - offset)
    window = "\n".join(file_lines[first:first + len(wanted)])
    similarity = difflib.SequenceMatcher(None, window, old.strip("\n"), autojunk=False).ratio()
    return window[:MAX_SHOWN_CHARS], first + 1, round(similarity, 3)


def not_found(work: str, old: str, index: int, where: str) -> ToolError:
    details: dict[str, object] = {"edit": index}
    message = f"{where}: old_string was not found"
    hint = _hint(work, old)
    if hint is not None:
        details["rule"], details["hint"] = hint
        message += f"; {hint[1]}"
    closest = closest_match(work, old)
    if closest is not None:
        text, line, similarity = closest
        details.update(closest_match=text, closest_line=line, similarity=similarity)
        message += f"; the closest text is at line {line} ({similarity:.0%} similar)"
    return ToolError(ErrorCode.NOT_FOUND, message, details)
