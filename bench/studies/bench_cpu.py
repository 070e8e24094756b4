"""Where a call's CPU goes: CPU time per ``read`` call of a 4 KiB file, process by process.

Runs ``--calls`` back-to-back ``session.call("read", ...)`` after a warm-up and prints, per call, the
wall time and the CPU time (user + system, and the system part alone) of the client, the supervisor,
the forkserver and the workers (children reaped by the forkserver: ``cutime + cstime`` of its
``/proc/<pid>/stat``, which include each worker's fork, standby warm-up, call and exit; and the
workers still alive, which serve one call after another, with what they reaped). Next to the
wall time it prints the time to start ``/bin/cat`` on the file, measured in the same run: on two
cores a call whose processes use more than twice that in CPU cannot be as fast as starting ``cat``.

Run: ``python bench/studies/bench_cpu.py [--calls N]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

import psutil

import peon

TICKS = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parents[2]
# Run in a fresh interpreter: fork and exit at once, N times; print the medians as JSON.
FORK_FLOOR = """
import gc, json, os, resource, statistics, sys, time
sys.path.insert(0, sys.argv[2])
for name in sys.argv[3:]:
    __import__(name)
gc.freeze()
wall, cpu, faults = [], [], []
for _ in range(int(sys.argv[1])):
    r, w = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        os.write(w, f"{usage.ru_utime + usage.ru_stime} {usage.ru_minflt}".encode())
        os._exit(0)
    seen = os.read(r, 64).split()
    os.waitpid(pid, 0)
    wall.append(time.perf_counter() - started)
    cpu.append(float(seen[0]))
    faults.append(int(seen[1]))
    os.close(r)
    os.close(w)
print(json.dumps([statistics.median(wall), statistics.median(cpu), statistics.median(faults), len(sys.modules)]))
"""
FORKSERVER_MODULES = ["peon.workers.forkserver", "peon.workers.worker", "peon.workers.runner", "peon.tools",
                      "multiprocessing.forkserver"]


def fork_floor(forks: int, flags: list[str], modules: list[str]) -> tuple[float, float, float, int]:
    """(wall, child CPU, child page faults, modules loaded) of a fork and exit, medians."""
    out = subprocess.run([sys.executable, *flags, "-c", FORK_FLOOR, str(forks), str(ROOT), *modules],
                         stdout=subprocess.PIPE, check=True, text=True).stdout
    wall, cpu, faults, count = json.loads(out)
    return wall, cpu, faults, count


class Cpu(NamedTuple):
    user: float  # seconds
    system: float  # seconds in the kernel: for a worker mostly its fork's page tables, copy-on-write faults and exit


def own_and_reaped_cpu(pid: int) -> tuple[Cpu, Cpu]:
    """(CPU of ``pid`` itself, CPU of the children it has reaped)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) / TICKS for x in fields[11:15])
    return Cpu(utime, stime), Cpu(cutime, cstime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--forks", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="peon-bench-cpu-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        path = workspace / "f.txt"
        path.write_text(("x" * 99 + "\n") * 41)
        cat = []
        for _ in range(50):
            started = time.perf_counter()
            subprocess.run(["/bin/cat", str(path)], stdout=subprocess.PIPE, check=True)
            cat.append(time.perf_counter() - started)
        with peon.Session(workspace, {"approval": {"read_only": "allow"}}, state_dir=Path(tmp) / "state") as session:
            for _ in range(30):
                session.call("read", {"path": "f.txt"})
            supervisor = session.supervisor_pid
            forkservers = [p.pid for p in psutil.Process(supervisor).children()
                           if "forkserver" in " ".join(p.cmdline())]

            def sample() -> dict[str, Cpu]:
                me = psutil.Process().cpu_times()
                figures = {"client": Cpu(me.user, me.system)}
                figures["supervisor"], _ = own_and_reaped_cpu(supervisor)
                if forkservers:
                    figures["forkserver"], reaped = own_and_reaped_cpu(forkservers[0])
                    alive = [own_and_reaped_cpu(child.pid) for child in psutil.Process(forkservers[0]).children()]
                    figures["workers"] = Cpu(reaped.user + sum(own.user + their.user for own, their in alive),
                                             reaped.system + sum(own.system + their.system for own, their in alive))
                return figures

            before = sample()
            started = time.perf_counter()
            for _ in range(args.calls):
                assert session.call("read", {"path": "f.txt"}).ok
            wall = (time.perf_counter() - started) / args.calls
            after = sample()
    print(f"{args.calls} back-to-back read calls of a 4 KiB file (containment and sandbox as configured)")
    print(f"  wall per call (mean)           {1000 * wall:6.2f} ms; starting /bin/cat on it: "
          f"{1000 * statistics.median(cat):.2f} ms (median of 50)")
    total = kernel = 0.0
    for name in before:
        user, system = ((a - b) / args.calls for a, b in zip(after[name], before[name], strict=True))
        total, kernel = total + user + system, kernel + system
        print(f"  CPU per call, {name:16s} {1000 * (user + system):6.2f} ms (in the kernel {1000 * system:.2f})")
    print(f"  CPU per call, all processes    {1000 * total:6.2f} ms (in the kernel {1000 * kernel:.2f}; "
          f"{total / wall:.2f} cores busy while calls run back to back)")
    cat_ms = 1000 * statistics.median(cat)
    print(f"the floor of a worker per call: fork + exit of a CPython process, median of {args.forks} "
          f"(the child's CPU and page faults at its first instruction)")
    for label, flags, modules in (("bare interpreter (-I -S)", ["-I", "-S"], []),
                                  ("with the forkserver's modules", [], FORKSERVER_MODULES)):
        fork_wall, fork_cpu, faults, count = fork_floor(args.forks, flags, modules)
        print(f"  {label:32s} {1000 * fork_wall:6.2f} ms = {1000 * fork_wall / cat_ms:.2f}x starting /bin/cat "
              f"({1000 * fork_cpu:.2f} ms CPU, {faults:.0f} faults; {count} modules)")


if __name__ == "__main__":
    main()
