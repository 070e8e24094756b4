"""The two path resolvers, beneath one directory descriptor of the workspace root.

Promises:

* Every lookup starts at the root's descriptor and stays beneath it, whatever is renamed or swapped
  concurrently: either ``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`` resolves the path in the
  kernel, or (where openat2 is missing, or when asked) a component walk opens one component at a time
  with ``O_NOFOLLOW``, reads each symlink through the descriptor of the link itself, and follows it
  only while its target stays beneath the root. Both refuse, with ``outside_workspace``: a symlink
  with an absolute target (even one that points back inside), a ``..`` that climbs above the root, and
  procfs magic links. At most :data:`~peon.workers.fs.errors.MAX_SYMLINK_HOPS` symlinks are followed.
  A failed openat2 lookup is re-run with the walk, which either finds the file (the tree changed in
  between) or names the component and the rule that failed. Nothing ever opens a path by name from
  ``/`` or touches the workspace's parent. The root descriptor comes from :func:`workspace_root`: the
  session's pinned root (``SessionView.root_fd``) when it has one, else the workspace opened by path.
* :func:`resolve` says where a path leads (the resolved workspace-relative path, and the device and
  inode of the file and of its directory) by the same rules, opening nothing for reading, so the
  supervisor can rate and show a call by what it will touch. A resolved name that is not UTF-8 is
  ``invalid_path``; error details never carry undecodable names (they are shown escaped). Asked for a
  file that may be created with its directories (``create_parents``), it stops at the first directory
  of the typed path that does not exist and names the directories to create — only names typed in the
  path, never a symlink's target: a missing directory reached through a symlink is ``not_found``.

Runs in the worker (every read and write of a workspace file) and in the supervisor (:func:`resolve`,
:func:`workspace_root` for project skills).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath, display, is_utf8_name, printable

from peon.workers.fs.errors import MAX_SYMLINK_HOPS, file_kind, os_error
from peon.workers.fs.identity import FileId
from peon.workers.linux import PROC_SUPER_MAGIC, filesystem_type, openat2

RESOLVER_ENV = "PEON_FS_RESOLVER"  # auto | openat2 | walk (for diagnosis and tests; default auto)
EAGAIN_RETRIES = 16  # openat2 says EAGAIN when a rename raced a '..'; after this many, walk instead


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


class PinnedWorkspace(Protocol):
    """What resolving beneath the workspace needs of a session: the workspace's path and its pinned
    descriptor (-1 where there is none). A :class:`~peon.core.tool.SessionView` is one."""

    @property
    def workspace(self) -> Path: ...

    @property
    def root_fd(self) -> int: ...


@dataclass(frozen=True)
class Pinned:
    """A :class:`PinnedWorkspace` of its own, for code that has no session view (skill discovery)."""

    workspace: Path
    root_fd: int = -1


@contextmanager
def workspace_root(session: PinnedWorkspace) -> Iterator[int]:
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


# -- resolution: the component walk ----------------------------------------------------------------------


def _outside(path: WorkspacePath, link: str, target: str, why: str) -> ToolError:
    return ToolError(
        ErrorCode.OUTSIDE_WORKSPACE,
        f"path {path.shown} leaves the workspace: symlink {link!r} points to {target!r}, {why}",
        {"symlink": printable(link), "target": printable(target)},
    )


class _Walk:
    """Resolve components one at a time beneath ``root``; owns every descriptor it opens."""

    def __init__(self, root: int, path: WorkspacePath, *, creating: bool = False, create_parents: bool = False):
        self.path = path
        self.stack = [root]  # directory descriptors we descended through; [0] is not ours
        self.trail: list[str] = []  # the names of those directories, for messages
        self.hops = 0
        self.creating = creating  # a missing directory's message says this call does not create it
        self.create_parents = create_parents  # a missing typed directory ends the walk (see run)
        self.missing: tuple[str, ...] = ()  # with create_parents: the typed directories that do not exist

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
            raise os_error(OSError(errno.ELOOP, "too many symlinks"), self.path, where)
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
                rest = [part for part, _ in pending if part not in ("", ".")]
                if exc.errno == errno.ENOENT and self.create_parents and origin is None and rest:
                    # A directory typed in the path is missing: it and the rest (all typed, since a
                    # symlink's target is spliced in front and consumed first) are to be created.
                    self.missing = (name, *rest[:-1])
                    return os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=here), rest[-1]
                raise os_error(exc, self.path, self.where(name), creating=self.creating) from None
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                self.follow(fd, name, pending)
                continue
            if _is_last(pending):
                # ``final`` declined a name that is not a symlink now: it changed under us; look again.
                os.close(fd)
                self.hops += 1
                if self.hops > MAX_SYMLINK_HOPS:
                    raise os_error(OSError(errno.ELOOP, "kept changing"), self.path, self.where(name))
                pending.appendleft((name, origin))
                continue
            if not stat.S_ISDIR(mode):
                os.close(fd)
                raise ToolError(ErrorCode.NOT_A_DIRECTORY,
                                f"path {self.path.shown}: {self.where(name)!r} is a {file_kind(mode)}, not a directory",
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
                    kind = file_kind(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
                except OSError:
                    kind = "special file"
                raise ToolError(ErrorCode.NOT_A_REGULAR_FILE, f"path {path.shown} is a {kind}, not a regular file",
                                {"kind": kind}) from None
            raise os_error(exc, path, walk.where(name)) from None

    try:
        return walk.run(final, parent=False)[0]
    finally:
        walk.close()


def _walk_parent(root: int, path: WorkspacePath, follow_final: bool) -> tuple[int, str]:
    walk = _Walk(root, path, creating=not follow_final)

    def final(dirfd: int, name: str) -> int | None:
        if follow_final:
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            except OSError as exc:
                raise os_error(exc, path, walk.where(name)) from None
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
class Resolution:
    """Where a workspace path leads, beneath the root, at the moment it was resolved."""

    path: str  # the resolved workspace-relative path, normal form, every symlink followed that was asked
    directory: FileId  # the directory holding the last component; with ``missing``, the one they go in
    file: FileId | None  # the last component (a symlink itself when not followed); None when absent
    kind: str | None  # what the last component is ("regular file", "directory", ...); None when absent
    missing: tuple[str, ...] = ()  # the directories to create, outermost first (``create_parents``)

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def created_directories(self) -> list[str]:
        """The resolved workspace-relative path of each directory to create, outermost first."""
        parts = self.path.split("/")[:-1]
        first = len(parts) - len(self.missing)
        return ["/".join(parts[:end]) for end in range(first + 1, len(parts) + 1)]


def resolve(root: int, path: WorkspacePath, *, follow_final: bool, must_exist: bool,
            create_parents: bool = False) -> Resolution:
    """Resolve ``path`` beneath ``root`` by the component walk, opening nothing for reading.

    The rules are those of :func:`open_beneath` / :func:`open_parent`: symlinks that stay beneath the
    root are followed (the last component only with ``follow_final``), everything else is refused
    with the same codes. A missing last component is ``not_found`` when ``must_exist``, else a
    :class:`Resolution` whose ``file`` is None (a ``create``). With ``create_parents``, a missing
    directory typed in the path ends the walk: the resolution's ``missing`` names it and the typed
    directories below it, and its ``directory`` is the one they would be created in. A resolved path
    that is not valid UTF-8 (reached through a symlink; a typed path never is) is ``invalid_path``:
    Peon's paths are UTF-8 — except an absent last component, which is ``not_found`` to whoever needs
    it to exist.
    """
    walk = _Walk(root, path, create_parents=create_parents)
    seen: list[os.stat_result | None] = []

    def final(dirfd: int, name: str) -> int | None:
        try:
            st: os.stat_result | None = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise os_error(exc, path, walk.where(name)) from None
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
    if walk.missing:
        where = "/".join([*walk.trail, *walk.missing, name])
        seen.append(None)
    st = seen[-1]
    if st is None and must_exist:
        raise os_error(OSError(errno.ENOENT, "absent"), path, where)
    if not is_utf8_name(where if st is not None else trail):  # an absent name is never shown
        raise ToolError(ErrorCode.INVALID_PATH,
                        f"path {path.shown} resolves through a symlink to {printable(where)!r}, a name that is "
                        "not valid UTF-8; Peon's paths are UTF-8",
                        {"rule": "resolved_utf8", "resolved": printable(where)})
    return Resolution(where, directory, None if st is None else FileId.of(st),
                      None if st is None else file_kind(st.st_mode), walk.missing)

