"""How the supervisor contains and kills a worker's process tree.

Promise: after :meth:`Containment.kill_tree` no process of that worker's tree is running — not one
that was forking while the kill ran, not one that moved itself out of the worker's cgroup (a root
command can write its pid into any cgroup) — because both mechanisms are used: the cgroup, and the
process tree, which holds every descendant since workers are child subreapers. :meth:`Containment.release`
leaves nothing of the worker behind (no process, no cgroup); it never waits, so it never stalls the
supervisor's event loop (:func:`retry_release` tries again, on the loop, while a cgroup is still
emptying). Two implementations, chosen once per session:

* :class:`CgroupContainment` — the process-tree sweep, plus a per-session cgroup v2: the workers are
  born in its ``workers`` cgroup (the kernel's limits and OOM accounting for the running call; one
  ``cgroup.kill`` for the whole session when it ends, or when its supervisor died);
* :class:`ProcessTreeContainment` — the fallback: the process-tree sweep alone (process groups killed
  whole, listed again until nothing below the worker is alive).

A session in cgroup mode also removes, once, as its first worker starts (off the event loop, after
``ready``), the empty cgroups that sessions whose supervisor is gone left beside its own, and ends
sessions abandoned for good (supervisor stopped, client gone) (:func:`peon.workers.cgroup.remove_leftovers`:
on evidence, never a live session's), and says so on stderr.

Workers share one cgroup rather than one each because every placement of a process in a cgroup is
a migration, and a migration waits for an RCU grace period: 8 ms on the idle 2-core development
machine, 11 ms (and 10-67 ms measured inside a starting worker) under load, on the path of every
call's worker. The forkserver joins ``workers`` once, and every worker is forked into it (fork keeps
the cgroup): no migration per call. Calls run one at a time, so the cgroup's limits (the configured
ones plus a small reserve for the forkserver and the standbys) and its OOM counter are the running
call's.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from peon.core.errors import ConfigError
from peon.workers import cgroup, proctree
from peon.workers.limits import SAMPLE_INTERVAL_SECONDS, ResourceLimits
from peon.workers.reaper import REAPER

RELEASE_RETRY_SECONDS = (0.001, 0.005, 0.02, 0.1, 0.5, 1.0, 2.0)  # a cgroup still emptying


@dataclass
class WorkerSlot:
    """Where one worker is contained."""

    name: str
    oom_base: int = 0  # the OOM-kill counter of the workers' cgroup when its call began


class Containment:
    kind = "abstract"
    description = ""

    def __init__(self) -> None:
        self._serial = itertools.count(1)

    def prepare(self) -> WorkerSlot:
        """A place for a worker about to start (called off the event loop)."""
        return WorkerSlot(f"worker-{next(self._serial)}")

    def kill_tree(self, pid: int, slot: WorkerSlot | None = None) -> list[int]:
        """Kill the worker ``pid`` and everything below it; return what survived (stuck in the kernel).
        The worker is stopped first, so every descendant stays below it — one that left a cgroup too."""
        return proctree.kill_tree(pid, include_root=True, timeout=5.0)

    def release(self, slot: WorkerSlot) -> bool:
        """After the worker exited: True when nothing of it remains. Never waits; call again later
        while it returns False."""
        return True

    @property
    def workers_cgroup(self) -> str | None:
        """The cgroup the forkserver joins and forks every worker into, when there is one."""
        return None

    def begin_call(self, slot: WorkerSlot) -> None:
        """A call is about to run in the worker of ``slot``."""

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
                            *(f"{name}: watchdog sampling every {SAMPLE_INTERVAL_SECONDS * 1000:g} ms"
                              for name in watched)])
        return {"kind": self.kind, "description": self.description, "limits": limits}


class ProcessTreeContainment(Containment):
    kind = "process-tree"

    def __init__(self, reason: str):
        super().__init__()
        self.description = f"child subreaper + process groups + kill sweeps ({reason})"


class CgroupContainment(Containment):
    kind = "cgroup"
    # Beyond the configured limits, for what else lives in the workers' cgroup: the forkserver, the
    # standbys and a worker still exiting after its result.
    RESERVE_PROCESSES = 8
    RESERVE_MEMORY_BYTES = 256 << 20

    def __init__(self, parent: Path, name: str, limits: ResourceLimits):
        super().__init__()
        self.session = cgroup.Cgroup.create(parent / name)
        try:
            self.controllers = self.session.enable_controllers(("memory", "pids"))
            self.workers = self.session.child("workers")
            if "memory" in self.controllers:
                self.workers.write("memory.max", str(limits.memory_bytes + self.RESERVE_MEMORY_BYTES))
                self.workers.write("memory.swap.max", "0", missing_ok=True)
            if "pids" in self.controllers:
                self.workers.write("pids.max", str(limits.processes + self.RESERVE_PROCESSES))
        except BaseException:
            self.session.kill_and_remove()
            raise
        self.description = (f"cgroup v2 with cgroup.kill, the workers in {self.workers.path}, "
                            "and process-tree sweeps")
        self._leftovers_swept = False

    def prepare(self) -> WorkerSlot:
        if not self._leftovers_swept:  # the first worker start: after ready, on the forker thread
            self._leftovers_swept = True
            self.remove_leftovers()
        return super().prepare()

    def remove_leftovers(self) -> cgroup.LeftoverReport:
        """Remove the empty cgroups of sessions whose supervisor is gone beside this session's own."""
        report = cgroup.remove_leftovers(self.session.path.parent)
        if report.removed:
            print(f"peon-supervisor: removed {len(report.removed)} empty cgroup(s) left by sessions whose supervisor "
                  f"is gone: {', '.join(report.removed)}", file=sys.stderr)
        if report.ended:
            print(f"peon-supervisor: ended {len(report.ended)} abandoned session(s) (supervisor stopped, client gone) "
                  f"and removed their cgroups: {', '.join(report.ended)}", file=sys.stderr)
        for name, why in report.failed.items():
            print(f"peon-supervisor: cannot remove the leftover cgroup {name}: {why}", file=sys.stderr)
        return report

    @property
    def workers_cgroup(self) -> str | None:
        return str(self.workers.path)

    def _oom_kills(self) -> int:
        try:
            with open(self.workers.path / "memory.events") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def begin_call(self, slot: WorkerSlot) -> None:
        if "memory" in self.controllers:
            slot.oom_base = self._oom_kills()

    def oom_killed(self, slot: WorkerSlot | None) -> bool:
        return slot is not None and "memory" in self.controllers and self._oom_kills() > slot.oom_base

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


def start_time(pid: int) -> float | None:
    """When ``pid`` started (psutil's ``create_time``: the same number in every process of the machine),
    None if it is gone. With its pid it names one process: a pid reused later has another start time."""
    import psutil  # off the call's path: a worker's start, a client's clean-up

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


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


async def retry_release(release: Callable[[], bool], between: Callable[[], None] | None = None) -> bool:
    """Call ``release`` until it returns True: at once, then after each of :data:`RELEASE_RETRY_SECONDS`
    (the last processes of a cgroup take a moment to leave it), ``between`` after each failed try.
    False if it never did."""
    for delay in (0.0, *RELEASE_RETRY_SECONDS):
        if delay:
            await asyncio.sleep(delay)
        if release():
            return True
        if between is not None:
            between()
    return False
