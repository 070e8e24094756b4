"""Workspace file I/O beneath one directory descriptor of the workspace root.

Promises:

* Every lookup starts at the root's descriptor and stays beneath it, whatever is renamed or swapped
  concurrently: either ``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`` resolves the path in the
  kernel, or (where openat2 is missing, or when asked) a component walk opens one component at a time
  with ``O_NOFOLLOW``, reads each symlink through the descriptor of the link itself, and follows it
  only while its target stays beneath the root. Both refuse, with ``outside_workspace``: a symlink
  with an absolute target (even one that points back inside), a ``..`` that climbs above the root, and
  procfs magic links. At most :data:`MAX_SYMLINK_HOPS` symlinks are followed. A failed openat2 lookup
  is re-run with the walk, which either finds the file (the tree changed in between) or names the
  component and the rule that failed. Nothing ever opens a path by name from ``/`` or touches the
  workspace's parent. The root descriptor comes from :func:`workspace_root`: the session's pinned
  root (``SessionView.root_fd``) when it has one, else the workspace opened by path.
* :func:`resolve` says where a path leads (the resolved workspace-relative path, and the device and
  inode of the file and of its directory) by the same rules, opening nothing for reading, so the
  supervisor can rate and show a call by what it will touch. A resolved name that is not UTF-8 is
  ``invalid_path``; error details never carry undecodable names (they are shown escaped).
* Given an :class:`Expected` (:func:`write_file`) or an expected :class:`FileId` (:func:`read_window`),
  the object actually opened — the file read, the directory written into, the name and the file
  replaced — must be that one, else ``changed_since_approval`` before a byte is read or written.
* :func:`read_window` opens with ``O_NONBLOCK`` and refuses, before reading a byte, anything that
  ``fstat`` does not call a regular file (a FIFO, device, socket or directory never blocks or streams).
  A file of at most ``hash_max_bytes`` is read once, whole, in chunks of at most :data:`HASH_CHUNK`
  bytes through one buffer, and the range and the file's SHA-256 come from those same reads; a larger
  file is read only in the requested range, with ``pread``.
* :func:`write_file` is crash-atomic: the content goes to a temporary file created through the
  destination directory's descriptor, is fsynced, and is installed with one ``renameat`` (replace) or
  a no-clobber ``renameat2(RENAME_NOREPLACE)`` / ``linkat`` (create); then the directory is fsynced.
  After a crash at any point the destination holds exactly the old or the new content. Temporary files
  are named ``.peon-tmp-<16 hex>`` and held under an exclusive ``flock`` while their writer lives, so a
  later write in the same directory recognises the ones whose writer died and removes them.
* :func:`apply_changes` installs several files as one change (``apply_patch``): every new content is
  written to a temporary file and fsynced, and every precondition (the approved objects, the expected
  hashes, no clobber for new files) is checked, before the first destination changes; then the files
  are installed in order, each crash-atomically, the replaced and deleted ones kept as locked
  temporary links until the end. When an install fails, those already done are undone (replaced
  and deleted files put back, new files removed) and the error is raised: all or nothing, except
  across a crash, after which each file holds its old or its new content.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import stat
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from enum import Enum

from peon.core.errors import ErrorCode, ToolError
from peon.core.tool import SessionView
from peon.core.paths import TEMP_PREFIX, WorkspacePath, display, is_temp_name, is_utf8_name, printable

from peon.workers.linux import PROC_SUPER_MAGIC, RENAME_NOREPLACE, filesystem_type, openat2, renameat2

MAX_SYMLINK_HOPS = 40  # the kernel's MAXSYMLINKS
RESOLVER_ENV = "PEON_FS_RESOLVER"  # auto | openat2 | walk (for diagnosis and tests; default auto)
EAGAIN_RETRIES = 16  # openat2 says EAGAIN when a rename raced a '..'; after this many, walk instead
HASH_CHUNK = 1 << 20


class Resolver(str, Enum):
    OPENAT2 = "openat2"
    WALK = "walk"


_openat2_checked: bool | None = None


def openat2_available() -> bool:
    """Whether this kernel (and any seccomp filter around us) lets us use openat2 with RESOLVE_BENEATH."""
    global _openat2_checked
    if _openat2_checked is None:
        try:
            root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            os.close(openat2(root, ".", os.O_PATH | os.O_DIRECTORY))
            _openat2_checked = True
        except OSError:
            _openat2_checked = False
        finally:
            os.close(root)
    return _openat2_checked


def choose_resolver(name: str | None) -> Resolver:
    """``auto`` (or unset) means openat2 where available, else the walk."""
    if name in (None, "", "auto"):
        return Resolver.OPENAT2 if openat2_available() else Resolver.WALK
    try:
        chosen = Resolver(name)
    except ValueError:
        raise ToolError(ErrorCode.CONFIG_INVALID,
                        f"{RESOLVER_ENV} must be 'auto', 'openat2' or 'walk', got {display(name)}") from None
    if chosen is Resolver.OPENAT2 and not openat2_available():
        raise ToolError(ErrorCode.CONFIG_INVALID,
                        f"{RESOLVER_ENV} is 'openat2' but this kernel does not provide openat2 (Linux 5.6+)")
    return chosen


def _on_procfs(fd: int) -> bool:
    """Whether ``fd`` is on a procfs; when that cannot be told, True (the strict path decides)."""
    try:
        return filesystem_type(fd) == PROC_SUPER_MAGIC
    except OSError:
        return True


def open_root(workspace: str | os.PathLike[str]) -> int:
    try:
        return os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ToolError(ErrorCode.IO_ERROR, f"the workspace {display(os.fspath(workspace))} cannot be opened: "
                        f"{exc.strerror}", {"errno": errno.errorcode.get(exc.errno or 0, str(exc.errno))}) from None


@contextmanager
def workspace_root(session: SessionView) -> Iterator[int]:
    """The descriptor every resolution of the session's workspace paths starts from, closed on exit.

    A duplicate of ``session.root_fd`` (the workspace pinned once at session start) when the session
    has one, else the workspace opened by path. Every ``read``, ``write`` and project-skill
    resolution, in the supervisor and in the worker, goes through here.
    """
    if session.root_fd >= 0:
        try:
            fd = fcntl.fcntl(session.root_fd, fcntl.F_DUPFD_CLOEXEC, 0)
        except OSError as exc:
            raise ToolError(ErrorCode.IO_ERROR, f"the session's pinned workspace descriptor {session.root_fd} "
                            f"cannot be used: {exc.strerror}",
                            {"errno": errno.errorcode.get(exc.errno or 0, str(exc.errno))}) from None
    else:
        fd = open_root(session.workspace)
    try:
        yield fd
    finally:
        os.close(fd)


# -- errors ---------------------------------------------------------------------------------------------


def _os_error(exc: OSError, path: WorkspacePath, where: str, *, creating: bool = False) -> ToolError:
    """Map an errno met at component ``where`` of ``path`` to a stable code and a sentence."""
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    details = {"errno": name, "at": printable(where)}
    shown = path.shown
    if exc.errno == errno.ENOENT:
        if where == path.normalized:
            return ToolError(ErrorCode.NOT_FOUND, f"path {shown} does not exist", details)
        tail = " (write does not create directories)" if creating else ""
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
def _os_errors(path: WorkspacePath) -> Iterator[None]:
    """Any OSError not mapped closer to its cause still becomes a ToolError with a stable code."""
    try:
        yield
    except OSError as exc:
        raise _os_error(exc, path, path.normalized) from None


def _outside(path: WorkspacePath, link: str, target: str, why: str) -> ToolError:
    return ToolError(
        ErrorCode.OUTSIDE_WORKSPACE,
        f"path {path.shown} leaves the workspace: symlink {link!r} points to {target!r}, {why}",
        {"symlink": printable(link), "target": printable(target)},
    )


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISREG, "regular file")):
        if test(mode):
            return name
    return "special file"


# -- resolution: the component walk ----------------------------------------------------------------------


class _Walk:
    """Resolve components one at a time beneath ``root``; owns every descriptor it opens."""

    def __init__(self, root: int, path: WorkspacePath):
        self.path = path
        self.stack = [root]  # directory descriptors we descended through; [0] is not ours
        self.trail: list[str] = []  # the names of those directories, for messages
        self.hops = 0

    def close(self) -> None:
        for fd in self.stack[1:]:
            os.close(fd)
        del self.stack[1:]

    def where(self, name: str = "") -> str:
        return "/".join([*self.trail, name] if name else self.trail) or "."

    def follow(self, fd: int, name: str, pending: deque[tuple[str, tuple[str, str] | None]]) -> None:
        """``fd`` is an O_PATH descriptor of the symlink ``name``: splice its target into ``pending``."""
        where = self.where(name)
        try:
            target = os.readlink("", dir_fd=fd)
        finally:
            os.close(fd)
        # procfs magic links (fd/N, cwd, root, exe...) read as absolute paths or 'type:[id]'; the kernel
        # would jump to the object itself, so they are refused however they read.
        if (target.startswith("/") or ":" in target) and _on_procfs(self.stack[-1]):
            raise ToolError(ErrorCode.OUTSIDE_WORKSPACE,
                            f"path {self.path.shown} goes through {where!r}, a procfs magic link "
                            f"(to {target!r}), which Peon never follows",
                            {"symlink": printable(where), "target": printable(target)})
        self.hops += 1
        if self.hops > MAX_SYMLINK_HOPS:
            raise _os_error(OSError(errno.ELOOP, "too many symlinks"), self.path, where)
        if target.startswith("/"):
            raise _outside(self.path, where, target,
                           "an absolute path (only relative symlinks that stay inside are followed)")
        origin = (where, target)  # remembered per component, so a '..' is blamed on its own link
        pending.extendleft((part, origin) for part in reversed(target.split("/")))

    def up(self, origin: tuple[str, str] | None) -> None:
        if len(self.stack) == 1:
            link, target = origin or ("?", "?")  # the path itself has no '..' left after parsing
            raise _outside(self.path, link, target, "which climbs above the workspace root")
        os.close(self.stack.pop())
        self.trail.pop()

    def run(self, final: Callable[[int, str], int | None], *, parent: bool) -> tuple[int, str]:
        """Walk to the last component and hand it to ``final(dirfd, name)``.

        ``final`` returns a descriptor (done), or None to follow the symlink named ``name``. With
        ``parent`` the result is (a readable descriptor of the last directory, the last name).
        """
        pending: deque[tuple[str, tuple[str, str] | None]] = deque((part, None) for part in self.path.parts)
        while pending:
            name, origin = pending.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                self.up(origin)
                continue
            here = self.stack[-1]
            if _is_last(pending):
                result = final(here, name)
                if result is not None:
                    return result, name
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=here)
            except OSError as exc:
                raise _os_error(exc, self.path, self.where(name), creating=parent) from None
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                self.follow(fd, name, pending)
                continue
            if _is_last(pending):
                # ``final`` declined a name that is not a symlink now: it changed under us; look again.
                os.close(fd)
                self.hops += 1
                if self.hops > MAX_SYMLINK_HOPS:
                    raise _os_error(OSError(errno.ELOOP, "kept changing"), self.path, self.where(name))
                pending.appendleft((name, origin))
                continue
            if not stat.S_ISDIR(mode):
                os.close(fd)
                raise ToolError(ErrorCode.NOT_A_DIRECTORY,
                                f"path {self.path.shown}: {self.where(name)!r} is a {_kind(mode)}, not a directory",
                                {"at": printable(self.where(name))})
            self.stack.append(fd)
            self.trail.append(name)
        # The components ran out inside a directory (a symlink to 'dir/', '.' or '..').
        if parent:
            raise ToolError(ErrorCode.NOT_A_REGULAR_FILE,
                            f"path {self.path.shown} resolves to the directory {self.where()!r}, not a file")
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.stack[-1]), ""


def _is_last(pending: deque[tuple[str, tuple[str, str] | None]]) -> bool:
    return all(part in ("", ".") for part, _ in pending)


def _walk_open(root: int, path: WorkspacePath, flags: int) -> int:
    walk = _Walk(root, path)

    def final(dirfd: int, name: str) -> int | None:
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the last component is a symlink: follow it
                return None
            if exc.errno in (errno.ENXIO, errno.ENODEV):  # a socket, or a device without a driver
                try:
                    kind = _kind(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
                except OSError:
                    kind = "special file"
                raise ToolError(ErrorCode.NOT_A_REGULAR_FILE, f"path {path.shown} is a {kind}, not a regular file",
                                {"kind": kind}) from None
            raise _os_error(exc, path, walk.where(name)) from None

    try:
        return walk.run(final, parent=False)[0]
    finally:
        walk.close()


def _walk_parent(root: int, path: WorkspacePath, follow_final: bool) -> tuple[int, str]:
    walk = _Walk(root, path)

    def final(dirfd: int, name: str) -> int | None:
        if follow_final:
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            except OSError as exc:
                raise _os_error(exc, path, walk.where(name)) from None
            if st is not None and stat.S_ISLNK(st.st_mode):
                return None
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dirfd)

    try:
        return walk.run(final, parent=True)
    finally:
        walk.close()


# -- resolution: openat2 ---------------------------------------------------------------------------------


def _openat2_retrying(root: int, text: str, flags: int) -> int | None:
    """openat2 beneath ``root``; None when the walk should decide (an error to explain, or endless EAGAIN)."""
    for _ in range(EAGAIN_RETRIES):
        try:
            return openat2(root, text, flags)
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                return None
    return None


def open_beneath(root: int, path: WorkspacePath, flags: int, resolver: Resolver) -> int:
    """A descriptor of the file ``path`` names beneath ``root``, symlinks (inside) followed."""
    if resolver is Resolver.OPENAT2:
        fd = _openat2_retrying(root, path.normalized or ".", flags)
        if fd is not None:
            return fd
    return _walk_open(root, path, flags)


def open_parent(root: int, path: WorkspacePath, resolver: Resolver, *, follow_final: bool) -> tuple[int, str]:
    """(a readable descriptor of the directory that holds the last component, its name).

    With ``follow_final``, a last component that is a symlink is followed (beneath the root) until the
    name is not a symlink, so the caller can install over the file the link points to.
    """
    if resolver is Resolver.WALK:
        return _walk_parent(root, path, follow_final)
    parent, name = "/".join(path.parts[:-1]) or ".", path.parts[-1]
    hops = 0
    while True:
        dirfd = _openat2_retrying(root, parent, os.O_RDONLY | os.O_DIRECTORY)
        if dirfd is None:
            return _walk_parent(root, path, follow_final)
        if not follow_final:
            return dirfd, name
        try:
            try:
                if not stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
                    return dirfd, name
            except FileNotFoundError:
                return dirfd, name
            if _on_procfs(dirfd):
                return _walk_parent(root, path, follow_final)  # names the magic link
            target = os.readlink(name, dir_fd=dirfd)
        except BaseException:
            os.close(dirfd)
            raise
        os.close(dirfd)
        hops += 1
        if target.startswith("/") or hops > MAX_SYMLINK_HOPS:
            return _walk_parent(root, path, follow_final)  # refuses it and says why
        parent, _, name = f"{parent}/{target}".rpartition("/")
        if name in ("", ".", ".."):
            raise ToolError(ErrorCode.NOT_A_REGULAR_FILE,
                            f"path {path.shown} is a symlink to {target!r}, which names a directory, not a file")


# -- resolution: what a path names, without opening it --------------------------------------------------


@dataclass(frozen=True)
class FileId:
    """A file's identity: its device and inode. Shown and sent as ``"<device>:<inode>"``."""

    device: int
    inode: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileId:
        return cls(st.st_dev, st.st_ino)

    @classmethod
    def parse(cls, text: object) -> FileId | None:
        """The identity written by :meth:`__str__`, or None for anything else."""
        if not isinstance(text, str):
            return None
        device, colon, inode = text.partition(":")
        if not colon or not device.isdigit() or not inode.isdigit():
            return None
        return cls(int(device), int(inode))

    def __str__(self) -> str:
        return f"{self.device}:{self.inode}"


@dataclass(frozen=True)
class Resolution:
    """Where a workspace path leads, beneath the root, at the moment it was resolved."""

    path: str  # the resolved workspace-relative path, normal form, every symlink followed that was asked
    directory: FileId  # the directory holding the last component
    file: FileId | None  # the last component (a symlink itself when not followed); None when absent
    kind: str | None  # what the last component is ("regular file", "directory", ...); None when absent

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]


def resolve(root: int, path: WorkspacePath, *, follow_final: bool, must_exist: bool) -> Resolution:
    """Resolve ``path`` beneath ``root`` by the component walk, opening nothing for reading.

    The rules are those of :func:`open_beneath` / :func:`open_parent`: symlinks that stay beneath the
    root are followed (the last component only with ``follow_final``), everything else is refused
    with the same codes. A missing last component is ``not_found`` when ``must_exist``, else a
    :class:`Resolution` whose ``file`` is None (a ``create``). A resolved path that is not valid UTF-8
    (reached through a symlink; a typed path never is) is ``invalid_path``: Peon's paths are UTF-8 —
    except an absent last component, which is ``not_found`` to whoever needs it to exist.
    """
    walk = _Walk(root, path)
    seen: list[os.stat_result | None] = []

    def final(dirfd: int, name: str) -> int | None:
        try:
            st: os.stat_result | None = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise _os_error(exc, path, walk.where(name)) from None
        if follow_final and st is not None and stat.S_ISLNK(st.st_mode):
            return None
        seen.append(st)
        return os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dirfd)

    try:
        dirfd, name = walk.run(final, parent=True)
        try:
            where, trail, directory = walk.where(name), walk.where(), FileId.of(os.fstat(dirfd))
        finally:
            os.close(dirfd)
    finally:
        walk.close()
    st = seen[-1]
    if st is None and must_exist:
        raise _os_error(OSError(errno.ENOENT, "absent"), path, where)
    if not is_utf8_name(where if st is not None else trail):  # an absent name is never shown
        raise ToolError(ErrorCode.INVALID_PATH,
                        f"path {path.shown} resolves through a symlink to {printable(where)!r}, a name that is "
                        "not valid UTF-8; Peon's paths are UTF-8",
                        {"rule": "resolved_utf8", "resolved": printable(where)})
    return Resolution(where, directory, None if st is None else FileId.of(st),
                      None if st is None else _kind(st.st_mode))


def changed_since_approval(path: WorkspacePath, what: str) -> ToolError:
    """The refusal when what a call is about to open is not what was approved; nothing was read or written."""
    return ToolError(ErrorCode.CHANGED_SINCE_APPROVAL,
                     f"path {path.shown} changed since the call was approved: {what}; nothing was done",
                     {"rule": "changed_since_approval"})


@dataclass(frozen=True)
class Expected:
    """What a call was approved to open: checked against the object actually opened, at the moment of use."""

    directory: FileId  # the directory holding the last component
    name: str  # the last component's name in it
    file: FileId | None  # the file itself; None: nothing may exist there (a create)


def _check_expected(path: WorkspacePath, expected: Expected, directory: os.stat_result, name: str,
                    existing: os.stat_result | None) -> None:
    if FileId.of(directory) != expected.directory or name != expected.name:
        raise changed_since_approval(path, "the directory it leads to is not the approved one")
    found = None if existing is None else FileId.of(existing)
    if found != expected.file:
        what = ("it was absent when approved and now exists" if expected.file is None
                else "the file was removed" if found is None
                else f"it is now another file (approved {expected.file}, found {found})")
        raise changed_since_approval(path, what)


# -- read ------------------------------------------------------------------------------------------------


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
    with _os_errors(path):
        fd = open_beneath(root, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, resolver)
        try:
            st = os.fstat(fd)
            problem = read_target_error(path, _kind(st.st_mode))
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


# -- write -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteOutcome:
    created: bool
    bytes_written: int
    sha256: str
    removed_temps: tuple[str, ...] = ()


def _lock(fd: int) -> bool:
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
            if stat.S_ISREG(st.st_mode) and _lock(fd) and _same_file(dirfd, name, st):
                os.unlink(name, dir_fd=dirfd)
                removed.append(name)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
    return removed


def _create_temp(dirfd: int, mode: int) -> tuple[int, str]:
    for _ in range(100):
        name = TEMP_PREFIX + secrets.token_hex(8)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=dirfd)
        except FileExistsError:
            continue
        # A cleaner may have taken the unlocked file for stale and removed it before we locked it.
        if _lock(fd) and _same_file(dirfd, name, os.fstat(fd)):
            return fd, name
        os.close(fd)
    raise ToolError(ErrorCode.IO_ERROR, "could not create a temporary file in the destination directory")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def sha256_of(fd: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, HASH_CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def _observed_sha256(dirfd: int, name: str, path: WorkspacePath) -> str:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dirfd)
    except OSError as exc:
        raise _os_error(exc, path, path.normalized) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(ErrorCode.NOT_A_REGULAR_FILE,
                            f"path {path.shown} is a {_kind(st.st_mode)}; write only replaces regular files")
        return sha256_of(fd)
    finally:
        os.close(fd)


def _install_new(dirfd: int, temp: str, name: str, path: WorkspacePath, use_link: bool) -> None:
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
                raise _os_error(exc, path, path.normalized) from None
    try:
        os.link(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd, follow_symlinks=False)
    except FileExistsError:
        raise ToolError(ErrorCode.ALREADY_EXISTS,
                        f"path {path.shown} already exists (it appeared while writing)") from None
    except OSError as exc:
        raise _os_error(exc, path, path.normalized) from None
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
    with _os_errors(path):
        return _write_file(root, path, data, create, expected_sha256, resolver, use_link, expected)


def _installable_target(dirfd: int, name: str, path: WorkspacePath, create: bool) -> os.stat_result | None:
    """What is at ``name`` in ``dirfd`` now (``None``: nothing), when a file may be installed there; otherwise the
    error that says why not (a name reserved for Peon's temporary files, the wrong kind, exists or is missing)."""
    if is_temp_name(name):
        raise ToolError(ErrorCode.INVALID_PATH,
                        f"path {path.shown} ends in {name!r}, a name reserved for Peon's temporary files")
    try:
        existing: os.stat_result | None = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        existing = None
    problem = target_error(path, create, None if existing is None else _kind(existing.st_mode))
    if problem is not None:
        raise problem
    return existing


def _write_file(root: int, path: WorkspacePath, data: bytes, create: bool, expected_sha256: str | None,
                resolver: Resolver, use_link: bool, expected: Expected | None) -> WriteOutcome:
    dirfd, name = open_parent(root, path, resolver, follow_final=not create)
    try:
        existing = _installable_target(dirfd, name, path, create)
        if expected is not None:
            _check_expected(path, expected, os.fstat(dirfd), name, existing)
        removed = remove_stale_temps(dirfd)
        fd, temp = _create_temp(dirfd, 0o666 if create else 0o600)
        installed = False
        try:
            _write_all(fd, data)
            if existing is not None:
                with suppress(PermissionError):  # keep the owner where we may (root, or a group we belong to)
                    os.fchown(fd, existing.st_uid, existing.st_gid)
                os.fchmod(fd, stat.S_IMODE(existing.st_mode) & 0o777)
            os.fsync(fd)
            if create:
                _install_new(dirfd, temp, name, path, use_link)
            else:
                if expected_sha256 is not None:
                    actual = _observed_sha256(dirfd, name, path)
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
        return WriteOutcome(create, len(data), hashlib.sha256(data).hexdigest(), tuple(removed))
    finally:
        os.close(dirfd)


# -- several files as one change (apply_patch) ------------------------------------------------------------


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
    change: Change
    dirfd: int
    name: str
    temp: str | None = None  # the new content, not installed yet
    temp_fd: int = -1
    backup: str | None = None  # the old file, linked aside while the change is undoable
    backup_fd: int = -1
    done: bool = False


def _backup_link(staged: _Staged, *, move: bool) -> None:
    """Keep the current file under a locked temporary name (moved there when ``move``, else linked)."""
    fd = os.open(staged.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=staged.dirfd)
    try:
        _lock(fd)  # a concurrent write's cleaner leaves a locked temporary file alone
        for _ in range(100):
            name = TEMP_PREFIX + secrets.token_hex(8)
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
    dirfd, name = open_parent(root, path, resolver, follow_final=not change.create)
    staged = _Staged(change, dirfd, name)
    try:
        existing = _installable_target(dirfd, name, path, change.create)
        if change.expected is not None:
            _check_expected(path, change.expected, os.fstat(dirfd), name, existing)
        if change.expected_sha256 is not None:
            actual = _observed_sha256(dirfd, name, path)
            if actual != change.expected_sha256:
                raise ToolError(ErrorCode.STALE, f"path {path.shown} has sha256 {actual}, not the expected "
                                f"{change.expected_sha256}; it changed while the patch was prepared",
                                {"path": path.normalized, "expected_sha256": change.expected_sha256,
                                 "actual_sha256": actual})
        if change.data is not None:
            remove_stale_temps(dirfd)
            staged.temp_fd, staged.temp = _create_temp(dirfd, 0o666 if change.create else 0o600)
            _write_all(staged.temp_fd, change.data)
            if existing is not None:
                with suppress(PermissionError):  # keep the owner where we may
                    os.fchown(staged.temp_fd, existing.st_uid, existing.st_gid)
                os.fchmod(staged.temp_fd, stat.S_IMODE(existing.st_mode) & 0o777)
            os.fsync(staged.temp_fd)
        return staged
    except BaseException:
        _discard(staged)
        raise


def _install(staged: _Staged, resolver_use_link: bool) -> None:
    change, dirfd = staged.change, staged.dirfd
    if change.create:
        assert staged.temp is not None
        _install_new(dirfd, staged.temp, staged.name, change.path, resolver_use_link)
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


def _discard(staged: _Staged) -> None:
    """Remove what is left aside and close every descriptor."""
    for name in (staged.temp, staged.backup):
        if name is not None:
            with suppress(OSError):
                os.unlink(name, dir_fd=staged.dirfd)
    for fd in (staged.temp_fd, staged.backup_fd):
        if fd >= 0:
            os.close(fd)
    staged.temp = staged.backup = None
    staged.temp_fd = staged.backup_fd = -1
    os.close(staged.dirfd)


def apply_changes(root: int, changes: list[Change], resolver: Resolver, *, use_link: bool = False) -> list[str | None]:
    """Install ``changes`` all or nothing (see the module's promises); the SHA-256 of each new content
    (None for a deletion), in order."""
    staged: list[_Staged] = []
    try:
        for change in changes:
            with _os_errors(change.path):
                staged.append(_prepare(root, change, resolver))
        try:
            for item in staged:
                with _os_errors(item.change.path):
                    _install(item, use_link)
        except BaseException:
            for item in reversed(staged):
                if item.done:
                    _undo(item)
            raise
        for item in staged:
            with suppress(OSError):
                os.fsync(item.dirfd)
    finally:
        for item in staged:
            _discard(item)
    return [None if c.data is None else hashlib.sha256(c.data).hexdigest() for c in changes]
