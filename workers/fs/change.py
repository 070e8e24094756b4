"""Several workspace files installed as one change (``apply_patch``): all of them, or none.

Promise: :func:`apply_changes` writes every new content to a temporary file and fsyncs it, and checks
every precondition (the approved objects, the expected hashes, no clobber for new files), before the
first destination changes; then the files are installed in order, each crash-atomically
(:mod:`peon.workers.fs.write`), the replaced and deleted ones kept as locked temporary links until the
end. When an install fails, those already done are undone (replaced and deleted files put back, new
files removed, the directories made for them removed) and the error is raised: all or nothing, except
across a crash, after which each file holds its old or its new content. A new file whose approval lists
directories to make has them made while it is staged (:mod:`peon.workers.fs.parents`).
"""

from __future__ import annotations

import hashlib
import os
from contextlib import suppress
from dataclasses import dataclass

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath

from peon.workers.fs.errors import os_errors
from peon.workers.fs.identity import Expected, check_expected
from peon.workers.fs.parents import Parents
from peon.workers.fs.resolver import Resolver
from peon.workers.fs.temps import create_temp, remove_stale_temps, temp_name, try_lock
from peon.workers.fs.write import fill_temp, install_new, installable_target, observed_sha256, open_destination


@dataclass(frozen=True)
class Change:
    """One file of a multi-file change: ``data`` None deletes it; ``create`` installs a new file (no clobber)."""

    path: WorkspacePath
    data: bytes | None
    create: bool
    expected: Expected | None  # the approved directory, name and file (None for no check)
    expected_sha256: str | None  # an existing file's content must still be this


@dataclass
class _Staged:
    """One change on its way: its directory, its new content aside, the old file kept while undoable."""

    change: Change
    dirfd: int
    name: str
    temp: str | None = None  # the new content, not installed yet
    temp_fd: int = -1
    backup: str | None = None  # the old file, linked aside while the change is undoable
    backup_fd: int = -1
    done: bool = False
    parents: Parents | None = None  # the directories made for a new file (they hold ``dirfd``)


def _backup_link(staged: _Staged, *, move: bool) -> None:
    """Keep the current file under a locked temporary name (moved there when ``move``, else linked)."""
    fd = os.open(staged.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=staged.dirfd)
    try:
        try_lock(fd)  # a concurrent write's cleaner leaves a locked temporary file alone
        for _ in range(100):
            name = temp_name()
            try:
                os.link(staged.name, name, src_dir_fd=staged.dirfd, dst_dir_fd=staged.dirfd, follow_symlinks=False)
                if move:
                    os.unlink(staged.name, dir_fd=staged.dirfd)
            except FileExistsError:
                continue
            staged.backup, staged.backup_fd = name, fd
            return
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    raise ToolError(ErrorCode.IO_ERROR, f"path {staged.change.path.shown}: no free temporary name to keep it aside")


def _prepare(root: int, change: Change, resolver: Resolver) -> _Staged:
    path = change.path
    dirfd, name, parents = open_destination(root, path, resolver, change.create, change.expected)
    staged = _Staged(change, dirfd, name, parents=parents)
    try:
        existing = installable_target(dirfd, name, path, change.create)
        if change.expected is not None:
            check_expected(path, change.expected, os.fstat(dirfd), name, existing)
        if change.expected_sha256 is not None:
            actual = observed_sha256(dirfd, name, path)
            if actual != change.expected_sha256:
                raise ToolError(ErrorCode.STALE, f"path {path.shown} has sha256 {actual}, not the expected "
                                f"{change.expected_sha256}; it changed while the patch was prepared",
                                {"path": path.normalized, "expected_sha256": change.expected_sha256,
                                 "actual_sha256": actual})
        if change.data is not None:
            remove_stale_temps(dirfd)
            staged.temp_fd, staged.temp = create_temp(dirfd, 0o666 if change.create else 0o600)
            fill_temp(staged.temp_fd, change.data, existing)
        return staged
    except BaseException:
        _discard(staged, undo_directories=True)
        raise


def _install(staged: _Staged, resolver_use_link: bool) -> None:
    change, dirfd = staged.change, staged.dirfd
    if change.create:
        assert staged.temp is not None
        install_new(dirfd, staged.temp, staged.name, change.path, resolver_use_link)
    elif change.data is None:
        _backup_link(staged, move=True)
    else:
        assert staged.temp is not None
        _backup_link(staged, move=False)
        os.rename(staged.temp, staged.name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    staged.temp = None
    staged.done = True


def _undo(staged: _Staged) -> None:
    """Put back what :func:`_install` changed (best effort: this runs while an error is being raised)."""
    change, dirfd = staged.change, staged.dirfd
    with suppress(OSError):
        if change.create:
            os.unlink(staged.name, dir_fd=dirfd)
        elif staged.backup is not None:
            os.rename(staged.backup, staged.name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
            staged.backup = None
        os.fsync(dirfd)


def _discard(staged: _Staged, *, undo_directories: bool = False) -> None:
    """Remove what is left aside (and, when the change is given up, the directories made for it) and close
    every descriptor."""
    for name in (staged.temp, staged.backup):
        if name is not None:
            with suppress(OSError):
                os.unlink(name, dir_fd=staged.dirfd)
    for fd in (staged.temp_fd, staged.backup_fd):
        if fd >= 0:
            os.close(fd)
    staged.temp = staged.backup = None
    staged.temp_fd = staged.backup_fd = -1
    if staged.parents is None:
        os.close(staged.dirfd)
        return
    if undo_directories:
        staged.parents.undo()
    staged.parents.close()


def made_directories(staged: list[_Staged]) -> list[str]:
    """The directories made for the staged changes, each once, in the order they were made."""
    made = [path for item in staged if item.parents is not None for path in item.parents.made()]
    return list(dict.fromkeys(made))


def apply_changes(root: int, changes: list[Change], resolver: Resolver, *, use_link: bool = False,
                  made: list[str] | None = None) -> list[str | None]:
    """Install ``changes`` all or nothing (see the module's promises); the SHA-256 of each new content
    (None for a deletion), in order. ``made``, when given, receives the directories made for new files."""
    staged: list[_Staged] = []
    installed = False
    try:
        for change in changes:
            with os_errors(change.path):
                staged.append(_prepare(root, change, resolver))
        try:
            for item in staged:
                with os_errors(item.change.path):
                    _install(item, use_link)
        except BaseException:
            for item in reversed(staged):
                if item.done:
                    _undo(item)
            raise
        for item in staged:
            with suppress(OSError):
                os.fsync(item.dirfd)
        installed = True
        if made is not None:
            made.extend(made_directories(staged))
    finally:
        for item in reversed(staged):  # the innermost changes first: a directory is removed once empty
            _discard(item, undo_directories=not installed)
    return [None if c.data is None else hashlib.sha256(c.data).hexdigest() for c in changes]
