"""How the supervisor contains and kills a worker's process tree.

Promise: after :meth:`Containment.kill_tree` no process of that worker's tree is running — not one
that was forking while the kill ran, not one that moved itself out of the worker's cgroup (a root
command can write its pid into any cgroup) — because both mechanisms are used: the cgroup, and the
process tree, which holds every descendant since workers are child subreapers. A kill reaches one
worker's tree and nothing of another's: calls run side by side, each in a worker of its own, and a
runaway in one (a fork loop, a memory hog, a kill at its deadline) neither kills nor limits another.
:meth:`Containment.release` leaves nothing of the worker behind (no process, no cgroup); it never
waits, so it never stalls the supervisor's event loop (:func:`retry_release` tries again, on the loop,
while a cgroup is still emptying). Two implementations, chosen once per session:

* :class:`CgroupContainment` — the process-tree sweep, plus a per-session cgroup v2 in which each
  worker has a cgroup of its own, ``worker-<n>``, made as the worker starts (:meth:`Containment.prepare`,
  on the forker thread) and removed once it is gone: the kernel's limits (``memory.max``, ``pids.max``:
  the configured ones plus a small reserve for the worker itself), its OOM accounting and its
  ``cgroup.kill`` are one worker's, so one call's. The forkserver lives in ``forkserver`` beside them; a
  worker it forks moves itself into its own cgroup first thing, before it serves anything
  (:mod:`peon.workers.worker`), and fails to start rather than serve from elsewhere. One ``cgroup.kill``
  of the session's cgroup ends the whole session when it ends, or when its supervisor died;
* :class:`ProcessTreeContainment` — the fallback: the process-tree sweep alone (process groups killed
  whole, listed again until nothing below the worker is alive), which is per worker already.

A session in cgroup mode also removes, once, as its first worker starts (off the event loop, after
``ready``), the empty cgroups that sessions whose supervisor is gone left beside its own, and ends
sessions abandoned for good (supervisor stopped, client gone) (:func:`peon.workers.cgroup.remove_leftovers`:
on evidence, never a live session's), and says so on stderr. A session in either mode ends, at the same
moment, Peon's processes abandoned for good that no cgroup holds (:func:`end_abandoned`: stopped, their
session's client and supervisor gone — what process-tree containment leaves when both die at once).

Each worker moves into its cgroup once, as it starts, not per call: every placement of a process in a
cgroup is a migration, which waits for an RCU grace period (8 ms on the idle 2-core development machine,
11 ms and more under load), and a standby makes it while it waits for its first call. The commands a
call starts are born in their worker's cgroup (fork keeps the cgroup): no migration on a call's path.
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
from peon.workers import cgroup, orphans, proctree
from peon.workers.limits import SAMPLE_INTERVAL_SECONDS, ResourceLimits
from peon.workers.reaper import REAPER

RELEASE_RETRY_SECONDS = (0.001, 0.005, 0.02, 0.1, 0.5, 1.0, 2.0)  # a cgroup still emptying


@dataclass
class WorkerSlot:
    """Where one worker is contained."""

    name: str
    oom_base: int = 0  # the OOM-kill counter of its cgroup when its call began
    cgroup: Path | None = None  # the worker's own cgroup (cgroup containment)


class Containment:
    kind = "abstract"
    description = ""

    def __init__(self) -> None:
        self._serial = itertools.count(1)
        self._abandoned_swept = False

    def prepare(self) -> WorkerSlot:
        """A place for a worker about to start (called off the event loop). The first also ends the
        processes earlier sessions abandoned for good (:func:`end_abandoned`)."""
        if not self._abandoned_swept:
            self._abandoned_swept = True
            end_abandoned()
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
    def forkserver_cgroup(self) -> str | None:
        """The cgroup the forkserver joins (and forks every worker into, which then leaves it for its
        own), when there is one."""
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
    # Beyond the configured limits, for the worker itself in its cgroup: its interpreter and what a file
    # tool holds (an edit keeps a large file in memory several times over), its threads.
    RESERVE_PROCESSES = 8
    RESERVE_MEMORY_BYTES = 256 << 20

    def __init__(self, parent: Path, name: str, limits: ResourceLimits):
        super().__init__()
        self.limits = limits
        self.session = cgroup.Cgroup.create(parent / name)
        try:
            self.controllers = self.session.enable_controllers(("memory", "pids"))
            self.forkserver = self.session.child("forkserver")
        except BaseException:
            self.session.kill_and_remove()
            raise
        self.description = (f"cgroup v2 with cgroup.kill, each worker in a cgroup of its own below "
                            f"{self.session.path}, and process-tree sweeps")
        self._leftovers_swept = False

    def prepare(self) -> WorkerSlot:
        """The worker's own cgroup, made with its limits (on the forker thread, as the worker starts)."""
        if not self._leftovers_swept:  # the first worker start: after ready, on the forker thread
            self._leftovers_swept = True
            self.remove_leftovers()
        slot = super().prepare()
        group = cgroup.Cgroup.create(self.session.path / slot.name)
        try:
            if "memory" in self.controllers:
                group.write("memory.max", str(self.limits.memory_bytes + self.RESERVE_MEMORY_BYTES))
                group.write("memory.swap.max", "0", missing_ok=True)
            if "pids" in self.controllers:
                group.write("pids.max", str(self.limits.processes + self.RESERVE_PROCESSES))
        except BaseException:
            os.rmdir(group.path)
            raise
        slot.cgroup = group.path
        return slot

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
    def forkserver_cgroup(self) -> str | None:
        return str(self.forkserver.path)

    def kill_tree(self, pid: int, slot: WorkerSlot | None = None) -> list[int]:
        """The process tree first (the worker stopped, so a descendant that left the cgroup stays
        below it), then ``cgroup.kill`` of the worker's own cgroup, for anything still in it."""
        survivors = super().kill_tree(pid, slot)
        if slot is not None and slot.cgroup is not None:
            try:
                cgroup.Cgroup(slot.cgroup).kill()
            except OSError as exc:
                print(f"peon-supervisor: cannot kill the cgroup {slot.cgroup}: {exc.strerror}", file=sys.stderr)
        return survivors

    def release(self, slot: WorkerSlot) -> bool:
        """Remove the worker's cgroup once it is empty (what is still in it is killed first)."""
        if slot.cgroup is None:
            return True
        try:
            return cgroup.Cgroup(slot.cgroup).remove_now()
        except OSError as exc:
            print(f"peon-supervisor: cannot remove the cgroup {slot.cgroup}: {exc.strerror}", file=sys.stderr)
            return False

    @staticmethod
    def _oom_kills(slot: WorkerSlot) -> int:
        if slot.cgroup is None:
            return 0
        try:
            with open(slot.cgroup / "memory.events") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def begin_call(self, slot: WorkerSlot) -> None:
        if "memory" in self.controllers:
            slot.oom_base = self._oom_kills(slot)

    def oom_killed(self, slot: WorkerSlot | None) -> bool:
        return slot is not None and "memory" in self.controllers and self._oom_kills(slot) > slot.oom_base

    def close(self) -> None:
        self.session.kill_and_remove()

    def enforced_by_kernel(self) -> tuple[str, ...]:
        return self.controllers

    def info(self) -> dict:
        return {**super().info(), "cgroup": str(self.session.path)}


def end_abandoned() -> list[str]:
    """End Peon's processes that earlier sessions abandoned for good — stopped, their client and
    supervisor gone (:mod:`peon.workers.orphans`) — and say so on stderr."""
    try:
        ended = orphans.end_abandoned()
    except OSError as exc:
        print(f"peon-supervisor: cannot look for abandoned Peon processes: {exc.strerror}", file=sys.stderr)
        return []
    if ended:
        print(f"peon-supervisor: ended {len(ended)} Peon process(es) abandoned for good (stopped, their session's "
              f"client and supervisor gone) with everything below them: {', '.join(ended)}", file=sys.stderr)
    return ended


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
