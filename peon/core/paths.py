"""Workspace paths as text: the lexical rules. Pure: no I/O.

Promises:

* :func:`parse_workspace_path` accepts only a workspace-relative UTF-8 path and returns its normalized
  components, or raises :class:`~peon.core.errors.ToolError` (``invalid_path`` or ``outside_workspace``)
  with a sentence naming the rule and the value. ``.`` and empty components are dropped and ``..``
  removes the component before it *lexically*, before any symlink is looked at; a ``..`` that would
  climb above the root is refused. Nothing here decides containment on disk: the components are
  resolved beneath the workspace's directory descriptor by :mod:`peon.workers.fs`, which refuses symlinks
  that leave.
* :func:`normalize_workspace_path` is the one rule for the normal form of a workspace path (``a/b``,
  ``.`` for the root) wherever paths are compared, e.g. approval rules against the resolved path a
  call targets; it is :func:`parse_workspace_path` answering ``None`` instead of raising.
* :func:`printable` shows a name read from the file system (which may hold bytes that are not UTF-8)
  as valid text, so it can travel in JSON messages and error details.

The secret-like name heuristic lives in :mod:`peon.approval.secret_paths`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from peon.core.errors import ErrorCode, ToolError
from peon.core.text import shorten
from peon.core.text import lone_surrogate

PATH_MAX_BYTES = 4095  # PATH_MAX (4096) less the terminating NUL
NAME_MAX_BYTES = 255

# Temporary files of interrupted writes are recognised by this exact shape (and removed by later
# writes in the same directory), so it is reserved: `write` refuses to target such a name.
TEMP_PREFIX = ".peon-tmp-"
_TEMP_NAME = re.compile(r"\.peon-tmp-[0-9a-f]{16}\Z")


def printable(name: str) -> str:
    """``name`` as valid text: bytes that are not UTF-8 (held as surrogate escapes by ``os``) and lone
    surrogates become backslash escapes (``\\xff``, ``\\ud800``)."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def is_utf8_name(name: str) -> bool:
    """Whether a name read from the file system is valid UTF-8 (holds no surrogate escapes)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def display(text: str, limit: int = 200) -> str:
    """A value quoted for an error message, escaped and bounded."""
    shown = repr(text)
    return shorten(shown, limit, "...'")


@dataclass(frozen=True)
class WorkspacePath:
    text: str  # exactly as given
    parts: tuple[str, ...]  # normalized components, never '', '.' or '..'
    names_directory: bool  # ends with '/', '.' or '..': the caller means a directory

    @property
    def normalized(self) -> str:
        return "/".join(self.parts)

    @property
    def normal(self) -> str:
        """The normal form: :attr:`normalized`, or ``.`` for the root."""
        return self.normalized or "."

    @property
    def shown(self) -> str:
        return display(self.text)


def parse_workspace_path(text: object) -> WorkspacePath:
    if not isinstance(text, str):
        raise ToolError(ErrorCode.INVALID_PATH, f"path must be a string, got {type(text).__name__}")
    if text == "":
        raise ToolError(ErrorCode.INVALID_PATH, "path '' is empty; give a path relative to the workspace root",
                        {"rule": "empty"})
    shown = display(text)
    nul = text.find("\0")
    if nul >= 0:
        raise ToolError(ErrorCode.INVALID_PATH, f"path {shown} contains a NUL character at index {nul}",
                        {"rule": "nul", "index": nul})
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(
            ErrorCode.INVALID_PATH,
            f"path {shown} is not valid UTF-8: {lone_surrogate(text)}",
            {"rule": "utf8", "index": exc.start},
        ) from None
    if text.startswith("/"):
        raise ToolError(ErrorCode.INVALID_PATH,
                        f"path {shown} is absolute; paths are relative to the workspace root",
                        {"rule": "absolute"})
    if len(encoded) > PATH_MAX_BYTES:
        raise ToolError(ErrorCode.INVALID_PATH,
                        f"path {shown} is {len(encoded)} bytes long; the limit is {PATH_MAX_BYTES} bytes",
                        {"rule": "path_max", "bytes": len(encoded)})
    raw = text.split("/")
    parts: list[str] = []
    for component in raw:
        if component in ("", "."):
            continue
        if component == "..":
            if not parts:
                raise ToolError(ErrorCode.OUTSIDE_WORKSPACE,
                                f"path {shown} leaves the workspace ('..' above the root)",
                                {"rule": "dotdot"})
            parts.pop()
            continue
        size = len(component.encode("utf-8"))
        if size > NAME_MAX_BYTES:
            raise ToolError(
                ErrorCode.INVALID_PATH,
                f"path {shown} has a component of {size} bytes ({display(component, 60)}); "
                f"the limit is {NAME_MAX_BYTES} bytes",
                {"rule": "name_max", "bytes": size},
            )
        parts.append(component)
    return WorkspacePath(text, tuple(parts), raw[-1] in ("", ".", ".."))


def normalize_workspace_path(text: object) -> str | None:
    """The normal form of a workspace-relative path (``a/b``, ``.`` for the root), or ``None`` when
    :func:`parse_workspace_path` refuses it (empty, NUL, not UTF-8, absolute, too long, ``..`` above
    the root)."""
    try:
        return parse_workspace_path(text).normal
    except ToolError:
        return None


def parse_file_path(text: object) -> WorkspacePath:
    """A path that must name a file (``read`` and ``write``): not the root, no trailing ``/``."""
    path = parse_workspace_path(text)
    if not path.parts:
        raise ToolError(ErrorCode.INVALID_PATH,
                        f"path {path.shown} names the workspace root itself, not a file",
                        {"rule": "root"})
    if path.names_directory:
        raise ToolError(ErrorCode.INVALID_PATH,
                        f"path {path.shown} ends with '/', '.' or '..', so it names a directory, not a file",
                        {"rule": "directory"})
    return path


def is_temp_name(name: str) -> bool:
    return _TEMP_NAME.match(name) is not None
