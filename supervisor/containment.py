"""How the supervisor contains and kills a worker's process tree.

Promise: after :meth:`Containment.kill_tree` no process of that worker's tree is running, even one
that was forking while the kill ran, and :meth:`Containment.release` leaves nothing of the worker
behind (no process, no cgroup). Two implementations, chosen once per session:

* :class:`CgroupContainment` — each worker in its own cgroup v2 below a per-session cgroup, killed
  with ``cgroup.kill``;
* :class:`ProcessTreeContainment` — the fallback: subreapers keep every descendant in the tree, and a
  freeze-then-kill sweep (``SIGSTOP`` everything, then ``SIGKILL``) means a fork loop cannot outrun it.
"""

from __future__ import annotations

import os
from pathlib import Path

from peon.errors import ConfigError
from workers import cgroup, proctree
from workers.limits import SAMPLE_INTERVAL_SECONDS, ResourceLimits


class Containment:
    kind = "abstract"
    description = ""

    def adopt(self, pid: int) -> None:
        """Take a freshly forked worker in, before it is given a call."""

    def worker_cgroup(self, pid: int) -> str | None:
        """The cgroup a worker's call runs in, when it has one (see :mod:`workers.treekill`)."""
        return None

    def kill_tree(self, pid: int) -> None:
        raise NotImplementedError

    def release(self, pid: int) -> bool:
        """Called after the worker exited: True when nothing of it remains."""
        raise NotImplementedError

    def oom_killed(self, pid: int) -> bool:
        return False

    def close(self) -> None:
        """Kill everything still contained (session end)."""

    def enforced_by_kernel(self) -> tuple[str, ...]:
        """Which per-call limits the kernel enforces ("memory", "pids"); the rest are watched."""
        return ()

    def info(self) -> dict:
        kernel = self.enforced_by_kernel()
        watched = [name for name in ("memory", "pids") if name not in kernel]
        limits = ", ".join([*(f"{name}: cgroup" for name in kernel),
                            *(f"{name}: watchdog sampling every {SAMPLE_INTERVAL_SECONDS * 1000:g} ms" for name in watched)])
        return {"kind": self.kind, "description": self.description, "limits": limits}


class ProcessTreeContainment(Containment):
    kind = "process-tree"

    def __init__(self, reason: str):
        self.description = f"child subreaper + process groups + freeze-then-kill sweeps ({reason})"

    def kill_tree(self, pid: int) -> None:
        proctree.freeze_and_kill(pid, include_root=True)

    def release(self, pid: int) -> bool:
        return True  # the worker swept its own tree; orphans are handled by the supervisor's sweep


class CgroupContainment(Containment):
    kind = "cgroup"

    def __init__(self, parent: Path, name: str, limits: ResourceLimits):
        self.session = cgroup.Cgroup.create(parent / name)
        self.limits = limits
        self.controllers = self.session.enable_controllers(("memory", "pids"))
        self.description = f"cgroup v2 with cgroup.kill, one cgroup per worker below {self.session.path}"
        self._workers: dict[int, cgroup.Cgroup] = {}

    def adopt(self, pid: int) -> None:
        group = self.session.child(f"worker-{pid}")
        self._workers[pid] = group
        if "memory" in self.controllers:
            group.write("memory.max", str(self.limits.memory_bytes))
            group.write("memory.swap.max", "0", missing_ok=True)
        if "pids" in self.controllers:
            group.write("pids.max", str(self.limits.processes + 1))  # + the worker itself
        group.child("tree").add(pid)

    def worker_cgroup(self, pid: int) -> str | None:
        group = self._workers.get(pid)
        return str(group.path / "tree") if group is not None else None

    def kill_tree(self, pid: int) -> None:
        group = self._workers.get(pid)
        if group is not None:
            group.kill()
        else:
            proctree.freeze_and_kill(pid, include_root=True)

    def release(self, pid: int) -> bool:
        group = self._workers.pop(pid, None)
        return group is None or group.kill_and_remove()

    def oom_killed(self, pid: int) -> bool:
        group = self._workers.get(pid)
        if group is None:
            return False
        try:
            with open(group.path / "memory.events") as f:
                return any(line.split()[0] == "oom_kill" and int(line.split()[1]) > 0 for line in f)
        except (OSError, ValueError, IndexError):
            return False

    def close(self) -> None:
        self.session.kill_and_remove()

    def enforced_by_kernel(self) -> tuple[str, ...]:
        return self.controllers

    def info(self) -> dict:
        return {**super().info(), "cgroup": str(self.session.path)}


def choose(mode: str, session_name: str, limits: ResourceLimits) -> Containment:
    if mode == "process-tree":
        return ProcessTreeContainment("configured")
    support = cgroup.probe()
    if support.available and support.parent is not None:
        try:
            return CgroupContainment(support.parent, session_name, limits)
        except OSError as exc:
            support = cgroup.CgroupSupport(False, None, f"cannot create the session cgroup: {exc.strerror}")
    if mode == "cgroup":
        raise ConfigError(f"runtime.containment is 'cgroup' but cgroup v2 is not usable here: {support.reason}")
    return ProcessTreeContainment(f"cgroup v2 unavailable: {support.reason}")


def sweep_orphans(known: set[int]) -> int:
    """Kill the tree of every child of this process that is not a known worker (reparented orphans)."""
    killed = 0
    for pid in proctree.children(os.getpid()):
        if pid not in known:
            killed += proctree.freeze_and_kill(pid, include_root=True)
    return killed
