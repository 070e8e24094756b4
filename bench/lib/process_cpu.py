"""CPU time by process, read from ``/proc``: a process alone, a process tree (alive and reaped), and the roles
of a Peon session's processes (front end, supervisor, forkserver, workers with their commands) or of the
peer servers. Figures are in seconds, in clock ticks (``SC_CLK_TCK``): a measurement needs enough calls
for its ticks to mean something."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

TICKS = os.sysconf("SC_CLK_TCK")


def stat_cpu(pid: int) -> tuple[float, float]:
    """(own CPU, CPU of the children it reaped) of ``pid``, in seconds; (0, 0) once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    utime, stime, cutime, cstime = (int(x) / TICKS for x in fields[11:15])
    return utime + stime, cutime + cstime


def children(pid: int) -> list[int]:
    """The children of ``pid``, from each of its threads' ``/proc/<pid>/task/<tid>/children``: a few small
    reads, where ``psutil.Process.children`` reads every process of the machine. A sample of 64
    sessions' trees took seconds that way, the agents' event loop waiting on it."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            found += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def tree_cpu(pid: int) -> float:
    """CPU of ``pid`` and everything below it, alive or reaped by a member (a process reaped by one
    that is gone is in that one's parent's count)."""
    own, reaped = stat_cpu(pid)
    return own + reaped + sum(tree_cpu(child) for child in children(pid))


def cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


class PeonCpu:
    """CPU by role for Peon's processes: front ends, supervisors (alone), forkservers (alone), workers
    with their commands (every child of a forkserver, alive or reaped)."""

    def __init__(self, fronts: list[int], supervisors: list[int]):
        self.fronts = fronts
        self.supervisors = supervisors

    @property
    def forkservers(self) -> list[int]:
        """Looked up at each sample: a session starts its forkserver after it answered ``ready``."""
        return [child for sup in self.supervisors for child in children(sup)
                if "forkserver" in " ".join(cmdline(child))]

    def sample(self) -> dict[str, float]:
        figures = {"front end": sum(stat_cpu(pid)[0] for pid in self.fronts) if self.fronts else 0.0,
                   "supervisors": sum(stat_cpu(pid)[0] for pid in self.supervisors),
                   "forkservers": 0.0, "workers": 0.0}
        for forkserver in self.forkservers:
            own, reaped = stat_cpu(forkserver)
            figures["forkservers"] += own
            figures["workers"] += reaped + sum(tree_cpu(worker) for worker in children(forkserver))
        if not self.fronts:
            del figures["front end"]
        return figures


class TreeCpu:
    """CPU of whole process trees under one role each (the peers: a server and what it started)."""

    def __init__(self, roles: dict[str, list[int]]):
        self.roles = roles

    def sample(self) -> dict[str, float]:
        return {role: sum(tree_cpu(pid) for pid in pids) for role, pids in self.roles.items()}


def client_cpu() -> float:
    times = os.times()
    return times.user + times.system
