"""The ``apply_patch`` format (the one Codex models write), parsed and applied in memory (pure: no I/O).

Grammar (one operation per file; every line ends with a newline)::

    patch      := "*** Begin Patch" NL { operation } "*** End Patch" NL?
    operation  := add | delete | update
    add        := "*** Add File: " path NL { "+" text NL }
    delete     := "*** Delete File: " path NL
    update     := "*** Update File: " path NL [ "*** Move to: " path NL ] { hunk }
    hunk       := [ "@@" [ " " header ] NL ] { (" " | "-" | "+") text NL | NL } [ "*** End of File" NL ]

Promises:

* :func:`parse_patch` accepts exactly that grammar, with the leniencies Codex's own parser has: space
  around the marker lines is ignored, the first hunk of an update may omit its ``@@`` line, an empty
  line inside a hunk is an empty context line, and a patch wrapped in a shell here-document
  (``<<'EOF'`` ... ``EOF``) is unwrapped. Anything else is ``invalid_patch`` naming the line number
  and the rule. Paths are workspace-relative (:func:`peon.core.paths.parse_file_path`); one patch touches a
  path at most once.
* :func:`apply_hunks` applies an update's hunks in order, each searched from where the previous one
  ended: a hunk's ``@@ header`` line is found first (when given), then its context and removed lines
  (exactly; else ignoring trailing whitespace; else ignoring surrounding whitespace, as Codex does —
  the result says how many hunks needed that). ``*** End of File`` anchors a hunk at the end. A hunk
  whose lines are not found is ``not_found`` naming the file, the hunk and its first line. Line
  endings are kept: a file whose every line break is CRLF keeps CRLF; the result ends with a newline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath, display, parse_file_path
from peon.tools.shared.text_edit import line_ending_of

BEGIN, END = "*** Begin Patch", "*** End Patch"
ADD, DELETE, UPDATE, MOVE = "*** Add File: ", "*** Delete File: ", "*** Update File: ", "*** Move to: "
END_OF_FILE = "*** End of File"

Action = Literal["add", "delete", "update"]


@dataclass(frozen=True)
class Hunk:
    header: str | None  # the text after "@@ ", a line to find before the hunk's lines
    old: tuple[str, ...]  # context and removed lines, in order
    new: tuple[str, ...]  # context and added lines, in order
    end_of_file: bool
    line: int  # where it starts in the patch (1-based), for messages
    kinds: str = ""  # one of " -+" per hunk line, in order (how old and new interleave)


@dataclass(frozen=True)
class FileOp:
    action: Action
    path: WorkspacePath
    line: int
    move_to: WorkspacePath | None = None
    content: str = ""  # for add
    hunks: tuple[Hunk, ...] = field(default_factory=tuple)


def _invalid(line: int, message: str, rule: str) -> ToolError:
    return ToolError(ErrorCode.INVALID_PATCH, f"patch line {line}: {message}", {"line": line, "rule": rule})


def _unwrap_heredoc(lines: list[str]) -> list[str]:
    if len(lines) >= 4 and lines[0].strip() in ("<<EOF", "<<'EOF'", '<<"EOF"') and lines[-1].strip() == "EOF":
        return lines[1:-1]
    return lines


def _path(text: str, line: int) -> WorkspacePath:
    try:
        return parse_file_path(text.strip())
    except ToolError as exc:
        raise _invalid(line, exc.message, "path") from None


def parse_patch(text: str) -> list[FileOp]:
    lines = _unwrap_heredoc(text.strip().splitlines())
    if not lines or lines[0].strip() != BEGIN:
        raise _invalid(1, f"a patch starts with the line {BEGIN!r}", "begin")
    if len(lines) < 2 or lines[-1].strip() != END:
        raise _invalid(len(lines), f"a patch ends with the line {END!r}", "end")
    body = lines[1:-1]
    ops: list[FileOp] = []
    seen: dict[str, int] = {}
    i = 0
    while i < len(body):
        number = i + 2  # 1-based line of body[i] in the patch
        raw = body[i]
        marker = raw.strip()
        if marker.startswith(ADD.strip()) and raw.lstrip().startswith(ADD):
            path = _path(raw.lstrip()[len(ADD):], number)
            i += 1
            content = []
            while i < len(body) and body[i].startswith("+"):
                content.append(body[i][1:] + "\n")
                i += 1
            op = FileOp("add", path, number, content="".join(content))
        elif raw.lstrip().startswith(DELETE):
            op = FileOp("delete", _path(raw.lstrip()[len(DELETE):], number), number)
            i += 1
        elif raw.lstrip().startswith(UPDATE):
            path = _path(raw.lstrip()[len(UPDATE):], number)
            i += 1
            move_to = None
            if i < len(body) and body[i].lstrip().startswith(MOVE):
                move_to = _path(body[i].lstrip()[len(MOVE):], i + 2)
                i += 1
            hunks, i = _parse_hunks(body, i, path)
            if not hunks:
                raise _invalid(number, f"the update of {path.shown} has no hunk", "empty_update")
            op = FileOp("update", path, number, move_to=move_to, hunks=tuple(hunks))
        elif not marker:
            i += 1
            continue
        else:
            raise _invalid(number, f"expected '*** Add File: ', '*** Delete File: ' or '*** Update File: ', "
                           f"got {raw[:80]!r}", "operation")
        for touched in (op.path, op.move_to):
            if touched is None:
                continue
            if touched.normalized in seen:
                raise _invalid(number, f"{touched.shown} is already touched at line {seen[touched.normalized]}; a "
                               "patch changes a file at most once", "duplicate_path")
            seen[touched.normalized] = number
        ops.append(op)
    return ops


def _parse_hunks(body: list[str], i: int, path: WorkspacePath) -> tuple[list[Hunk], int]:
    hunks: list[Hunk] = []
    while i < len(body):
        raw = body[i]
        if raw.startswith("***") and raw.strip() != END_OF_FILE:
            break  # the next operation
        start = i + 2
        header: str | None = None
        if raw.strip() == "@@" or raw.startswith("@@ "):
            header = raw[3:].strip() or None if raw.startswith("@@ ") else None
            i += 1
        elif hunks:
            raise _invalid(start, f"in the update of {path.shown}, expected a hunk starting with '@@', got "
                           f"{raw[:80]!r}", "hunk")
        old: list[str] = []
        new: list[str] = []
        kinds: list[str] = []
        end_of_file = False
        changed = False
        while i < len(body):
            line = body[i]
            if line.strip() == END_OF_FILE:
                end_of_file = True
                i += 1
                break
            if line.startswith("@@") or line.startswith("***"):
                break
            kind, text = (line[0], line[1:]) if line else (" ", "")
            kinds.append(kind)
            if kind == " ":
                old.append(text)
                new.append(text)
            elif kind == "-":
                old.append(text)
                changed = True
            elif kind == "+":
                new.append(text)
                changed = True
            else:
                raise _invalid(i + 2, f"in the update of {path.shown}, a hunk line starts with ' ', '-' or '+', got "
                               f"{line[:80]!r}", "hunk_line")
            i += 1
        if not old and not new:
            raise _invalid(start, f"in the update of {path.shown}, the hunk has no lines", "empty_hunk")
        if not changed:
            raise _invalid(start, f"in the update of {path.shown}, the hunk changes nothing (no '-' or '+' line)",
                           "no_change")
        hunks.append(Hunk(header, tuple(old), tuple(new), end_of_file, start, "".join(kinds)))
    return hunks, i


# -- applying an update -----------------------------------------------------------------------------------


def _seek(lines: Sequence[str], pattern: Sequence[str], start: int, at_end: bool) -> tuple[int, int] | None:
    """(index, fuzz) of ``pattern`` in ``lines`` at or after ``start``; fuzz 0 exact, 1 trailing whitespace
    ignored, 2 surrounding whitespace ignored."""
    if not pattern:  # a hunk that only adds lines adds them at the end, as Codex does
        return len(lines), 0
    last = len(lines) - len(pattern)
    if last < start:
        return None
    candidates = [last] if at_end else range(start, last + 1)
    normalizations: tuple[Callable[[str], str], ...] = (str, str.rstrip, str.strip)
    for fuzz, norm in enumerate(normalizations):
        wanted = [norm(p) for p in pattern]
        for index in candidates:
            if all(norm(lines[index + k]) == wanted[k] for k in range(len(pattern))):
                return index, fuzz
    return None


@dataclass(frozen=True)
class Updated:
    text: str
    fuzzy_hunks: int  # hunks found only with whitespace ignored


def apply_hunks(text: str, hunks: Sequence[Hunk], path: str) -> Updated:
    """``text`` with ``hunks`` applied (see the module's promises); a hunk not found is ``not_found``, its
    message quoting ``path`` (the file's workspace-relative path) and its details naming it as it is."""
    shown = display(path)
    ending = line_ending_of(text)
    lines = (text.replace("\r\n", "\n") if ending == "crlf" else text).split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the text ends with a newline: no empty last line
    replacements: list[tuple[int, int, tuple[str, ...]]] = []
    cursor = fuzzy = 0
    for number, hunk in enumerate(hunks):
        if hunk.header is not None:
            found = _seek(lines, [hunk.header], cursor, False)
            if found is None:
                raise ToolError(ErrorCode.NOT_FOUND, f"{shown}: hunk {number} (patch line {hunk.line}): its '@@ "
                                f"{hunk.header}' line was not found after line {cursor}",
                                {"path": path, "hunk": number, "line": hunk.line, "rule": "header"})
            cursor = found[0] + 1
        old, kinds = list(hunk.old), hunk.kinds
        found = _seek(lines, old, cursor, hunk.end_of_file)
        if found is None and old and old[-1] == "" and kinds.endswith(" "):  # an empty last line the file lacks
            old, kinds = old[:-1], kinds[:-1]
            found = _seek(lines, old, cursor, hunk.end_of_file)
        if found is None:
            first = next((line for line in old if line.strip()), old[0] if old else "")
            raise ToolError(ErrorCode.NOT_FOUND, f"{shown}: hunk {number} (patch line {hunk.line}) does not match "
                            f"the file after line {cursor}: its lines starting {first[:80]!r} were not found",
                            {"path": path, "hunk": number, "line": hunk.line, "rule": "context"})
        index, fuzz = found
        fuzzy += fuzz > 0
        # Context lines keep the file's own text (they may differ in whitespace when fuzzy).
        new_lines: list[str] = []
        at, new_iter = index, iter(hunk.new)
        for kind in kinds:
            if kind == " ":
                new_lines.append(lines[at])
                at += 1
                next(new_iter)
            elif kind == "-":
                at += 1
            else:
                new_lines.append(next(new_iter))
        replacements.append((index, len(old), tuple(new_lines)))
        cursor = index + len(old)
    for index, length, replacement in reversed(replacements):
        lines[index:index + length] = replacement
    result = "\n".join(lines) + "\n" if lines else ""
    return Updated(result.replace("\n", "\r\n") if ending == "crlf" else result, fuzzy)
