"""Path globs as ``glob`` and ``grep`` match them (pure).

Promise: :func:`compile_glob` turns a glob into a regular expression over workspace-relative paths
(``/``-separated, no leading ``./``), anchored at both ends, or raises ``invalid_pattern`` naming the
rule. Syntax: ``*`` any run of characters within one component, ``?`` one character other than ``/``,
``[abc]`` / ``[a-z]`` / ``[!abc]`` a set, ``**`` as a whole component any number of components (zero
or more), ``{a,b}`` alternatives (nestable), ``\\`` escapes the next character. A pattern without ``/``
matches at any depth (``*.py`` is ``**/*.py``), as in ``.gitignore`` and ripgrep; one with a ``/`` is
matched from the searched directory (``src/*.py`` only directly inside ``src``). Absolute patterns and
``..`` components are refused.
"""

from __future__ import annotations

import re

from .errors import ErrorCode, ToolError

MAX_GLOB_CHARS = 1000


def _invalid(pattern: str, why: str) -> ToolError:
    return ToolError(ErrorCode.INVALID_PATTERN, f"glob {pattern!r}: {why}", {"pattern": pattern, "rule": why})


def _translate(pattern: str, i: int, stop: str, whole: str) -> tuple[str, int]:
    """Regex for ``pattern[i:]`` up to an unmatched character of ``stop``; (regex, index reached)."""
    out: list[str] = []
    while i < len(pattern):
        c = pattern[i]
        if c in stop:
            return "".join(out), i
        if c == "\\":
            if i + 1 >= len(pattern):
                raise _invalid(whole, "ends with a lone backslash")
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "*":
            if pattern.startswith("**", i):
                at_start = i == 0 or pattern[i - 1] == "/"
                after = i + 2
                if not at_start or (after < len(pattern) and pattern[after] not in "/,}"):
                    raise _invalid(whole, "'**' must be a whole path component")
                if after < len(pattern) and pattern[after] == "/":
                    out.append("(?:[^/]*/)*")  # zero or more whole components
                    i = after + 1
                else:
                    out.append(".*")
                    i = after
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = i + 1
            if end < len(pattern) and pattern[end] in "!^":
                end += 1
            if end < len(pattern) and pattern[end] == "]":
                end += 1
            while end < len(pattern) and pattern[end] != "]":
                end += 1
            if end >= len(pattern):
                raise _invalid(whole, "has an unclosed '['")
            body = pattern[i + 1:end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            escaped = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
            out.append(f"[^/{escaped}]" if negate else f"(?!/)[{escaped}]")
            i = end + 1
            continue
        elif c == "{":
            alternatives = []
            i += 1
            while True:
                part, i = _translate(pattern, i, ",}", whole)
                alternatives.append(part)
                if i >= len(pattern):
                    raise _invalid(whole, "has an unclosed '{'")
                if pattern[i] == "}":
                    i += 1
                    break
                i += 1  # ','
            out.append("(?:" + "|".join(alternatives) + ")")
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out), i


def compile_glob(pattern: str) -> re.Pattern[str]:
    if not pattern or len(pattern) > MAX_GLOB_CHARS:
        raise _invalid(pattern[:80], f"must have 1 to {MAX_GLOB_CHARS} characters")
    if pattern.startswith("/"):
        raise _invalid(pattern, "is absolute; globs are relative to the searched directory")
    if "\0" in pattern:
        raise _invalid(pattern, "contains a NUL character")
    body = pattern[2:] if pattern.startswith("./") else pattern
    if ".." in body.split("/"):
        raise _invalid(pattern, "has a '..' component; globs match beneath the searched directory")
    if "/" not in body.rstrip("/"):
        body = "**/" + body
    regex, _ = _translate(body.rstrip("/"), 0, "", pattern)
    try:
        return re.compile(regex + r"\Z", re.DOTALL)
    except re.error as exc:
        raise _invalid(pattern, f"is not a valid glob ({exc.msg})") from None


def basename_glob(pattern: str) -> bool:
    """Whether ``pattern`` matches on the file name alone (no ``/``): ripgrep can then filter by it."""
    return "/" not in pattern and "\\" not in pattern
