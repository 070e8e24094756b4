"""What the agent-control paths were when a sandboxed command started, and what becomes of what it left there.

Promises:

* :meth:`Ledger.take`, in the worker right before the command starts, records what is at every guarded
  path beneath each writable directory (:func:`~peon.workers.sandbox.guarded.candidates`: the
  agent-control list and git's own paths), at each directory on the way to one, and — with ``deep``, for a
  sandbox that cannot make them read-only (Landlock alone) — at every entry beneath an existing guarded
  directory (up to :data:`MAX_ENTRIES`): nothing, or its kind, device, inode and change time (``ctime``,
  which every write, rename, ``chmod`` or ``utimes`` moves and no process can set back). It names the
  existing guarded paths, resolved, that lie inside a writable directory (:meth:`read_only`: the mount
  view and bwrap bind them read-only) and the directories that hold them (:meth:`containers`: bound to
  themselves, so they cannot be renamed, removed or replaced while the command runs);
* :meth:`Ledger.settle`, once every process of the call has ended, finds what the command left: a guarded
  path that was absent and now exists (a link on the way to one included); with ``deep`` also one replaced
  or changed, and a new or changed entry beneath one. Each, unless :func:`~peon.workers.sandbox.guarded.inert`
  (a repository ``git init`` made, say), is moved into ``<state dir>/set-aside/<call id>/<its absolute
  path>`` — copied and removed when that is another file system (within :data:`COPY_BYTES` and
  :data:`MAX_ENTRIES`; beyond, removed) — and listed in what it returns (``moved_to``, ``removed`` or,
  when neither could be done, ``left``). So no program the user runs after the call (``git status``, an
  agent, an editor) finds what the command put there. It reaches each path beneath its writable directory
  by descriptor (``openat2(RESOLVE_BENEATH)``), so a link another call planted meanwhile cannot lead it
  elsewhere. It runs once; a later call returns the same list.

What it cannot know: who made a change. A change the user makes at a guarded path while a command runs
(an editor creating ``.vscode/``, an approved ``write``) is set aside with the command's when it ends,
and listed. With read-only binds (mount view, bwrap) only what was absent at the start is judged: the
command could not change the rest, so a change there is the host's.

Runs in the worker (and the job host), around each sandboxed command (:mod:`peon.workers.sandbox.confine`).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from peon.workers import linux
import peon.workers.sandbox.guarded as guarded

MAX_ENTRIES = 4096  # entries recorded beneath existing guarded directories (deep), and copied per path set aside
COPY_BYTES = 16 << 20  # what one path set aside may hold when it must be copied to another file system
SET_ASIDE = "set-aside"

# (kind, device, inode, ctime in ns); None: nothing there.
Mark = tuple[str, int, int, int]


def _kind(mode: int) -> str:
    return ("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else
            "link" if stat.S_ISLNK(mode) else "other")


def _mark(info: os.stat_result) -> Mark:
    return _kind(info.st_mode), info.st_dev, info.st_ino, info.st_ctime_ns


def _same(before: Mark | None, now: Mark | None) -> bool:
    """The same thing, unchanged: a directory by identity (its entries are compared one by one), anything
    else by identity and change time."""
    if before is None or now is None:
        return before is now
    return before[:3] == now[:3] and (before[0] == "dir" or before[3] == now[3])


def mark_of(path: str) -> Mark | None:
    try:
        return _mark(os.lstat(path))
    except OSError:
        return None


def _depth(path: str) -> int:
    return path.count("/")


def _module_dirs(gitdir: str) -> tuple[list[str], bool]:
    """The submodule directories (holding a ``HEAD``) beneath ``gitdir``/modules, and whether there were
    more than the walk may visit. Links are not followed."""
    found: list[str] = []
    visited = 0
    pending = [(f"{gitdir}/{guarded.GIT_MODULES}", 0)]
    while pending:
        directory, depth = pending.pop()
        try:
            entries = [e for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for entry in entries:
            visited += 1
            if visited > guarded.MAX_MODULE_DIRS or depth >= guarded.MAX_MODULE_DEPTH:
                return found, True
            if os.path.lexists(f"{entry.path}/HEAD"):
                found.append(entry.path)
                pending.append((f"{entry.path}/{guarded.GIT_MODULES}", 0))
            else:
                pending.append((entry.path, depth + 1))
    return found, False


def _guarded(root: str, protected: Sequence[str]) -> tuple[list[str], list[str]]:
    """The guarded paths beneath ``root`` as the files are now, and the repository directories among them
    (the root's ``.git`` and each submodule's)."""
    gitdir = f"{root.rstrip('/')}/{guarded.GIT_DIR}"
    if not guarded.names_git(protected):
        return guarded.candidates(root, protected), []
    modules: list[str] = []
    too_many = False
    if os.path.isdir(f"{gitdir}/{guarded.GIT_MODULES}"):
        modules, too_many = _module_dirs(gitdir)
    return guarded.candidates(root, protected, modules, too_many), [gitdir, *modules]


def _on_the_way(path: str, root: str) -> list[str]:
    """The directories between ``root`` and ``path``, shallowest first."""
    parts = path[len(root.rstrip("/")) + 1:].split("/")[:-1]
    return [f"{root.rstrip('/')}/{'/'.join(parts[:n])}" for n in range(1, len(parts) + 1)]


def _walk(directory: str, budget: list[int], out: dict[str, Mark]) -> None:
    """Every entry beneath ``directory`` (links not followed), while ``budget`` lasts."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if budget[0] <= 0:
            return
        budget[0] -= 1
        try:
            mark = _mark(entry.stat(follow_symlinks=False))
        except OSError:
            continue
        out[entry.path] = mark
        if mark[0] == "dir":
            _walk(entry.path, budget, out)


GUARDED, WAY, ENTRY = "guarded", "way", "entry"  # what a path recorded is: see Ledger.roles


@dataclass
class Ledger:
    roots: tuple[str, ...]  # innermost first
    protected: tuple[str, ...]
    deep: bool
    marks: dict[str, Mark | None]  # what was at each recorded path when the command started
    roles: dict[str, str]  # GUARDED; WAY: a directory on the way to one; ENTRY: beneath one (deep)
    gitdirs: tuple[str, ...]
    resolve: Callable[[str], str] = os.path.realpath
    settled: list[dict[str, str]] | None = None
    bound: list[str] | None = None  # read_only(), once found

    @classmethod
    def take(cls, roots: Iterable[str], protected: Sequence[str], *, deep: bool,
             resolve: Callable[[str], str] = os.path.realpath) -> Ledger:
        """What is at every guarded path beneath ``roots`` now (see the module's promises)."""
        root_list = tuple(sorted((r for r in roots if not r.startswith("/dev/")), key=len, reverse=True))
        ledger = cls(root_list, tuple(protected), deep, {}, {}, (), resolve=resolve)
        gitdirs: list[str] = []
        for root in root_list:
            paths, repositories = _guarded(root, protected)
            gitdirs += repositories
            absent: set[str] = set()  # paths found absent: nothing beneath them is there
            for path in paths:
                for step in (*_on_the_way(path, root), path):  # shallowest first: a step's parent is known
                    if step in ledger.marks:
                        continue
                    mark = None if step.rpartition("/")[0] in absent else mark_of(step)
                    ledger.marks[step] = mark
                    ledger.roles[step] = WAY
                    if mark is None:
                        absent.add(step)
                ledger.roles[path] = GUARDED
        ledger.gitdirs = tuple(dict.fromkeys(gitdirs))
        if deep:
            budget = [MAX_ENTRIES]
            entries: dict[str, Mark] = {}
            for path in ledger.existing_directories():
                _walk(path, budget, entries)
            for path, mark in entries.items():
                if path not in ledger.marks:
                    ledger.marks[path], ledger.roles[path] = mark, ENTRY
        return ledger

    def existing_directories(self) -> list[str]:
        """The guarded directories that exist, whose entries ``deep`` records: not a repository's own directory
        (its objects and refs are git's business; what in it is guarded is guarded by name)."""
        return [p for p, m in self.marks.items()
                if m is not None and m[0] == "dir" and self.roles[p] == GUARDED and p not in self.gitdirs]

    def repositories(self) -> list[str]:
        """The repository directories (``.git`` and each submodule's) that are directories."""
        return [p for p in self.gitdirs if (self.marks.get(p) or ("",))[0] == "dir"]

    def _inside_a_root(self, real: str) -> bool:
        return any(guarded.inside(real, r) and real != r for r in self.roots)

    def read_only(self) -> list[str]:
        """The existing guarded paths, resolved, inside a writable directory: each bound read-only. A
        repository's directory is not one of them (git writes there): it is a container."""
        if self.bound is None:
            self.bound = self._read_only()
        return list(self.bound)

    def _read_only(self) -> list[str]:
        repositories = set(self.repositories())
        out: list[str] = []
        for path, mark in self.marks.items():
            if mark is None or self.roles[path] != GUARDED or path in repositories:
                continue
            real = self.resolve(path)
            if self._inside_a_root(real) and real not in out:
                out.append(real)
        return out

    def containers(self) -> list[str]:
        """The directories that hold the read-only paths inside the writable ones, and each repository
        directory: each bound to itself for the call, shallowest first."""
        read_only = self.read_only()
        out = guarded.containers(read_only, self.roots)
        for gitdir in self.repositories():
            real = self.resolve(gitdir)
            if self._inside_a_root(real) and not any(guarded.inside(real, p) for p in read_only):
                out.append(real)
        return sorted(dict.fromkeys(out), key=lambda p: (_depth(p), p))

    # -- after the command ---------------------------------------------------------------------------

    def settle(self, state_dir: str | os.PathLike[str] | None, call_id: str) -> list[dict[str, str]]:
        """Set aside what the command left at guarded paths (see the module's promises); what was done with
        each, in order. Runs once: the same list is returned after."""
        if self.settled is not None:
            return self.settled
        settled: list[dict[str, str]] = []
        self.settled = settled
        destination = _destination(state_dir, call_id)
        seen: set[str] = set()
        for root in self.roots:  # innermost first: each path is judged beneath the root nearest to it
            try:
                root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                settled += self._settle_root(root, root_fd, destination, seen)
            finally:
                os.close(root_fd)
        return settled

    def _changed(self, path: str, role: str, now: Mark | None) -> bool:
        """Whether what is at ``path`` now is the command's to judge: on the way to a guarded path, a link
        that was not there; at or beneath one, something where nothing was (``deep``: or another thing, or
        the same changed)."""
        if now is None:
            return False
        before = self.marks.get(path)
        if role == WAY:
            return now[0] == "link" and not _same(before, now)
        return before is None or (self.deep and not _same(before, now))

    def _anything_changed(self, roles: dict[str, str]) -> bool:
        """Whether a path of ``roles`` may have changed, by plain ``lstat``: it agrees with the lookup beneath
        the root that settle() judges by unless a link on the way leads out of the root, where that lookup
        finds nothing, so nothing found unchanged here is changed there. Nothing beneath a path that is
        absent now is looked at, nor (without ``deep``) a guarded path that existed: only what was absent is
        judged."""
        absent: set[str] = set()  # every directory on the way to a path is in roles, shallower
        for path in sorted(roles, key=_depth):
            role = roles[path]
            if path.rpartition("/")[0] in absent:
                absent.add(path)
                continue
            if not self.deep and role == GUARDED and self.marks.get(path) is not None:
                continue
            now = mark_of(path)
            if now is None:
                absent.add(path)
            elif self._changed(path, role, now):
                return True
        return False

    def _settle_root(self, root: str, root_fd: int, destination: str | None,
                     seen: set[str]) -> list[dict[str, str]]:
        roles = {p: role for p, role in self.roles.items() if guarded.inside(p, root) and p != root}
        paths, repositories = _guarded(root, self.protected)
        for path in paths:  # what the files show now: a submodule directory made by the command, say
            for step in _on_the_way(path, root):
                roles.setdefault(step, WAY)
            roles[path] = GUARDED
        if self.deep:
            found: dict[str, Mark] = {}
            budget = [MAX_ENTRIES]
            for path in self.existing_directories():
                if guarded.inside(path, root):
                    _walk(path, budget, found)
            for path in found:
                roles.setdefault(path, ENTRY)
        if not self._anything_changed(roles):
            return []
        gitdirs = [*self.gitdirs, *repositories]
        done: list[str] = []
        out: list[dict[str, str]] = []
        for path in sorted(roles, key=lambda p: (_depth(p), p)):
            if path in seen or any(guarded.inside(path, d) for d in done):
                continue  # judged beneath an inner root already, or beneath something set aside
            seen.add(path)
            now = _beneath_mark(root_fd, root, path)  # None: gone, or only reachable through a link out of the root
            if now is None or not self._changed(path, roles[path], now) or _inert(root_fd, root, path, now, gitdirs):
                continue
            out.append(_set_aside(root_fd, root, path, destination))
            done.append(path)
        return out


# -- reaching a path beneath its writable directory, and setting it aside ----------------------------


def _parent_fd(root_fd: int, root: str, path: str) -> tuple[int, str]:
    """A descriptor of ``path``'s directory, resolved beneath ``root`` (links followed only while they stay
    inside it), and the last component. The caller closes the descriptor."""
    relative = path[len(root.rstrip("/")) + 1:]
    parent, _, name = relative.rpartition("/")
    if not parent:
        return os.dup(root_fd), name
    return linux.openat2(root_fd, parent, os.O_PATH | os.O_DIRECTORY), name


def _beneath_mark(root_fd: int, root: str, path: str) -> Mark | None:
    try:
        fd, name = _parent_fd(root_fd, root, path)
    except OSError:
        return None
    try:
        return _mark(os.lstat(name, dir_fd=fd))
    except OSError:
        return None
    finally:
        os.close(fd)


def _inert(root_fd: int, root: str, path: str, now: Mark, gitdirs: Sequence[str]) -> bool:
    if not any(guarded.inside(path, g) for g in gitdirs):
        return False
    entries: list[tuple[str, str]] = []
    content: bytes | None = None
    try:
        if now[0] in ("dir", "file"):
            fd, name = _parent_fd(root_fd, root, path)
            try:
                flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                opened = os.open(name, flags | (os.O_DIRECTORY if now[0] == "dir" else os.O_RDONLY), dir_fd=fd)
            finally:
                os.close(fd)
            try:
                if now[0] == "dir":
                    with os.scandir(opened) as listing:
                        for entry in listing:
                            entries.append((entry.name, _kind(entry.stat(follow_symlinks=False).st_mode)))
                            if len(entries) > MAX_ENTRIES:
                                return False
                elif path.endswith("/config"):
                    content = os.read(opened, guarded.MAX_GIT_CONFIG_BYTES + 1)
            finally:
                os.close(opened)
    except OSError:
        return False
    return guarded.inert(path, gitdirs, now[0], entries, content)


_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]")


def _destination(state_dir: str | os.PathLike[str] | None, call_id: str) -> str | None:
    if state_dir is None:
        return None
    name = _SAFE_ID.sub("_", call_id)[:64] or "call"
    return os.path.join(os.fspath(state_dir), SET_ASIDE, name)


def _set_aside(root_fd: int, root: str, path: str, destination: str | None) -> dict[str, str]:
    try:
        fd, name = _parent_fd(root_fd, root, path)
    except OSError as exc:
        return {"path": path, "left": f"cannot be reached beneath {root}: {exc.strerror}"}
    try:
        if destination is not None:
            target = _free(os.path.join(destination, path.lstrip("/")))
            try:
                os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
                target_fd = os.open(os.path.dirname(target), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                return _remove(fd, name, path, f"the session's state directory cannot take it ({exc.strerror})")
            try:
                os.rename(name, os.path.basename(target), src_dir_fd=fd, dst_dir_fd=target_fd)
                return {"path": path, "moved_to": target}
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    return _remove(fd, name, path, f"it could not be moved ({exc.strerror})")
                budget = [MAX_ENTRIES, COPY_BYTES]
                try:
                    _copy(fd, name, target_fd, os.path.basename(target), budget)
                except (OSError, _TooLarge) as problem:
                    _discard(target_fd, os.path.basename(target))
                    why = "too large to keep" if isinstance(problem, _TooLarge) else f"not copied ({problem})"
                    return _remove(fd, name, path, f"another file system, and {why}")
                outcome = _remove(fd, name, path, "")
                return {"path": path, "moved_to": target} if "removed" in outcome else outcome
            finally:
                os.close(target_fd)
        return _remove(fd, name, path, "no state directory to keep it in")
    finally:
        os.close(fd)


def _free(target: str) -> str:
    candidate, n = target, 1
    while os.path.lexists(candidate):
        n += 1
        candidate = f"{target}.{n}"
    return candidate


def _remove(dir_fd: int, name: str, path: str, why: str) -> dict[str, str]:
    try:
        if stat.S_ISDIR(os.lstat(name, dir_fd=dir_fd).st_mode):
            shutil.rmtree(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)
    except OSError as exc:
        return {"path": path, "left": f"{why}; and it could not be removed ({exc.strerror})".lstrip("; ")}
    return {"path": path, "removed": why or "copied"}


def _discard(dir_fd: int, name: str) -> None:
    try:
        _remove(dir_fd, name, name, "")
    except OSError:
        pass


class _TooLarge(Exception):
    pass


def _copy(src_dir: int, name: str, dst_dir: int, new: str, budget: list[int]) -> None:
    """Copy ``name`` (beneath ``src_dir``, links copied as links) to ``new`` beneath ``dst_dir`` while
    ``budget`` (entries, bytes) lasts; devices, sockets and pipes are left out."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge()
    info = os.lstat(name, dir_fd=src_dir)
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(name, dir_fd=src_dir), new, dir_fd=dst_dir)
    elif stat.S_ISREG(info.st_mode):
        source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
        try:
            target = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
            try:
                while chunk := os.read(source, 1 << 20):
                    budget[1] -= len(chunk)
                    if budget[1] < 0:
                        raise _TooLarge()
                    os.write(target, chunk)
            finally:
                os.close(target)
        finally:
            os.close(source)
    elif stat.S_ISDIR(info.st_mode):
        os.mkdir(new, 0o700, dir_fd=dst_dir)
        source = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_dir)
        target = os.open(new, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dst_dir)
        try:
            for child in os.listdir(source):
                _copy(source, child, target, child, budget)
        finally:
            os.close(source)
            os.close(target)


def summary(entries: Sequence[dict[str, str]]) -> list[dict[str, Any]]:
    """What a call's result lists under ``sandbox.set_aside``."""
    return [dict(entry) for entry in entries]
