"""cgroup v2 containment: each worker in its own cgroup, killed as a whole with ``cgroup.kill``.

Promise: :func:`probe` says whether this process may create cgroups below its own cgroup v2 and why
not when it may not (no cgroup2 mount, no permission, a kernel without ``cgroup.kill``). A
:class:`Cgroup` kill is atomic with respect to forking: the kernel kills every member, including
ones created while the kill runs. :meth:`Cgroup.kill_and_remove` returns only when the cgroup is
empty and removed, or says it could not within its timeout.
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


class Cgroup:
    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, path: Path) -> "Cgroup":
        os.mkdir(path)
        return cls(path)

    def child(self, name: str) -> "Cgroup":
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

    def pids(self) -> list[int]:
        try:
            with open(self.path / "cgroup.procs") as f:
                return [int(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def populated(self) -> bool:
        try:
            with open(self.path / "cgroup.events") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "populated":
                        return value.strip() == "1"
        except FileNotFoundError:
            return False
        return False

    def kill(self) -> None:
        try:
            with open(self.path / "cgroup.kill", "w") as f:
                f.write("1")
        except FileNotFoundError:
            pass

    def kill_and_remove(self, timeout: float = 5.0) -> bool:
        """Kill every member (and every descendant cgroup's), wait until empty, remove the tree."""
        until = time.monotonic() + timeout
        delay = 0.0002
        while True:
            if self.populated():
                self.kill()
            elif self._remove_tree():
                return True
            if time.monotonic() >= until:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

    def _remove_tree(self) -> bool:
        if not self.path.exists():
            return True
        for sub in sorted((p for p in self.path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                os.rmdir(sub)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    return False
                raise
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                return False
            raise
        return True
