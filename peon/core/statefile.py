"""Opening configuration and state files without blocking, and only when they are regular files.

Promises:

* nothing here opens a FIFO, socket, device or directory for reading or writing: a path is first
  opened with ``O_PATH`` (which never blocks and never runs a driver's ``open``), checked with
  ``fstat`` on that descriptor, and only a regular file is then reopened for reading or appending
  through ``/proc/self/fd`` — the same inode, so nothing can be swapped in between;
* a symbolic link as the last component is followed only when the caller allows it (a user's
  configuration file may be a link into a dotfiles checkout; the files Peon writes in a session's
  state directory never are, so a link there is refused rather than written through);
* a file larger than the caller's bound is refused before a byte is read, and reads stop at the bound;
* every refusal is a :class:`RefusedFile` whose message names the path and the rule; a missing file
  is ``FileNotFoundError``; other operating-system failures stay ``OSError``.

Descriptors are close-on-exec, so none of them can reach a command.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link"),
)


class RefusedFile(Exception):
    """The path exists but is not something Peon reads or writes (its message says why)."""

    def __init__(self, path: str | os.PathLike[str], why: str):
        super().__init__(f"{os.fspath(path)} {why}")
        self.path = os.fspath(path)
        self.why = why


def kind_of(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _pin(path: str | os.PathLike[str], follow_symlinks: bool) -> tuple[int, os.stat_result]:
    """An ``O_PATH`` descriptor of the regular file at ``path`` and its status."""
    flags = os.O_PATH | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile(path, f"is {kind_of(info.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _reopen(pinned: int, flags: int) -> int:
    return os.open(f"/proc/self/fd/{pinned}", flags | os.O_CLOEXEC | os.O_NOCTTY)


def read_regular_file(path: str | os.PathLike[str], *, max_bytes: int, follow_symlinks: bool) -> bytes:
    """The whole content of a regular file of at most ``max_bytes`` bytes."""
    pinned, info = _pin(path, follow_symlinks)
    try:
        if info.st_size > max_bytes:
            raise RefusedFile(path, f"is {info.st_size} bytes; the limit is {max_bytes}")
        fd = _reopen(pinned, os.O_RDONLY)
    finally:
        os.close(pinned)
    try:
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # it grew after fstat
                raise RefusedFile(path, f"grew past the limit of {max_bytes} bytes while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_for_append(path: str | os.PathLike[str], mode: int = 0o600) -> int:
    """A write-only, appending descriptor of the regular file at ``path``, created (``mode``) when
    missing. A symbolic link at ``path`` is refused, never followed."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except FileExistsError:
        pass
    pinned, _ = _pin(path, follow_symlinks=False)
    try:
        return _reopen(pinned, os.O_WRONLY | os.O_APPEND)
    finally:
        os.close(pinned)


def regular_size(path: str | os.PathLike[str]) -> int | None:
    """The size of the regular file at ``path`` (links not followed), ``None`` when nothing is there;
    anything else there is refused."""
    info = regular_status(path)
    return None if info is None else info.st_size


def regular_status(path: str | os.PathLike[str]) -> os.stat_result | None:
    """The status of the regular file at ``path`` (links not followed), ``None`` when nothing is there;
    anything else there is refused."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise RefusedFile(Path(path), f"is {kind_of(info.st_mode)}, not a regular file")
    return info


# A bracket outside a string, or a whole string (skipped, so brackets inside it do not count). Possessive, and an
# unterminated string runs to the end: every match succeeds where it starts, so the scan is linear.
_JSON_NESTING = re.compile(rb'"(?:[^"\\]++|\\[\s\S]?)*+(?:"|\Z)|[\[\]{}]')


def check_json_depth(data: bytes, max_depth: int) -> None:
    """Raise ``ValueError`` when ``data`` (JSON text) nests arrays and objects deeper than ``max_depth``.

    Checked before parsing, in one linear pass, so a hostile state file is refused with the same sentence on
    every interpreter (how deep :func:`json.loads` may recurse differs between Python versions)."""
    depth = 0
    for match in _JSON_NESTING.finditer(data):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                raise ValueError(f"JSON nested too deeply (more than {max_depth} levels)")
        elif token in (b"]", b"}"):
            depth -= 1
