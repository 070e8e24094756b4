"""What a change record says, read from git's plain output (pure: no process, no file).

Promises:

* :func:`parse_diff` turns ``git diff-tree -r -z --raw --numstat`` output into a :class:`Changes` —
  every path added, modified, deleted, with a mode change (executable bit, file ↔ link), and the lines
  added and removed (a binary file counts none and is named binary); a deleted and an added path of
  the same content and mode are reported as one rename; hostile bytes in a path (not UTF-8, control
  characters) are kept as escapes, never taken for structure;
* :meth:`Changes.to_dict` is bounded: at most :data:`MAX_LISTED` paths are listed, the counts are always
  whole;
* :func:`exclusion_lines` turns ``checkpoints.exclude`` into gitignore lines: a plain name
  (``node_modules/``) at any depth, a pattern with a ``/`` inside as a glob of workspace paths; a
  pattern git would read as something else is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_LISTED = 200  # paths a change record lists; the counts cover them all
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree (SHA-1)
_LINK_MODE = "120000"
_EXEC_MODE = "100755"


@dataclass
class FileChange:
    path: str
    status: str  # added, modified, deleted, renamed, mode
    lines_added: int = 0
    lines_removed: int = 0
    binary: bool = False
    old_mode: str | None = None
    new_mode: str | None = None
    old_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"path": self.path, "status": self.status}
        if self.old_path is not None:
            entry["from"] = self.old_path
        if self.binary:
            entry["binary"] = True
        else:
            entry["lines_added"], entry["lines_removed"] = self.lines_added, self.lines_removed
        if self.old_mode != self.new_mode and self.old_mode and self.new_mode:
            entry["mode"] = f"{describe_mode(self.old_mode)} -> {describe_mode(self.new_mode)}"
        elif self.new_mode == _LINK_MODE or self.old_mode == _LINK_MODE:
            entry["kind"] = "symlink"
        return entry


@dataclass
class Changes:
    files: list[FileChange] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for change in self.files if change.status == status)

    @property
    def empty(self) -> bool:
        return not self.files

    def to_dict(self) -> dict[str, Any]:
        mode_changes = sum(1 for change in self.files if change.old_mode and change.new_mode
                           and change.old_mode != change.new_mode)
        return {"added": self.count("added"), "modified": self.count("modified"), "deleted": self.count("deleted"),
                "renamed": self.count("renamed"), "mode_changes": mode_changes,
                "lines_added": sum(change.lines_added for change in self.files),
                "lines_removed": sum(change.lines_removed for change in self.files),
                "files": [change.to_dict() for change in self.files[:MAX_LISTED]],
                "files_not_listed": max(0, len(self.files) - MAX_LISTED)}


def describe_mode(mode: str) -> str:
    return {"100644": "file", _EXEC_MODE: "executable", _LINK_MODE: "symlink", "160000": "repository"}.get(mode, mode)


def decode_path(raw: bytes) -> str:
    """A path as text: invalid UTF-8 and control characters escaped, so a name can never pass for structure."""
    text = raw.decode("utf-8", "backslashreplace")
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def parse_diff(output: bytes) -> Changes:
    """The :class:`Changes` in ``git diff-tree -r -z --raw --numstat --no-renames A B`` output."""
    fields = output.split(b"\0")
    raw: dict[str, FileChange] = {}
    blobs: dict[str, tuple[str, str]] = {}  # path -> (old blob, new blob)
    order: list[str] = []
    index = 0
    while index < len(fields):
        item = fields[index]
        if item.startswith(b":"):  # ":oldmode newmode oldsha newsha STATUS" then the path
            parts = item[1:].split(b" ")
            if len(parts) != 5 or index + 1 >= len(fields):
                break
            old_mode, new_mode, old_sha, new_sha, status = (part.decode("ascii", "replace") for part in parts)
            path = decode_path(fields[index + 1])
            kind = {"A": "added", "D": "deleted", "M": "modified", "T": "modified"}.get(status[:1], "modified")
            change = FileChange(path, kind, old_mode=None if kind == "added" else old_mode,
                                new_mode=None if kind == "deleted" else new_mode)
            if kind == "modified" and old_sha == new_sha:
                change.status = "mode"
            if _LINK_MODE in (old_mode, new_mode):
                change.binary = True  # a link's target is not lines of text
            raw[path] = change
            blobs[path] = (old_sha, new_sha)
            order.append(path)
            index += 2
            continue
        if item.count(b"\t") >= 2:  # "added\tremoved\tpath"
            added, removed, name = item.split(b"\t", 2)
            counted = raw.get(decode_path(name))
            if counted is not None:
                if added == b"-" or removed == b"-":
                    counted.binary = True
                elif not counted.binary and added.isdigit() and removed.isdigit():
                    counted.lines_added, counted.lines_removed = int(added), int(removed)
        index += 1
    return Changes(_pair_renames([raw[path] for path in order], blobs))


def _pair_renames(files: list[FileChange], blobs: dict[str, tuple[str, str]]) -> list[FileChange]:
    """A deleted and an added file of the same content and mode, reported as one rename."""
    deleted: dict[tuple[str, str | None], list[FileChange]] = {}
    for change in files:
        if change.status == "deleted":
            deleted.setdefault((blobs[change.path][0], change.old_mode), []).append(change)
    paired: set[int] = set()
    result: list[FileChange] = []
    for change in files:
        if change.status == "added":
            candidates = deleted.get((blobs[change.path][1], change.new_mode))
            if candidates:
                source = candidates.pop(0)
                paired.add(id(source))
                result.append(FileChange(change.path, "renamed", binary=change.binary, old_mode=change.new_mode,
                                         new_mode=change.new_mode, old_path=source.path))
                continue
        result.append(change)
    return [change for change in result if id(change) not in paired]


def exclusion_lines(patterns: tuple[str, ...] | list[str]) -> bytes:
    """``checkpoints.exclude`` as the lines of a gitignore-syntax file: ``name/`` (or ``name``) at any
    depth, a pattern with a ``/`` inside anchored at the workspace's root; a line that could mean
    something else to git (a comment, a negation, a line break) is refused."""
    lines = []
    for pattern in patterns:
        if not pattern.strip("/") or any(ch in pattern for ch in "\n\r\0\\") or pattern.lstrip("/")[0] in "#!":
            raise ValueError(f"checkpoints.exclude: {pattern!r} is not a directory name or a glob of workspace paths")
        stripped = pattern.strip("/")
        lines.append(("/" + stripped if "/" in stripped else stripped) + ("/" if pattern.endswith("/") else ""))
    return "".join(line + "\n" for line in lines).encode()


def excluded_names(patterns: tuple[str, ...] | list[str]) -> list[str]:
    """The plain directory names among ``patterns`` (counted, not stored, wherever they are)."""
    return [pattern.strip("/") for pattern in patterns if pattern.strip("/") and "/" not in pattern.strip("/")]
