"""Workspace paths as text: the lexical rules, and the secret-like name heuristic. Pure: no I/O.

Promises:

* :func:`parse_workspace_path` accepts only a workspace-relative UTF-8 path and returns its normalized
  components, or raises :class:`~peon.errors.ToolError` (``invalid_path`` or ``outside_workspace``)
  with a sentence naming the rule and the value. ``.`` and empty components are dropped and ``..``
  removes the component before it *lexically*, before any symlink is looked at; a ``..`` that would
  climb above the root is refused. Nothing here decides containment on disk: the components are
  resolved beneath the workspace's directory descriptor by :mod:`workers.fs`, which refuses symlinks
  that leave.
* :func:`parse_secret_patterns` turns the text of a ``secret_paths.txt`` file into patterns or raises
  :class:`~peon.errors.ConfigError` naming the file and line; :func:`classify_secret` says which
  pattern, if any, makes a path secret-like. Matching is case-insensitive, per component, and backup
  copies (``.bak``, ``.old``, ``~``) match what their base name matches. This heuristic gives
  visibility (such reads need approval); it is not a confidentiality boundary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Iterable, Sequence

from .errors import ConfigError, ErrorCode, ToolError

PATH_MAX_BYTES = 4095  # PATH_MAX (4096) less the terminating NUL
NAME_MAX_BYTES = 255
BACKUP_SUFFIXES = (".bak", ".old", "~")

# Temporary files of interrupted writes are recognised by this exact shape (and removed by later
# writes in the same directory), so it is reserved: `write` refuses to target such a name.
TEMP_PREFIX = ".peon-tmp-"
_TEMP_NAME = re.compile(r"\.peon-tmp-[0-9a-f]{16}\Z")


def display(text: str, limit: int = 200) -> str:
    """A value quoted for an error message, escaped and bounded."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


@dataclass(frozen=True)
class WorkspacePath:
    text: str  # exactly as given
    parts: tuple[str, ...]  # normalized components, never '', '.' or '..'
    names_directory: bool  # ends with '/', '.' or '..': the caller means a directory

    @property
    def normalized(self) -> str:
        return "/".join(self.parts)

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
        bad = text[exc.start]
        raise ToolError(
            ErrorCode.INVALID_PATH,
            f"path {shown} is not valid UTF-8: lone surrogate U+{ord(bad):04X} at index {exc.start}",
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


# -- the secret-like path heuristic --------------------------------------------------------------------


@dataclass(frozen=True)
class SecretPattern:
    text: str  # the line as written
    source: str  # "file:line"
    globs: tuple[str, ...]  # lower-cased, one per component
    directory: bool  # trailing '/': the last component must be a directory on the way
    exception: bool  # '!' line


@dataclass(frozen=True)
class SecretMatch:
    pattern: SecretPattern
    component: str  # the path component (as given) that matched, or the run of components

    def reason(self) -> str:
        return (f"secret-like path: {self.component!r} matches {self.pattern.text!r} "
                f"({self.pattern.source})")


def parse_secret_patterns(text: str, source: str) -> tuple[SecretPattern, ...]:
    patterns = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{number}"
        exception = line.startswith("!")
        body = line[1:] if exception else line
        directory = body.endswith("/")
        body = body.rstrip("/") if directory else body
        if body.startswith("/"):
            raise ConfigError(f"{where}: pattern {line!r} is absolute; patterns match path components, "
                              "anywhere in a workspace-relative path", {"file": source, "line": number})
        globs = tuple(body.lower().split("/"))
        if any(g in ("", ".", "..") for g in globs):
            raise ConfigError(f"{where}: pattern {line!r} has an empty, '.' or '..' component",
                              {"file": source, "line": number})
        if exception and len(globs) > 1:
            raise ConfigError(f"{where}: exception {line!r} must be a single component (no '/' inside)",
                              {"file": source, "line": number})
        patterns.append(SecretPattern(line, where, globs, directory, exception))
    return tuple(patterns)


def backup_variants(component: str) -> list[str]:
    """The component and its names with backup suffixes removed, lower-cased."""
    name = component.lower()
    variants = [name]
    while True:
        for suffix in BACKUP_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                variants.append(name)
                break
        else:
            return variants


def _decide(variant: str, final: bool, singles: Sequence[SecretPattern]) -> SecretPattern | None:
    """Last matching single-component line decides (gitignore order)."""
    decided = None
    for pattern in singles:
        if pattern.directory and final:
            continue
        if fnmatchcase(variant, pattern.globs[0]):
            decided = pattern
    return None if decided is None or decided.exception else decided


def _run_matches(variants: Sequence[list[str]], start: int, pattern: SecretPattern) -> bool:
    end = start + len(pattern.globs)
    if end > len(variants) or (pattern.directory and end >= len(variants)):
        return False
    return all(any(fnmatchcase(v, g) for v in variants[start + i]) for i, g in enumerate(pattern.globs))


def classify_secret(parts: Sequence[str], patterns: Iterable[SecretPattern]) -> SecretMatch | None:
    """The first (outermost) component or run of components that makes ``parts`` secret-like."""
    patterns = tuple(patterns)
    singles = [p for p in patterns if len(p.globs) == 1]
    runs = [p for p in patterns if len(p.globs) > 1]
    variants = [backup_variants(c) for c in parts]
    last = len(parts) - 1
    for index, component in enumerate(parts):
        for variant in variants[index]:
            found = _decide(variant, index == last, singles)
            if found is not None:
                return SecretMatch(found, component)
        for pattern in runs:
            if _run_matches(variants, index, pattern):
                return SecretMatch(pattern, "/".join(parts[index: index + len(pattern.globs)]))
    return None
