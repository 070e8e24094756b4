"""Writing one workspace file crash-atomically: a temporary file, fsynced, installed with one rename.

Promises:

* :func:`write_file` writes the content to a temporary file created through the destination
  directory's descriptor (:mod:`peon.workers.fs.temps`), fsyncs it, and installs it with one
  ``renameat`` (replace) or a no-clobber ``renameat2(RENAME_NOREPLACE)`` / ``linkat`` (create); then the
  directory is fsynced. After a crash at any point the destination holds exactly the old or the new
  content. A replaced file keeps its mode and, where the writer may, its owner.
* Given an :class:`~peon.workers.fs.identity.Expected`, the directory written into, the name and the
  file replaced (or its absence, for a create) must be the approved ones, else
  ``changed_since_approval`` and nothing is written; given an expected SHA-256, the file replaced must
  still have it, else ``stale``. A create whose approval lists directories to make has them made
  first (:mod:`peon.workers.fs.parents`), and removed again when the file is not installed after all.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from contextlib import suppress
from dataclasses import dataclass

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath, is_temp_name

from peon.workers.fs.errors import file_kind, os_error, os_errors
from peon.workers.fs.identity import Expected, check_expected
from peon.workers.fs.parents import Parents, make_parents
from peon.workers.fs.read import sha256_of
from peon.workers.fs.resolver import Resolver, open_parent
from peon.workers.fs.temps import create_temp, remove_stale_temps
from peon.workers.linux import RENAME_NOREPLACE, renameat2


@dataclass(frozen=True)
class WriteOutcome:
    """What :func:`write_file` did: created or replaced, how many bytes, their SHA-256, the stale temporary
    files it removed from the directory."""

    created: bool
    bytes_written: int
    sha256: str
    removed_temps: tuple[str, ...] = ()
    created_directories: tuple[str, ...] = ()  # workspace-relative, outermost first


def fill_temp(fd: int, data: bytes, existing: os.stat_result | None) -> None:
    """Write ``data`` to the temporary file ``fd``, give it the mode (and, where this process may, the owner)
    of the file it replaces (``existing``; None: a new file), and fsync it: it is on disk before it is installed."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    if existing is not None:
        with suppress(PermissionError):  # keep the owner where we may (root, or a group we belong to)
            os.fchown(fd, existing.st_uid, existing.st_gid)
        os.fchmod(fd, stat.S_IMODE(existing.st_mode) & 0o777)
    os.fsync(fd)


def observed_sha256(dirfd: int, name: str, path: WorkspacePath) -> str:
    """The SHA-256 of the regular file ``name`` in ``dirfd`` as it is now (opened without following a link)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dirfd)
    except OSError as exc:
        raise os_error(exc, path, path.normalized) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(ErrorCode.NOT_A_REGULAR_FILE,
                            f"path {path.shown} is a {file_kind(st.st_mode)}; write only replaces regular files")
        return sha256_of(fd)
    finally:
        os.close(fd)


def install_new(dirfd: int, temp: str, name: str, path: WorkspacePath, use_link: bool) -> None:
    """Install ``temp`` as ``name`` only if ``name`` does not exist (no clobber, even racing)."""
    if not use_link:
        try:
            renameat2(dirfd, temp, dirfd, name, RENAME_NOREPLACE)
            return
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise ToolError(ErrorCode.ALREADY_EXISTS,
                                f"path {path.shown} already exists (it appeared while writing)") from None
            if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
                raise os_error(exc, path, path.normalized) from None
    try:
        os.link(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd, follow_symlinks=False)
    except FileExistsError:
        raise ToolError(ErrorCode.ALREADY_EXISTS,
                        f"path {path.shown} already exists (it appeared while writing)") from None
    except OSError as exc:
        raise os_error(exc, path, path.normalized) from None
    os.unlink(temp, dir_fd=dirfd)


def target_error(path: WorkspacePath, create: bool, kind: str | None) -> ToolError | None:
    """Why a write of ``mode`` cannot target what is at the path (``kind`` None: nothing), or None."""
    if create and kind is not None:
        return ToolError(ErrorCode.ALREADY_EXISTS,
                         f"path {path.shown} already exists (a {kind}); mode 'create' never overwrites", {"kind": kind})
    if not create and kind is None:
        return ToolError(ErrorCode.NOT_FOUND,
                         f"path {path.shown} does not exist; mode 'replace' only replaces an existing file")
    if not create and kind != "regular file":
        return ToolError(ErrorCode.NOT_A_REGULAR_FILE,
                         f"path {path.shown} is a {kind}; write only replaces regular files", {"kind": kind})
    return None


def write_file(root: int, path: WorkspacePath, data: bytes, *, create: bool, expected_sha256: str | None,
               resolver: Resolver, use_link: bool = False, expected: Expected | None = None) -> WriteOutcome:
    """Create (no clobber) or replace the regular file ``path`` with ``data``, crash-atomically.

    With ``expected``, the directory written into, the name and the file replaced (or its absence, for
    a create) must be the approved ones, else ``changed_since_approval`` and nothing is written.
    """
    with os_errors(path):
        return _write_file(root, path, data, create, expected_sha256, resolver, use_link, expected)


def installable_target(dirfd: int, name: str, path: WorkspacePath, create: bool) -> os.stat_result | None:
    """What is at ``name`` in ``dirfd`` now (``None``: nothing), when a file may be installed there; otherwise the
    error that says why not (a name reserved for Peon's temporary files, the wrong kind, exists or is missing)."""
    if is_temp_name(name):
        raise ToolError(ErrorCode.INVALID_PATH,
                        f"path {path.shown} ends in {name!r}, a name reserved for Peon's temporary files")
    try:
        existing: os.stat_result | None = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        existing = None
    problem = target_error(path, create, None if existing is None else file_kind(existing.st_mode))
    if problem is not None:
        raise problem
    return existing


def open_destination(root: int, path: WorkspacePath, resolver: Resolver, create: bool,
                     expected: Expected | None) -> tuple[int, str, Parents | None]:
    """(the directory to install in, the name in it, the directories made for it): its approved
    directories made first when a create's approval lists them; the caller closes the directory (through
    the :class:`Parents` when there are any)."""
    if create and expected is not None and expected.parents:
        parents = make_parents(root, path, expected, resolver)
        return parents.dirfd, path.parts[-1], parents
    dirfd, name = open_parent(root, path, resolver, follow_final=not create)
    return dirfd, name, None


def _write_file(root: int, path: WorkspacePath, data: bytes, create: bool, expected_sha256: str | None,
                resolver: Resolver, use_link: bool, expected: Expected | None) -> WriteOutcome:
    dirfd, name, parents = open_destination(root, path, resolver, create, expected)
    installed = False
    try:
        existing = installable_target(dirfd, name, path, create)
        if expected is not None:
            check_expected(path, expected, os.fstat(dirfd), name, existing)
        removed = remove_stale_temps(dirfd)
        fd, temp = create_temp(dirfd, 0o666 if create else 0o600)
        try:
            fill_temp(fd, data, existing)
            if create:
                install_new(dirfd, temp, name, path, use_link)
            else:
                if expected_sha256 is not None:
                    actual = observed_sha256(dirfd, name, path)
                    if actual != expected_sha256:
                        raise ToolError(
                            ErrorCode.STALE,
                            f"path {path.shown} has sha256 {actual}, not the expected {expected_sha256}; "
                            "it changed since it was read",
                            {"expected_sha256": expected_sha256, "actual_sha256": actual},
                        )
                os.rename(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
            installed = True
            os.fsync(dirfd)
        finally:
            if not installed:
                with suppress(OSError):
                    os.unlink(temp, dir_fd=dirfd)
            os.close(fd)  # only now: the lock tells cleaners this temp file is alive
        made = tuple(parents.made()) if parents is not None else ()
        return WriteOutcome(create, len(data), hashlib.sha256(data).hexdigest(), tuple(removed), made)
    finally:
        if parents is None:
            os.close(dirfd)
        else:
            if not installed:
                parents.undo()
            parents.close()

