"""cgroup v2: a session's cgroup (its workers below it), killed as a whole with ``cgroup.kill``.

Promise: :func:`probe` says whether this process may create cgroups below its own cgroup v2 and why
not when it may not (no cgroup2 mount, no permission, a kernel without ``cgroup.kill``). A
:class:`Cgroup` kill is atomic with respect to forking: the kernel kills every member, including
ones created while the kill runs. :meth:`Cgroup.kill_and_remove` returns only when the cgroup is
empty and removed, or says it could not within its timeout; it may run from several threads or
processes at once on the same tree (a cgroup that vanishes meanwhile counts as removed).
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path


def cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    return Path(left.split()[4])
    except OSError:
        return None
    return None


def own_cgroup_path() -> str | None:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                hierarchy, _, rest = line.rstrip("\n").partition(":")
                controllers, _, path = rest.partition(":")
                if hierarchy == "0" and controllers == "":
                    return path
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class CgroupSupport:
    available: bool
    parent: Path | None  # where session cgroups are created
    reason: str


def probe() -> CgroupSupport:
    mount = cgroup2_mount()
    if mount is None:
        return CgroupSupport(False, None, "no cgroup2 filesystem is mounted")
    own = own_cgroup_path()
    if own is None:
        return CgroupSupport(False, None, "this process is not in a cgroup v2 hierarchy")
    parent = mount / own.lstrip("/")
    test = parent / f"peon-probe-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.mkdir(test)
    except OSError as exc:
        return CgroupSupport(False, None, f"cannot create a cgroup in {parent}: {exc.strerror}")
    try:
        if not (test / "cgroup.kill").exists():
            return CgroupSupport(False, None, "the kernel has no cgroup.kill (Linux 5.14 or newer is needed)")
        try:
            with open(test / "cgroup.procs", "w") as f:
                f.write("0")
            with open(parent / "cgroup.procs", "w") as f:
                f.write("0")
        except OSError as exc:
            return CgroupSupport(False, None, f"cannot move processes between cgroups in {parent}: {exc.strerror}")
        return CgroupSupport(True, parent, f"cgroup v2 below {parent}")
    finally:
        try:
            os.rmdir(test)
        except OSError:
            pass


def session_cgroup_name(session_id: str, supervisor_pid: int) -> str:
    """The name of a session's cgroup (below the supervisor's own cgroup), which its client can
    compute too: to clean up after a supervisor that died before it said where its cgroup is."""
    return f"peon-{session_id[:16]}-{supervisor_pid}"


def session_cgroup_path(session_id: str, supervisor_pid: int) -> Path | None:
    """Where a supervisor started by this process made its session cgroup, if cgroup v2 is mounted."""
    mount, own = cgroup2_mount(), own_cgroup_path()
    if mount is None or own is None:
        return None
    return mount / own.lstrip("/") / session_cgroup_name(session_id, supervisor_pid)


class Cgroup:
    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, path: Path) -> Cgroup:
        os.mkdir(path)
        return cls(path)

    def child(self, name: str) -> Cgroup:
        return Cgroup.create(self.path / name)

    def write(self, name: str, value: str, *, missing_ok: bool = False) -> None:
        try:
            with open(self.path / name, "w") as f:
                f.write(value)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def enable_controllers(self, wanted: tuple[str, ...]) -> tuple[str, ...]:
        """Enable what it can of ``wanted`` for this cgroup's children; returns what is enabled."""
        try:
            with open(self.path / "cgroup.controllers") as f:
                available = set(f.read().split())
        except OSError:
            return ()
        enabled = []
        for name in wanted:
            if name in available:
                try:
                    self.write("cgroup.subtree_control", f"+{name}")
                    enabled.append(name)
                except OSError:
                    pass
        return tuple(enabled)

    def add(self, pid: int) -> None:
        with open(self.path / "cgroup.procs", "w") as f:
            f.write(str(pid))

    def all_pids(self) -> list[int]:
        """The members of this cgroup and of every cgroup below it."""
        found: list[int] = []
        for directory, _, _ in os.walk(self.path):
            found.extend(Cgroup(Path(directory)).pids())
        return found

    def pids(self) -> list[int]:
        try:
            with open(self.path / "cgroup.procs") as f:
                return [int(line) for line in f if line.strip()]
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENODEV):
                return []
            raise

    def populated(self) -> bool:
        try:
            with open(self.path / "cgroup.events") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "populated":
                        return value.strip() == "1"
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENODEV):
                return False
            raise
        return False

    def kill(self) -> None:
        """``cgroup.kill``: the kernel kills every member, also ones forked while it runs. A cgroup
        that is gone (or going: ``ENODEV``) has nothing left to kill."""
        try:
            with open(self.path / "cgroup.kill", "w") as f:
                f.write("1")
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENODEV):
                raise

    def remove_now(self) -> bool:
        """One attempt, never waiting: kill what is inside, remove the tree if it is empty. True when
        the cgroup is gone."""
        if self.populated():
            self.kill()
            return False
        return self._remove_tree()

    def kill_and_remove(self, timeout: float = 5.0) -> bool:
        """Kill every member (and every descendant cgroup's), wait until empty, remove the tree.
        Safe to run from several threads or processes at once on the same tree: whoever removes a
        cgroup first wins, the others see it gone."""
        until = time.monotonic() + timeout
        delay = 0.0002
        while True:
            if self.remove_now():
                return True
            if time.monotonic() >= until:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

    def _remove_tree(self) -> bool:
        """Remove the empty cgroups of this tree, deepest first; False while one is still busy."""
        for directory, _, _ in sorted(os.walk(self.path, topdown=False), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    return False
                if exc.errno == errno.ENODEV:
                    continue
                raise
        return True
