"""Where the CPU of a call goes, by process and by kind: a machine-wide ``perf`` profile of calls.

Runs ``--calls`` back-to-back calls of one tool (``read`` of a 4 KiB file, or ``bash`` with ``true``)
through one session while ``perf record -a -g`` samples every CPU at ``--frequency`` Hz, then gives
each sample a role and a kind and prints the CPU per call of each (milliseconds of samples divided by
the calls):

* role: the client (this process), the supervisor, the forkserver, and a worker in each part of its
  life, told apart by the title it had when sampled — from its fork to its warm-up (it still has the
  forkserver's title), its warm-up, its wait as a standby, and its call through its exit (for
  ``bash``, the command it starts is counted with the worker); anything else on the machine is "other";
* kind: the process's own code ("user"), copy-on-write and other page faults, ``fork`` (copying the
  page tables), ``exit`` (tearing them down), ``exec``, a system call by name, or other kernel work.

It is the profile behind the figures of ``bench/studies/bench_cpu.py``: that one counts CPU time per
process, this one says what the time was spent on. Needs ``perf`` and permission to sample the whole
machine (root, or ``kernel.perf_event_paranoid`` ≤ 0); without them it says so and exits.

Run: ``python bench/suite/profile_call.py [--tool read|bash] [--calls 300] [--frequency 2000]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

import psutil

import peon

ALLOW = {"approval": {"read_only": "allow", "process": "allow"}}
CALLS = {"read": {"path": "f.txt"}, "bash": {"command": "true"}}
SYSCALL = re.compile(r"__(?:x64|se|do)_sys_(\w+)")


def role(comm: str, pid: int, client: int, supervisor: int, forkserver: int) -> str:
    if pid == 0:
        return "idle"
    if pid == client:
        return "client"
    if pid == supervisor:
        return "supervisor"
    if pid == forkserver:
        return "forkserver"
    if comm == "peon-forkserver":  # a worker keeps its forkserver's title until it sets its own
        return "worker: fork to warm-up"
    if comm.startswith("peon-worker"):  # titles are cut to 15 characters: "peon-worker rea"
        kind = comm.removeprefix("peon-worker ")
        return {"peo": "worker: warm-up", "sta": "worker: standby"}.get(kind[:3], "worker: call and exit")
    return "other"


def kind(frames: list[tuple[str, bool]]) -> str:
    """The kind of a sample, from its stack (innermost first; each frame: symbol, in the kernel)."""
    if not frames or not frames[0][1]:
        return "user"
    symbols = [symbol for symbol, in_kernel in frames if in_kernel]
    if "asm_exc_page_fault" in symbols:
        return "page faults"
    if "bprm_execve" in symbols:  # a command's exec (bash) drops the worker's copy of the address space
        return "exec"
    if "copy_process" in symbols or "dup_mmap" in symbols:
        return "fork"
    if "exit_mmap" in symbols or "do_exit" in symbols:
        return "exit"
    for symbol in symbols:
        if (match := SYSCALL.match(symbol)) is not None:
            return f"syscall {match.group(1)}"
    return "other kernel"


def samples(script: Iterable[str]) -> Iterable[tuple[str, int, list[tuple[str, bool]]]]:
    """(comm, pid, frames) of each sample of ``perf script -F comm,pid,ip,sym,dso`` output."""
    head: tuple[str, int] | None = None
    frames: list[tuple[str, bool]] = []
    for line in script:
        if not line.strip():
            if head is not None:
                yield head[0], head[1], frames
            head, frames = None, []
        elif head is None:
            comm, _, pid = line.rstrip().rpartition(" ")
            head = (comm.strip(), int(pid))
        else:
            parts = line.split(None, 1)
            rest = parts[1] if len(parts) > 1 else ""
            symbol, _, dso = rest.rpartition(" (")
            frames.append((symbol.split("+")[0], "kernel" in dso))
    if head is not None:
        yield head[0], head[1], frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", choices=sorted(CALLS), default="read")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--frequency", type=int, default=2000)
    options = parser.parse_args()
    if shutil.which("perf") is None:
        print("profile_call: perf is not installed (linux-tools); nothing measured")
        return
    with tempfile.TemporaryDirectory(prefix="peon-bench-profile-") as tmp:
        workspace, data = Path(tmp) / "ws", Path(tmp) / "perf.data"
        workspace.mkdir()
        (workspace / "f.txt").write_bytes(b"x" * 4096)
        env = {"HOME": tmp, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        with peon.Session(workspace, ALLOW, env=env, state_dir=Path(tmp) / "state") as session:
            for _ in range(30):
                assert session.call(options.tool, CALLS[options.tool]).ok
            supervisor = session.supervisor_pid
            forkserver = next(p.pid for p in psutil.Process(supervisor).children() if p.name() == "peon-forkserver")
            perf = subprocess.Popen(["perf", "record", "-a", "-g", "-F", str(options.frequency), "-o", str(data)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)  # perf is sampling
            if perf.poll() is not None:
                _, complaint = perf.communicate()
                print(f"profile_call: perf record cannot sample this machine: {complaint.strip()[-300:]}")
                return
            started = time.perf_counter()
            for _ in range(options.calls):
                assert session.call(options.tool, CALLS[options.tool]).ok
            wall = time.perf_counter() - started
            perf.send_signal(signal.SIGINT)
            perf.wait(60)
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,pid,ip,sym,dso"],
                                capture_output=True, text=True, check=True).stdout.splitlines()
    by_role: Counter[str] = Counter()
    by_kind: Counter[tuple[str, str]] = Counter()
    for comm, pid, frames in samples(script):
        who = role(comm, pid, os.getpid(), supervisor, forkserver)
        by_role[who] += 1
        by_kind[who, kind(frames)] += 1
    per_call = 1000 / options.frequency / options.calls  # ms of CPU per call for one sample
    print(f"{options.calls} back-to-back {options.tool} calls, {1000 * wall / options.calls:.2f} ms each; "
          f"perf at {options.frequency} Hz on {os.cpu_count()} CPUs (the sampling includes the 0.5 s before "
          f"the first call and perf's own cost)")
    print(f"{'process (role)':<26} {'CPU per call':>12}   of which")
    for who, count in by_role.most_common():
        kinds = sorted(((n, k) for (w, k), n in by_kind.items() if w == who), reverse=True)
        shown = ", ".join(f"{k} {n * per_call:.2f}" for n, k in kinds if n * per_call >= 0.05)
        print(f"{who:<26} {count * per_call:>9.2f} ms   {shown}")
    busy = sum(n for who, n in by_role.items() if who not in ("other", "idle"))
    print(f"{'all of the session':<26} {busy * per_call:>9.2f} ms")


if __name__ == "__main__":
    main()
