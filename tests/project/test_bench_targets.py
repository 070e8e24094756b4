"""The benchmarks run for real, briefly: each run takes the options it is given, a bare worker serves calls and
leaves nothing behind, and agents sharing one ``peon serve`` each work in a directory of their own. The
targets' table and its judgements are tests/unit/test_bench_target_table.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BENCH = ROOT / "bench"


def test_every_benchmark_run_takes_the_options_it_is_given(bench):
    """The commands targets.py runs name options their scripts accept (each script's own --help)."""
    _, targets = bench
    options: dict[str, set[str]] = {}
    for quick in (False, True):
        for script, *args in targets.runs(quick, soak_calls=1000, profile=True):
            options.setdefault(script, set()).update(a for a in args if a.startswith("--"))
    assert len(options) == 6
    for script, named in options.items():
        usage = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                               timeout=60)
        assert usage.returncode == 0, usage.stderr
        assert {option for option in named if option not in usage.stdout} == set(), script


def test_a_bare_worker_per_call_serves_each_call_and_leaves_no_worker_behind(tmp_path):
    """bench/lib/bare_worker.py, the design's floors: every reader returns the file's bytes call after call,
    each from a process of its own, and when closed no worker (nor the bare supervisor, nor its
    forkserver) it started is alive. Run in an interpreter of its own: multiprocessing's forkserver is
    one per process."""
    (tmp_path / "f.txt").write_bytes(b"0123456789abcdef" * 256)
    script = f"""
import multiprocessing.forkserver, multiprocessing.resource_tracker, os, sys, time
from pathlib import Path
import psutil
sys.path.insert(0, {str(ROOT)!r})
from bench.lib import bare_worker
path = Path({str(tmp_path / "f.txt")!r})
readers = [bare_worker.MultiprocessingReader(path), bare_worker.ForkReader(path), bare_worker.SupervisedReader(path)]
supervisor = readers[2]._supervisor.pid
below: set = set()
for reader in readers:
    try:
        replies = [reader() for _ in range(5)]
        if reader is readers[2]:  # its forkserver and its standby (started after the reply), its own
            deadline = time.monotonic() + 30
            while len(below) < 2 and time.monotonic() < deadline:
                below = {{p.pid for p in psutil.Process(supervisor).children(recursive=True)}}
                time.sleep(0.01)
            assert len(below) >= 2, below
    finally:
        reader.close()
    assert replies == [path.read_bytes()] * 5, reader
assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
               for pid in below | {{supervisor}})
helpers = (multiprocessing.forkserver._forkserver._forkserver_pid,
           multiprocessing.resource_tracker._resource_tracker._pid)
left = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in helpers]
multiprocessing.forkserver._forkserver._stop()
print("left", left)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "left []"


def test_a_reused_bare_worker_serves_call_after_call_and_leaves_nothing_behind(tmp_path):
    """bench/lib/bare_worker.py, the current design's floors: one worker (alone, or behind a bare supervisor)
    answers every call, reading the file or spawning and reaping bash -lc true; no command outlives its
    call, and once closed nothing it started is alive. In an interpreter of its own (one forkserver each)."""
    (tmp_path / "f.txt").write_bytes(b"fedcba9876543210" * 256)
    script = f"""
import multiprocessing.forkserver, multiprocessing.resource_tracker, sys
from pathlib import Path
import psutil
sys.path.insert(0, {str(ROOT)!r})
from bench.lib import bare_worker
path = Path({str(tmp_path / "f.txt")!r})
env = {{"PATH": "/usr/bin:/bin", "HOME": {str(tmp_path)!r}, "LANG": "C.UTF-8"}}
seen: set = set()
for kind in (bare_worker.ReusedWorker, bare_worker.SupervisedReusedWorker):
    for job, worker, expected in (("read", kind("read", path), path.read_bytes()),
                                  ("spawn", kind("spawn", env=env), b"0")):
        top = worker._started[0].pid
        try:
            for _ in range(5):
                assert worker() == expected, (kind, job)
                below = psutil.Process(top).children(recursive=True)
                # the same processes serve every call; no command is left after its answer
                assert not [p for p in below if p.name() == "bash"], below
                seen |= {{top, *(p.pid for p in below)}}
            assert len(below) == (0 if kind is bare_worker.ReusedWorker else 2), below  # + forkserver, worker
        finally:
            worker.close()
helpers = (multiprocessing.forkserver._forkserver._forkserver_pid,
           multiprocessing.resource_tracker._resource_tracker._pid)
left = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in helpers]
assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in seen)
multiprocessing.forkserver._forkserver._stop()
print("left", left)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "left []"


def test_agents_sharing_one_peon_serve_each_work_in_a_directory_of_their_own(bench, tmp_path):
    """bench_agents.py's ``peon serve`` front: one real server on loopback, an AsyncRemoteSession per
    agent; every call of the mix answered, each agent's write in its own directory of the one
    workspace, the server's processes counted, and nothing of the server left once the run is over."""
    import asyncio
    import contextlib

    from bench.suite import bench_agents
    import psutil

    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config")}
    workspaces = bench_agents.make_workspaces(tmp_path / "serve-2", 2)

    async def run() -> tuple[list[float], list[int], dict[str, float]]:
        async with contextlib.AsyncExitStack() as stack:
            started = await bench_agents.start_serve(workspaces, env, stack)
            assert isinstance(started.cpu, bench_agents.PeonCpu) and len(started.cpu.supervisors) == 1
            latencies = await bench_agents.drive(started.agents, len(bench_agents.MIX), "back to back", seed=0)
            tree = [started.cpu.fronts[0], *(p.pid for p in psutil.Process(started.cpu.fronts[0]).children(True))]
            return latencies, tree, started.cpu.sample()

    latencies, tree, cpu = asyncio.run(asyncio.wait_for(run(), 120))
    assert len(latencies) == 2 * len(bench_agents.MIX)
    assert set(cpu) == {"front end", "supervisors", "forkservers", "workers"} and cpu["workers"] > 0
    for workspace in workspaces:
        assert (workspace / "two_kib.txt").read_text() == "w" * 2047 + "\n"
    assert not (tmp_path / "serve-2" / "two_kib.txt").exists()
    assert not [pid for pid in tree if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
