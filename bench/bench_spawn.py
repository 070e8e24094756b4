"""How a command call could start its command: the two designs for ``bash``, against ``bash -lc true`` alone.

Each design serves ``bash -lc true`` calls sent over a socket by this process, in a server process
that holds what a worker holds (the forkserver's modules, ``gc.freeze()``), back to back and 100 ms
apart, and reports wall time per call (median) and CPU per call (the server, everything it started
and reaped, and this process):

* ``spawn``: a long-lived worker ``posix_spawn``s ``/bin/bash -lc true`` in a new session (its own
  process group), waits for it through a pidfd and answers; nothing is forked per call;
* ``spawn+cgroup`` (where this process may create cgroups): the same, each call's command moved into a
  sub-cgroup of its own, made before and removed after it;
* ``fork``: a plain ``os.fork()`` of the preloaded image per call, a standby forked ahead with the call
  on its own socketpair; the standby ``posix_spawn``s the command as today's worker does, answers and
  exits; the next standby is forked after the answer;
* ``Session.call``: Peon's ``bash`` as built (a long-lived worker spawning the command, the whole
  supervisor path in front of it);
* ``bash -lc true`` started by this process with ``subprocess``: the baseline.

Run: ``python bench/bench_spawn.py [--calls 200] [--apart-calls 30]``
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import peon
from bench_agents import PeonCpu, client_cpu

ROOT = Path(__file__).resolve().parent.parent
MODULES = ["peon.workers.forkserver", "peon.workers.worker", "peon.workers.runner", "peon.tools",
           "multiprocessing.forkserver"]
GAP_SECONDS = 0.1
SERVER = r"""
import gc, os, resource, select, socket, sys
sys.path.insert(0, sys.argv[3])
for name in sys.argv[4:]:
    __import__(name)
gc.freeze()
sock = socket.socket(fileno=int(sys.argv[1]))
mode, cgroup = sys.argv[2], os.environ.get("BENCH_CGROUP")
env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8"}
serial = 0

def cpu():
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime

def run_command():
    global serial
    where = None
    if cgroup:
        serial += 1
        where = os.path.join(cgroup, f"call-{serial}")
        os.mkdir(where)
    pid = os.posix_spawn("/bin/bash", ["bash", "-lc", "true"], env, setsid=True)
    if where:
        with open(os.path.join(where, "cgroup.procs"), "w") as f:
            f.write(str(pid))
    fd = os.pidfd_open(pid)
    select.select([fd], [], [])
    os.waitid(os.P_PIDFD, fd, os.WEXITED)
    os.close(fd)
    if where:
        os.rmdir(where)

def standby():
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        sock.close()
        if not theirs.recv(64):
            os._exit(0)
        run_command()
        theirs.send(b"ok")
        os._exit(0)
    theirs.close()
    return pid, ours

ready = standby() if mode == "fork" else None
while True:
    request = sock.recv(64)
    if not request:
        break
    if request == b"cpu":
        sock.send(repr(cpu()).encode())
        continue
    if mode == "fork":
        pid, channel = ready
        channel.send(b"call")
        channel.recv(64)
        sock.send(b"ok")
        channel.close()
        os.waitpid(pid, 0)
        ready = standby()
    else:
        run_command()
        sock.send(b"ok")
"""


def own_cgroup() -> Path | None:
    """A fresh cgroup v2 directory below one this process may create children in, or None."""
    from peon.workers import cgroup

    support = cgroup.probe()
    if not support.available or support.parent is None:
        return None
    mine = support.parent / f"peon-bench-spawn-{os.getpid()}"
    try:
        mine.mkdir()
    except OSError:
        return None
    return mine


class Server:
    def __init__(self, mode: str, cgroup: Path | None = None):
        ours, theirs = socket.socketpair()
        env = dict(os.environ, **({"BENCH_CGROUP": str(cgroup)} if cgroup else {}))
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, str(theirs.fileno()), mode, str(ROOT),
                                         *MODULES], pass_fds=[theirs.fileno()], env=env)
        theirs.close()
        self.sock = ours

    def call(self) -> None:
        self.sock.send(b"call")
        if self.sock.recv(64) != b"ok":
            raise RuntimeError("the server failed")

    def cpu(self) -> float:
        self.sock.send(b"cpu")
        return float(self.sock.recv(64))

    def close(self) -> None:
        self.sock.close()
        self.process.wait(10)


def _own_cpu() -> float:
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def timed(call: Callable[[], None], calls: int, gap: float, cpu: Callable[[], float]) -> tuple[float, float]:
    """(median wall, CPU per call) in ms over ``calls`` calls, ``gap`` seconds apart."""
    for _ in range(min(20, calls)):
        call()
    times = []
    before = cpu()
    for _ in range(calls):
        if gap:
            time.sleep(gap)
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, (cpu() - before) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--apart-calls", type=int, default=30)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="peon-bench-spawn-home-")  # bash -l reads no developer profile
    os.environ["HOME"] = home
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8"}
    cgroup = own_cgroup()
    print(f"peon {peon.__version__}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}; "
          f"{args.calls} calls back to back, {args.apart_calls} calls {GAP_SECONDS * 1000:.0f} ms apart")
    if cgroup is None:
        print("spawn+cgroup: no cgroup this process may create children in — skipped")
    rows: list[tuple[str, tuple[float, float], tuple[float, float]]] = []

    def raw() -> None:
        subprocess.run(["/bin/bash", "-lc", "true"], env=env, check=True)

    for label, mode, where in (("bash -lc true (subprocess)", None, None), ("spawn", "spawn", None),
                               ("spawn+cgroup", "spawn", cgroup), ("fork", "fork", None)):
        if label == "spawn+cgroup" and where is None:
            continue
        if mode is None:
            rows.append((label, timed(raw, args.calls, 0, _own_cpu),
                         timed(raw, args.apart_calls, GAP_SECONDS, _own_cpu)))
            continue
        server = Server(mode, where)
        try:
            def both(server: Server = server) -> float:
                return server.cpu() + _own_cpu()

            rows.append((label, timed(server.call, args.calls, 0, both),
                         timed(server.call, args.apart_calls, GAP_SECONDS, both)))
        finally:
            server.close()
    with tempfile.TemporaryDirectory(prefix="peon-bench-spawn-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        with peon.Session(workspace, {"approval": {"process": "allow"}}, env=env,
                          state_dir=Path(tmp) / "state") as session:
            accounting = PeonCpu([], [session.supervisor_pid])

            def call() -> None:
                result = session.call("bash", {"command": "true"})
                if not result.ok:
                    raise RuntimeError(str(result.error))

            def peon_cpu() -> float:
                return sum(accounting.sample().values()) + client_cpu()

            rows.append(("Session.call bash true", timed(call, args.calls, 0, peon_cpu),
                         timed(call, args.apart_calls, GAP_SECONDS, peon_cpu)))
    (_, (raw_wall, raw_cpu), (raw_apart, raw_apart_cpu)) = rows[0]
    print(f"{'design':<34} {'back to back':>26} {'apart':>26}")
    for label, (wall, cpu), (apart, apart_cpu) in rows:
        print(f"{label:<34} {wall:6.2f} ms {wall / raw_wall:4.2f}x {cpu:5.2f} ms CPU "
              f"{apart:6.2f} ms {apart / raw_apart:4.2f}x {apart_cpu:5.2f} ms CPU")
    print(f"(ratios against bash -lc true: {raw_wall:.2f} ms back to back, {raw_apart:.2f} ms apart; CPU "
          f"{raw_cpu:.2f} / {raw_apart_cpu:.2f} ms; a server's CPU includes the commands it reaped)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    if cgroup is not None:
        cgroup.rmdir()


if __name__ == "__main__":
    main()
