"""Path globs as ``glob`` and ``grep`` match them.

Promise: :func:`compile_glob` turns a glob into a test of workspace-relative paths (``/``-separated, no
leading ``./``), or raises ``invalid_pattern`` naming the rule. Matching is wcmatch's ``globmatch`` (the
maintained implementation of shell globbing): ``*`` any run of characters within one component
(dotfiles included), ``?`` one character other than ``/``, ``[abc]`` / ``[a-z]`` / ``[!abc]`` a set,
``**`` as a whole component any number of components (zero or more), ``{a,b}`` alternatives, ``\\``
escapes the next character; case-sensitive. A pattern without ``/`` matches at any depth (``*.py`` is
``**/*.py``), as in ``.gitignore`` and ripgrep; one with a ``/`` is matched from the searched directory
(``src/*.py`` only directly inside ``src``). Absolute patterns and ``..`` components are refused.

This is Peon's one glob engine for the file tools: whatever ripgrep is given, the paths a call returns are
the ones :func:`compile_glob` matches. :func:`ripgrep_agrees` names the globs on which ripgrep's own engine
matches the same file names, so that ripgrep may skip the others unread; on any other glob (``?`` is a byte
to ripgrep and a character here, ``{a}`` an alternative to ripgrep and literal here, classes differ)
ripgrep filters nothing and this module decides alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from peon.core.errors import ErrorCode, ToolError

MAX_GLOB_CHARS = 1000


def _invalid(pattern: str, why: str) -> ToolError:
    return ToolError(ErrorCode.INVALID_PATTERN, f"glob {pattern!r}: {why}", {"pattern": pattern, "rule": why})


def compile_glob(pattern: str) -> Callable[[str], bool]:
    if not pattern or len(pattern) > MAX_GLOB_CHARS:
        raise _invalid(pattern[:80], f"must have 1 to {MAX_GLOB_CHARS} characters")
    if pattern.startswith("/"):
        raise _invalid(pattern, "is absolute; globs are relative to the searched directory")
    if "\0" in pattern:
        raise _invalid(pattern, "contains a NUL character")
    body = pattern[2:] if pattern.startswith("./") else pattern
    if ".." in body.split("/"):
        raise _invalid(pattern, "has a '..' component; globs match beneath the searched directory")
    body = body.rstrip("/") or body
    if "/" not in body:
        body = "**/" + body
    from wcmatch import glob as wcglob  # here: the session's start does not wait for it (glob's warm_up loads it)

    try:
        matcher = wcglob.compile([body], flags=wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB)
    except Exception as exc:  # wcmatch and bracex refuse some patterns (e.g. too many brace expansions)
        raise _invalid(pattern, f"is not a valid glob ({exc})") from None
    return matcher.match


_LITERAL = r"[^*?\[\]{}\\!,/]"  # a character both engines take as itself
_AGREED = re.compile(rf"(?:{_LITERAL}|\*(?!\*))*")  # literal characters and single stars
_ALTERNATIVES = re.compile(r"(?P<head>[^{}]*)\{(?P<inside>[^{}]*)\}(?P<tail>[^{}]*)")


def ripgrep_agrees(pattern: str) -> bool:
    """Whether ripgrep's glob engine matches file names exactly as :func:`compile_glob` does for ``pattern``:
    a name glob (no ``/``) of literal characters and ``*`` (never ``**``), with at most one ``{a,b}`` group
    of such alternatives (at least two, none empty, no ``..``, no nesting)."""
    if _AGREED.fullmatch(pattern):
        return True
    group = _ALTERNATIVES.fullmatch(pattern)
    if group is None or "**" in pattern:
        return False
    alternatives = group["inside"].split(",")
    return (len(alternatives) > 1 and all(a and ".." not in a and _AGREED.fullmatch(a) for a in alternatives)
            and bool(_AGREED.fullmatch(group["head"])) and bool(_AGREED.fullmatch(group["tail"])))
