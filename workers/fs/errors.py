"""What a failed file-system operation on a workspace path becomes: a :class:`ToolError` with a stable code.

Promise: :func:`os_error` maps the errno met at one component of a path to a stable code and a sentence
that names that component (``not_found``, ``not_a_directory``, ``invalid_path``, ``outside_workspace``,
else ``io_error``), with the errno's name in the details; every name it shows is printable (an
undecodable one is escaped). :func:`os_errors` gives the same to any ``OSError`` not mapped closer to
its cause, so nothing in :mod:`peon.workers.fs` raises a bare ``OSError`` at its caller.
:func:`file_kind` names what a ``stat`` mode is, as every message of the package says it.
"""

from __future__ import annotations

import errno
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath, printable

MAX_SYMLINK_HOPS = 40  # the kernel's MAXSYMLINKS


def os_error(exc: OSError, path: WorkspacePath, where: str, *, creating: bool = False) -> ToolError:
    """Map an errno met at component ``where`` of ``path`` to a stable code and a sentence."""
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    details = {"errno": name, "at": printable(where)}
    shown = path.shown
    if exc.errno == errno.ENOENT:
        if where == path.normalized:
            return ToolError(ErrorCode.NOT_FOUND, f"path {shown} does not exist", details)
        tail = " (this call does not create directories)" if creating else ""
        return ToolError(ErrorCode.NOT_FOUND, f"path {shown} does not exist: there is no {where!r}{tail}", details)
    if exc.errno == errno.ENOTDIR:
        return ToolError(ErrorCode.NOT_A_DIRECTORY, f"path {shown}: {where!r} is not a directory", details)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ToolError(ErrorCode.IO_ERROR, f"path {shown}: permission denied at {where!r}", details)
    if exc.errno == errno.ENAMETOOLONG:
        return ToolError(ErrorCode.INVALID_PATH, f"path {shown}: name too long at {where!r}", details)
    if exc.errno == errno.ELOOP:
        return ToolError(ErrorCode.IO_ERROR, f"path {shown} cannot be resolved: more than {MAX_SYMLINK_HOPS} "
                         f"symbolic links followed at {where!r} (a symlink loop?)", details)
    if exc.errno == errno.EXDEV:
        return ToolError(ErrorCode.OUTSIDE_WORKSPACE, f"path {shown} leaves the workspace", details)
    return ToolError(ErrorCode.IO_ERROR, f"path {shown}: {exc.strerror} at {where!r}", details)


@contextmanager
def os_errors(path: WorkspacePath) -> Iterator[None]:
    """Any OSError not mapped closer to its cause still becomes a ToolError with a stable code."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, path, path.normalized) from None


def file_kind(mode: int) -> str:
    """What a ``stat`` mode says the file is, in the words of Peon's messages."""
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISREG, "regular file")):
        if test(mode):
            return name
    return "special file"
