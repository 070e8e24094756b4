"""Per-call resource limits: resident memory and process count.

Promise: :func:`watch` returns the name of the first limit a call's processes exceed — ``"memory"``
(``limits.memory_max_bytes``) or ``"processes"`` (``limits.max_processes``) — within one sampling
interval of the moment it is exceeded; the runner then kills the call's tree and says which limit.
Sampling stops shortly before the call's deadline (``until``): the kill at the deadline comes within
that interval anyway, and a sample of a large tree then would only delay it (one of a 300-process
tree takes 20-30 ms), so a limit crossed in those last moments is reported as the timeout.

Where the worker's cgroup has the memory and pids controllers, the kernel enforces the limits
(``memory.max``, ``pids.max``, set by the supervisor) and :class:`CgroupProbe` reads their event
counters. Otherwise :class:`TreeProbe` samples the tree with psutil: it counts the living processes
below the worker and sums their resident memory (RSS, so pages shared between forked processes count
once per process — the estimate errs on the high side).

The watchdog runs only while a call's process runs: an idle session samples nothing.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from pathlib import Path

from peon.workers import proctree

SAMPLE_INTERVAL_SECONDS = 0.05

# The cgroup the worker of this process serves in, set by the worker when it joins one.
CGROUP: Path | None = None


@dataclass(frozen=True)
class ResourceLimits:
    memory_bytes: int
    processes: int


def _counter(path: Path, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


class TreeProbe:
    def __init__(self, limits: ResourceLimits, root: int):
        self.limits = limits
        self.root = root

    def pids(self) -> list[int]:
        """The processes sampled: everything below ``root``."""
        return proctree.descendants(self.root)

    def check(self) -> str | None:
        import psutil  # here: loaded by the few calls that run long enough to be sampled

        members = []
        for pid in self.pids():
            try:
                process = psutil.Process(pid)
                if process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                    members.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if len(members) > self.limits.processes:
            return "processes"
        resident = 0
        for process in members:
            try:
                resident += process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return "memory" if resident > self.limits.memory_bytes else None

    def kernel_verdict(self) -> str | None:
        """What the kernel refused or killed; a sampled tree has no such record."""
        return None


class CgroupProbe:
    """Reads the kernel's verdicts for the controllers the cgroup has; samples the tree for the rest.
    Counters are taken relative to their values when the probe was made."""

    def __init__(self, limits: ResourceLimits, group: Path, root: int):
        self.group = group
        self.has_memory = (group / "memory.events").exists()
        self.has_pids = (group / "pids.events").exists()
        self.fallback = TreeProbe(limits, root)
        self._oom_base = _counter(group / "memory.events", "oom_kill") if self.has_memory else 0
        self._max_base = _counter(group / "pids.events", "max") if self.has_pids else 0

    def kernel_verdict(self) -> str | None:
        if self.has_memory and _counter(self.group / "memory.events", "oom_kill") > self._oom_base:
            return "memory"
        if self.has_pids and _counter(self.group / "pids.events", "max") > self._max_base:
            return "processes"
        return None

    def check(self) -> str | None:
        verdict = self.kernel_verdict()
        if verdict is not None or (self.has_memory and self.has_pids):
            return verdict
        verdict = self.fallback.check()
        if (verdict == "memory" and self.has_memory) or (verdict == "processes" and self.has_pids):
            return None  # the kernel owns that limit
        return verdict


def probe_for(limits: ResourceLimits, root: int) -> TreeProbe | CgroupProbe:
    return CgroupProbe(limits, CGROUP, root) if CGROUP is not None else TreeProbe(limits, root)


async def watch(probe: TreeProbe | CgroupProbe, until: float = math.inf) -> str:
    while True:
        await asyncio.sleep(SAMPLE_INTERVAL_SECONDS)  # nothing can have grown before the first interval
        if time.monotonic() >= until:
            await asyncio.get_running_loop().create_future()  # no more samples: the runner cancels this
        verdict = probe.check()
        if verdict is not None:
            return verdict
