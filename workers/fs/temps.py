"""Peon's temporary files in a workspace directory: made under a lock held while their writer lives.

Promise: a temporary file is named ``.peon-tmp-<16 hex>`` (:data:`peon.core.paths.TEMP_PREFIX`),
created ``O_EXCL`` through the directory's descriptor and held under an exclusive ``flock`` while its
writer lives; :func:`remove_stale_temps` removes only the ones nobody holds (their writer died), and
only the very file it locked, never one that replaced it in between.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import TEMP_PREFIX, is_temp_name


def try_lock(fd: int) -> bool:
    """Take the exclusive lock of ``fd`` without waiting; False when another holder has it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _same_file(dirfd: int, name: str, st: os.stat_result) -> bool:
    try:
        now = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def remove_stale_temps(dirfd: int) -> list[str]:
    """Remove the temporary files in ``dirfd`` whose writer is gone (nobody holds their lock)."""
    removed = []
    with os.scandir(dirfd) as entries:
        names = [e.name for e in entries if is_temp_name(e.name)]
    for name in names:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
        except OSError:
            continue  # gone already, a symlink, or not ours to read
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and try_lock(fd) and _same_file(dirfd, name, st):
                os.unlink(name, dir_fd=dirfd)
                removed.append(name)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
    return removed


def temp_name() -> str:
    """A fresh name for a temporary file: :data:`~peon.core.paths.TEMP_PREFIX` and 16 random hex digits."""
    return TEMP_PREFIX + secrets.token_hex(8)


def create_temp(dirfd: int, mode: int) -> tuple[int, str]:
    """A new temporary file in ``dirfd``, open for writing and locked by this writer: (descriptor, name)."""
    for _ in range(100):
        name = temp_name()
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=dirfd)
        except FileExistsError:
            continue
        # A cleaner may have taken the unlocked file for stale and removed it before we locked it.
        if try_lock(fd) and _same_file(dirfd, name, os.fstat(fd)):
            return fd, name
        os.close(fd)
    raise ToolError(ErrorCode.IO_ERROR, "could not create a temporary file in the destination directory")

