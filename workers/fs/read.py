"""Reading a workspace file: a range of it, and its SHA-256, from one open descriptor.

Promises:

* :func:`read_window` opens through the resolvers (:mod:`peon.workers.fs.resolver`) with
  ``O_NONBLOCK`` and refuses, before reading a byte, anything that ``fstat`` does not call a regular
  file (a FIFO, device, socket or directory never blocks or streams). A file of at most
  ``hash_max_bytes`` is read once, whole, in chunks of at most :data:`HASH_CHUNK` bytes through one
  buffer, and the range and the file's SHA-256 come from those same reads; a larger file is read only
  in the requested range, with ``pread``.
* Given an expected :class:`~peon.workers.fs.identity.FileId`, the file opened must be that one, else
  ``changed_since_approval`` before a byte is read.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath

from peon.workers.fs.errors import file_kind, os_errors
from peon.workers.fs.identity import FileId, changed_since_approval
from peon.workers.fs.resolver import Resolver, open_beneath

HASH_CHUNK = 1 << 20  # the most bytes one read of a file being hashed asks for


@dataclass(frozen=True)
class Window:
    """Bytes [start, start + len(data)) of a regular file of ``total`` bytes (``total`` from ``fstat`` at open)."""

    data: bytes
    start: int
    total: int
    sha256: str | None = None  # of the whole file, read in the same pass as ``data``; None: not hashed


def pread_exact(fd: int, length: int, offset: int) -> bytes:
    """Up to ``length`` bytes at ``offset``; fewer only at end of file."""
    chunks, got = [], 0
    while got < length:
        chunk = os.pread(fd, length - got, offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_hashing(fd: int, total: int, start: int, end: int, hash_max_bytes: int) -> tuple[bytes, str] | None:
    """One pass over the whole file through one reused buffer of at most :data:`HASH_CHUNK` bytes: the
    bytes [start, end) and the SHA-256 of everything up to end of file, from the same reads. None if the
    file grew past ``hash_max_bytes``."""
    digest, kept, offset = hashlib.sha256(), [], 0
    buffer = bytearray(min(HASH_CHUNK, total + 1))  # +1: end of file is seen without another allocation
    view = memoryview(buffer)
    while size := os.preadv(fd, [buffer], offset):
        if offset + size > hash_max_bytes:
            return None
        chunk = view[:size]
        digest.update(chunk)
        if offset < end and offset + size > start:
            kept.append(bytes(chunk[max(0, start - offset): end - offset]))
        offset += size
    return b"".join(kept), digest.hexdigest()


def read_target_error(path: WorkspacePath, kind: str | None) -> ToolError | None:
    """Why ``read`` cannot read what is at the path (``kind`` None: nothing there), or None."""
    if kind is None:
        return ToolError(ErrorCode.NOT_FOUND, f"path {path.shown} does not exist")
    if kind != "regular file":
        return ToolError(ErrorCode.NOT_A_REGULAR_FILE, f"path {path.shown} is a {kind}; read only reads regular files",
                         {"kind": kind})
    return None


def read_window(root: int, path: WorkspacePath, resolver: Resolver, select: Callable[[int], tuple[int, int]], *,
                expected: FileId | None = None, hash_max_bytes: int = -1) -> Window:
    """Open ``path`` for reading and read the range ``select(total_bytes)`` returns as (start, end).

    A file of at most ``hash_max_bytes`` is read whole, once, in bounded chunks through the same
    descriptor: the range is taken from those reads and :attr:`Window.sha256` describes them. A larger
    file is read only in the range (``pread``), and not hashed. With ``expected``, the opened file must
    be that file (device and inode), else ``changed_since_approval`` before a byte is read.
    """
    with os_errors(path):
        fd = open_beneath(root, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, resolver)
        try:
            st = os.fstat(fd)
            problem = read_target_error(path, file_kind(st.st_mode))
            if problem is not None:
                raise problem
            if expected is not None and FileId.of(st) != expected:
                raise changed_since_approval(path, f"it now opens another file (approved {expected}, "
                                                   f"found {FileId.of(st)})")
            start, end = select(st.st_size)
            if st.st_size <= hash_max_bytes:
                hashed = _read_hashing(fd, st.st_size, start, end, hash_max_bytes)
                if hashed is not None:
                    return Window(hashed[0], start, st.st_size, hashed[1])
            return Window(pread_exact(fd, end - start, start), start, st.st_size)
        finally:
            os.close(fd)


def read_whole(root: int, path: WorkspacePath, resolver: Resolver, *, expected: FileId | None,
               max_bytes: int) -> Window | None:
    """The whole regular file and its SHA-256, from one pass (:func:`read_window`); None, having read
    nothing, when it is larger than ``max_bytes``."""
    def select(total: int) -> tuple[int, int]:
        return (0, total) if total <= max_bytes else (0, 0)

    window = read_window(root, path, resolver, select, expected=expected, hash_max_bytes=max_bytes)
    return window if window.sha256 is not None else None


def sha256_of(fd: int) -> str:
    """The SHA-256 of everything ``fd`` holds, read with ``pread`` in chunks of at most :data:`HASH_CHUNK` bytes."""
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, HASH_CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()

