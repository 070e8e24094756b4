"""Path globs as ``glob`` and ``grep`` match them.

Promise: :func:`compile_glob` turns a glob into a test of workspace-relative paths (``/``-separated, no
leading ``./``), or raises ``invalid_pattern`` naming the rule. Matching is wcmatch's ``globmatch`` (the
maintained implementation of shell globbing): ``*`` any run of characters within one component
(dotfiles included), ``?`` one character other than ``/``, ``[abc]`` / ``[a-z]`` / ``[!abc]`` a set,
``**`` as a whole component any number of components (zero or more), ``{a,b}`` alternatives, ``\\``
escapes the next character; case-sensitive. A pattern without ``/`` matches at any depth (``*.py`` is
``**/*.py``), as in ``.gitignore`` and ripgrep; one with a ``/`` is matched from the searched directory
(``src/*.py`` only directly inside ``src``). Absolute patterns and ``..`` components are refused.
"""

from __future__ import annotations

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


def basename_glob(pattern: str) -> bool:
    """Whether ``pattern`` matches on the file name alone (no ``/``): ripgrep can then filter by it."""
    return "/" not in pattern and "\\" not in pattern
