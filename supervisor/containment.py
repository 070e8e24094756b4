"""How the supervisor contains and kills a worker's process tree.

Promise: after :meth:`Containment.kill_tree` no process of that worker's tree is running — not one
that was forking while the kill ran, not one that moved itself out of the worker's cgroup (a root
command can write its pid into any cgroup) — because both mechanisms are used: the cgroup, and the
process tree, which holds every descendant since workers are child subreapers. :meth:`Containment.release`
leaves nothing of the worker behind (no process, no cgroup); it never waits, so it never stalls the
supervisor's event loop. Two implementations, chosen once per session:

* :class:`CgroupContainment` — each worker in its own cgroup v2 below a per-session cgroup (limits,
  ``cgroup.kill``, OOM accounting), plus the process-tree sweep;
* :class:`ProcessTreeContainment` — the fallback: the process-tree sweep alone (process groups killed
  whole, listed again until nothing below the worker is alive).

A worker's cgroup is made before the worker exists (the pid is not known yet) and the worker joins it
itself, while it is still a standby: moving a process between cgroups waits for an RCU grace period
(about 8 ms on an idle machine), which must not sit on a call's path nor stall the supervisor.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

from peon.errors import ConfigError
from workers import cgroup, proctree
from workers.limits import SAMPLE_INTERVAL_SECONDS, ResourceLimits
from workers.reaper import REAPER


@dataclass
class WorkerSlot:
    """Where one worker is contained: its cgroup (None in process-tree mode)."""

    name: str
    group: cgroup.Cgroup | None = None

    @property
    def cgroup_path(self) -> str | None:
        return str(self.group.path) if self.group is not None else None


class Containment:
    kind = "abstract"
    description = ""

    def __init__(self) -> None:
        self._serial = itertools.count(1)

    def prepare(self) -> WorkerSlot:
        """A place for a worker about to start (called off the event loop: it may touch cgroupfs)."""
        return WorkerSlot(f"worker-{next(self._serial)}")

    def kill_tree(self, pid: int, slot: WorkerSlot | None) -> list[int]:
        """Kill the worker ``pid`` and everything below it; return what survived (stuck in the kernel).

        The tree first, with the worker stopped so that every descendant stays below it (one that left
        the cgroup included), then the cgroup, which holds nothing else unless something joined it."""
        survivors = proctree.kill_tree(pid, include_root=True, timeout=5.0)
        if slot is not None and slot.group is not None:
            slot.group.kill()
        return survivors

    def release(self, slot: WorkerSlot) -> bool:
        """After the worker exited: True when nothing of it remains. Never waits; call again later
        while it returns False."""
        return True

    def oom_killed(self, slot: WorkerSlot | None) -> bool:
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
        super().__init__()
        self.description = f"child subreaper + process groups + kill sweeps ({reason})"


class CgroupContainment(Containment):
    kind = "cgroup"

    def __init__(self, parent: Path, name: str, limits: ResourceLimits):
        super().__init__()
        self.session = cgroup.Cgroup.create(parent / name)
        try:
            self.limits = limits
            self.controllers = self.session.enable_controllers(("memory", "pids"))
        except BaseException:
            self.session.kill_and_remove()
            raise
        self.description = (f"cgroup v2 with cgroup.kill, one cgroup per worker below {self.session.path}, "
                            "and process-tree sweeps")

    def prepare(self) -> WorkerSlot:
        slot = super().prepare()
        group = self.session.child(slot.name)
        try:
            if "memory" in self.controllers:
                group.write("memory.max", str(self.limits.memory_bytes))
                group.write("memory.swap.max", "0", missing_ok=True)
            if "pids" in self.controllers:
                group.write("pids.max", str(self.limits.processes + 1))  # + the worker itself
        except BaseException:
            group.remove_now()
            raise
        slot.group = group
        return slot

    def release(self, slot: WorkerSlot) -> bool:
        return slot.group is None or slot.group.remove_now()

    def oom_killed(self, slot: WorkerSlot | None) -> bool:
        if slot is None or slot.group is None:
            return False
        try:
            with open(slot.group.path / "memory.events") as f:
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


def sweep_orphans(known: set[int]) -> list[int]:
    """Kill the tree of every child of this process that is not ``known`` (orphans reparented to this
    subreaper, or a process a command made someone else fork); return the pids that were swept."""
    swept = []
    for pid in proctree.children(os.getpid()):
        if pid not in known and proctree.state(pid) not in (None, "Z", "X"):
            proctree.kill_tree(pid, include_root=True, reap=REAPER.reap, timeout=5.0)
            swept.append(pid)
    REAPER.reap()
    return swept
