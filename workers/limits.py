"""Per-call resource limits: resident memory and process count.

Promise: :func:`watch` returns the name of the first limit a call's processes exceed — ``"memory"``
(``limits.memory_max_bytes``) or ``"processes"`` (``limits.max_processes``) — within one sampling
interval of the moment it is exceeded; the runner then kills the call's tree and says which limit.

Where the worker's cgroup has the memory and pids controllers, the kernel enforces the limits
(``memory.max``, ``pids.max``, set by the supervisor) and :class:`CgroupProbe` reads their event
counters. Otherwise :class:`TreeProbe` samples the tree: it counts the living processes below the
worker and sums their resident memory (RSS, so pages shared between forked processes count once per
process — the estimate errs on the high side).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from . import proctree

SAMPLE_INTERVAL_SECONDS = 0.05
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class ResourceLimits:
    memory_bytes: int
    processes: int


def _resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


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

    def check(self) -> str | None:
        pids = proctree.alive(proctree.descendants(self.root))
        if len(pids) > self.limits.processes:
            return "processes"
        if sum(_resident_bytes(p) for p in pids) > self.limits.memory_bytes:
            return "memory"
        return None


class CgroupProbe:
    """Reads the kernel's verdicts for the controllers the cgroup has; samples the tree for the rest."""

    def __init__(self, limits: ResourceLimits, group: Path, root: int):
        self.group = group
        self.has_memory = (group / "memory.events").exists()
        self.has_pids = (group / "pids.events").exists()
        self.fallback = TreeProbe(limits, root)

    def check(self) -> str | None:
        if self.has_memory and _counter(self.group / "memory.events", "oom_kill") > 0:
            return "memory"
        if self.has_pids and _counter(self.group / "pids.events", "max") > 0:
            return "processes"
        if self.has_memory and self.has_pids:
            return None
        verdict = self.fallback.check()
        if verdict == "memory" and self.has_memory or verdict == "processes" and self.has_pids:
            return None  # the kernel owns that limit
        return verdict


async def watch(probe: TreeProbe | CgroupProbe) -> str:
    while True:
        await asyncio.sleep(SAMPLE_INTERVAL_SECONDS)  # nothing can have grown before the first interval
        verdict = probe.check()
        if verdict is not None:
            return verdict
