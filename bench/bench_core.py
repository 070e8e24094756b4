"""Core runtime figures, each against a baseline measured in the same run.

1. Per-call latency: median of ``session.call("bash", {"command": "true"})`` against a raw
   ``subprocess.run(["/bin/bash", "-lc", "true"])`` with the same environment (a clean HOME so the login
   profile is cheap), and their ratio. Target: ratio <= 1.2.
2. Deadline to clean: a capped fork loop (300 processes, some escaping with setsid) runs into its
   deadline; the time from the deadline until the call has returned and no process of the loop is
   alive. Measured from the client, so it includes dispatch overhead. Target: < 100 ms.
3. Flood memory: peak RSS (and PSS) of supervisor + worker while a command writes 1 GiB. Target:
   RSS < 64 MiB.

Run: ``python bench/bench_core.py [--calls N]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import peon
from workers import proctree

ALLOW = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow", "delegate": "allow"}}

# The same capped fork loop as the tests use.
FORK_LOOP = (Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "forkloop.py").read_text()


def status_kib(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0




def bench_latency(session: peon.Session, env: dict, calls: int) -> None:
    for _ in range(20):
        session.call("bash", {"command": "true"})
        subprocess.run(["/bin/bash", "-lc", "true"], env=env)
    peon_times, raw_times = [], []
    for _ in range(calls):  # interleaved so both see the same machine conditions
        t = time.perf_counter()
        result = session.call("bash", {"command": "true"})
        peon_times.append(time.perf_counter() - t)
        assert result.ok and result.value["exit_code"] == 0, result
        t = time.perf_counter()
        subprocess.run(["/bin/bash", "-lc", "true"], env=env)
        raw_times.append(time.perf_counter() - t)
    p, r = statistics.median(peon_times) * 1000, statistics.median(raw_times) * 1000
    print(f"latency: session.call bash true  median {p:.3f} ms  (p90 {statistics.quantiles(peon_times, n=10)[-1]*1000:.3f})")
    print(f"latency: subprocess.run bash -lc true  median {r:.3f} ms  (p90 {statistics.quantiles(raw_times, n=10)[-1]*1000:.3f})")
    print(f"latency: ratio {p / r:.2f}  (target <= 1.2, {calls} calls each)")


def bench_deadline(session: peon.Session, workspace: Path, runs: int) -> None:
    (workspace / "forkloop.py").write_text(FORK_LOOP)
    figures = []
    for _ in range(runs):
        (workspace / "count").unlink(missing_ok=True)
        timeout = 2.0
        sent = time.monotonic()
        result = session.call("bash", {"command": f"exec {sys.executable} forkloop.py", "timeout_seconds": timeout})
        returned = time.monotonic()
        assert result.value["timed_out"], result
        loop_alive = [p for p in proctree.descendants(session.supervisor_pid) if "forkloop.py" in proctree.cmdline(p)]
        assert not loop_alive, f"fork loop survived: {loop_alive}"
        count = (workspace / "count").stat().st_size
        figures.append((returned - sent - timeout) * 1000)
    kind = session.info["containment"]["kind"]
    print(f"deadline->clean [{kind}]: fork loop of {count} processes: median {statistics.median(figures):.1f} ms, "
          f"max {max(figures):.1f} ms over {runs} runs (target < 100 ms; upper bound incl. dispatch)")


def bench_flood(session: peon.Session) -> None:
    sup = session.supervisor_pid
    peak_rss = peak_pss = 0
    done = threading.Event()

    def sample():
        nonlocal peak_rss, peak_pss
        while not done.is_set():
            workers = [p for p in proctree.descendants(sup) if proctree.cmdline(p).startswith("peon-worker bash")]
            if workers:
                pids = [sup, *workers]
                peak_rss = max(peak_rss, sum(status_kib(p, "VmRSS") for p in pids))
                peak_pss = max(peak_pss, sum(pss_kib(p) for p in pids))
            done.wait(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    t = time.perf_counter()
    result = session.call("bash", {"command": "head -c 1073741824 /dev/zero"})
    elapsed = time.perf_counter() - t
    done.set()
    sampler.join()
    assert result.value["output_bytes"] == 1 << 30, result.value
    base = subprocess.run(["bash", "-c", "time -p head -c 1073741824 /dev/zero > /dev/null"],
                          capture_output=True, text=True).stderr.split()
    print(f"flood: 1 GiB through a session in {elapsed:.2f} s (head alone to /dev/null: {base[1]} s)")
    print(f"flood: peak supervisor+worker RSS {peak_rss / 1024:.1f} MiB, PSS {peak_pss / 1024:.1f} MiB "
          f"(target RSS < 64 MiB)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--deadline-runs", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace, home = Path(tmp) / "ws", Path(tmp) / "home"
        workspace.mkdir()
        home.mkdir()
        env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        with peon.Session(workspace, ALLOW, env=env, state_dir=Path(tmp) / "state") as session:
            print(f"containment: {session.info['containment']['kind']}")
            bench_latency(session, env, options.calls)
            bench_deadline(session, workspace, options.deadline_runs)
            bench_flood(session)
        if session.info["containment"]["kind"] != "process-tree":  # the fallback, measured too
            fallback = {**ALLOW, "runtime": {"containment": "process-tree"}}
            with peon.Session(workspace, fallback, env=env, state_dir=Path(tmp) / "state") as session:
                bench_deadline(session, workspace, options.deadline_runs)


if __name__ == "__main__":
    main()
