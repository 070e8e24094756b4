"""What keeping output costs, each against a baseline measured in the same run.

1. Foreground flood: ``head -c N /dev/zero`` through ``bash`` (its worker keeps the newest
   ``jobs.output_buffer_bytes`` and sends them at the end) against the same command with its output
   sent to ``/dev/null`` inside the call (so the call and session overhead is in both).
2. Background flood: the same command as a background job, whose output streams live to the
   supervisor's store as binary frames; time from start until ``job_output`` says it exited.
3. Supervisor CPU time for each, read with psutil.
4. A background job started and stopped beside a running one (in cgroup containment the session's job
   host is up: no process start but the command's), against a foreground ``bash true`` call.

Run: ``python bench/studies/bench_jobs.py [--mib N] [--runs N]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

import psutil

import peon

ALLOW = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow"}}


def measure(session: peon.Session, supervisor: psutil.Process, run) -> tuple[float, float]:
    cpu = sum(supervisor.cpu_times()[:2])
    started = time.monotonic()
    run()
    return time.monotonic() - started, sum(supervisor.cpu_times()[:2]) - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    size = options.mib << 20
    with tempfile.TemporaryDirectory() as workspace, peon.Session(workspace, ALLOW) as session:
        supervisor = psutil.Process(session.supervisor_pid)
        session.call("bash", {"command": "true"})

        def baseline() -> None:
            assert session.call("bash", {"command": f"head -c {size} /dev/zero > /dev/null"}).ok

        def foreground() -> None:
            r = session.call("bash", {"command": f"head -c {size} /dev/zero"})
            assert r.ok and r.value["output_bytes"] == size

        def background() -> None:
            job = session.call("bash", {"command": f"head -c {size} /dev/zero", "background": True}).value["job_id"]
            wait = {"job_id": job, "offset": size, "wait_seconds": 30}
            while session.call("job_output", wait).value["state"] == "running":
                pass

        figures = {}
        for name, run in (("baseline (to /dev/null)", baseline), ("foreground flood", foreground),
                          ("background flood, streamed", background)):
            samples = [measure(session, supervisor, run) for _ in range(options.runs)]
            figures[name] = (statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples))
        base = figures["baseline (to /dev/null)"][0]
        for name, (wall, cpu) in figures.items():
            print(f"{name:28s} {options.mib} MiB: {wall:6.2f} s wall (x{wall / base:.2f}), "
                  f"supervisor CPU {cpu:.2f} s, {options.mib / wall:7.0f} MiB/s")

        def foreground_true() -> None:
            assert session.call("bash", {"command": "true"}).ok

        def job_start_stop() -> None:
            job = session.call("bash", {"command": "exec sleep 600", "background": True}).value["job_id"]
            assert session.call("job_stop", {"job_id": job}).value["state"] == "killed"

        keeper = session.call("bash", {"command": "exec sleep 600", "background": True}).value["job_id"]
        starts = {}
        for name, run in (("foreground bash true", foreground_true), ("background job start + stop", job_start_stop)):
            samples = [measure(session, supervisor, run) for _ in range(max(options.runs, 10))]
            starts[name] = (statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples))
        session.call("job_stop", {"job_id": keeper})
        base = starts["foreground bash true"][0]
        print(f"beside a running background job ({session.info['containment']['kind']} containment):")
        for name, (wall, cpu) in starts.items():
            print(f"{name:28s} {wall * 1000:7.1f} ms wall (x{wall / base:.2f}), supervisor CPU {cpu * 1000:.1f} ms")


if __name__ == "__main__":
    main()
