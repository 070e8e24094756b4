"""Core runtime figures, each against a baseline measured in the same run.

1. Per-call latency: median of ``session.call("bash", {"command": "true"})`` against a raw
   ``subprocess.run(["/bin/bash", "-lc", "true"])`` with the same environment (a clean HOME so the login
   profile is cheap), and their ratio — back to back, and with 100 ms between calls (an agent's
   rhythm). Target: ratio <= 1.2 both ways. Beside them, the same call answered by the supervisor
   alone (a second session whose policy denies ``process``: validated, rated, approved, audited and
   answered, no worker): what a call costs before any worker is involved, against the budget the
   target leaves (0.2x the raw start). ``bench/targets.py`` takes it as Peon's floor of the target: the
   ratio a call would reach if everything else Peon does cost nothing. And the design's floors, from
   nothing of Peon's (:mod:`bench.lib.bare_worker`): ``bash -lc true`` ``posix_spawn``ed in a session of its own
   and reaped through a pidfd by a long-lived bare ``multiprocessing`` worker, asked by this process
   directly, and through a bare supervisor process that relays the call to a worker of its own (as a
   session's supervisor does: four hops, the spawn and the reap, nothing else). Back to back, the cases
   take turns in blocks of consecutive calls (:mod:`bench.lib.rhythm`); 100 ms apart, call by call.
2. Deadline to clean: a capped fork loop (300 processes, some escaping with setsid) runs into its
   deadline; the time from the deadline until the call has returned and no process of the loop is
   alive. Measured from the client, so it includes dispatch overhead. Target: < 100 ms, with cgroup
   containment and with the process-tree fallback.
3. Flood memory: peak RSS (and PSS) of supervisor + worker while a command writes 1 GiB. Target:
   RSS < 64 MiB.
4. Idle CPU: CPU time used by the client, the supervisor, the forkserver and the standby workers of a
   session with no calls, over a few seconds. Target: 0 (nothing polls).
5. First call: a new session's first ``bash true`` issued as soon as the session is open (in the sandbox
   this machine allows, as a session gets by default), against the same call once the session is warm
   (100 ms apart), median over a few new sessions. Target: ratio <= 1.5. Beside it, the first call
   issued once the session's first standby waits: what the first call costs besides waiting for the
   forkserver and the first worker to start.

Run: ``python bench/suite/bench_core.py [--calls N] [--deadline-runs N] [--idle-seconds S] [--first-runs N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

import psutil

import peon
from bench.lib import bare_worker
from bench.lib.figures import record
from bench.lib.rhythm import apart, back_to_back
from peon.workers import proctree

ALLOW = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow", "delegate": "allow"}}

# The same capped fork loop as the tests use.
FORK_LOOP = (Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "forkloop.py").read_text()


def rss_and_pss(pids: list[int]) -> tuple[int, int]:
    """Summed resident and proportional set sizes, in bytes."""
    rss = pss = 0
    for pid in pids:
        try:
            memory = psutil.Process(pid).memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss += memory.rss
        pss += getattr(memory, "pss", 0)
    return rss, pss


def bench_latency(session: peon.Session, denying: peon.Session, env: dict, calls: int, gap: float = 0.0,
                  spawners: dict[str, bare_worker.ReusedWorker] | None = None) -> None:
    def denied() -> None:
        reply = denying.call("bash", {"command": "true"})
        assert not reply.ok and reply.error is not None and reply.error.code == "denied", reply

    def through_peon() -> None:
        result = session.call("bash", {"command": "true"})
        assert result.ok and result.value["exit_code"] == 0, result

    def raw() -> None:
        subprocess.run(["/bin/bash", "-lc", "true"], env=env)

    cases = {"denied": denied, "peon": through_peon, "raw": raw, **(spawners or {})}
    for _ in range(20):
        for run in cases.values():
            run()
    runs = apart(cases, calls, gap) if gap else back_to_back(cases, calls)
    peon_times, raw_times, denied_times = runs["peon"], runs["raw"], runs["denied"]
    p, r = statistics.median(peon_times) * 1000, statistics.median(raw_times) * 1000
    pace = "back to back" if not gap else f"{gap * 1000:.0f} ms apart"
    print(f"latency ({pace}): session.call bash true  median {p:.3f} ms  "
          f"(p90 {statistics.quantiles(peon_times, n=10)[-1]*1000:.3f})")
    print(f"latency ({pace}): subprocess.run bash -lc true  median {r:.3f} ms  "
          f"(p90 {statistics.quantiles(raw_times, n=10)[-1]*1000:.3f})")
    print(f"latency ({pace}): ratio {p / r:.2f}  (target <= 1.2, {calls} calls each)")
    d = statistics.median(denied_times) * 1000
    floors = {name: statistics.median(runs[name]) * 1000 for name in spawners or {}}
    record("bash.apart" if gap else "bash.back_to_back", p, "ms", baseline=r, against="bash -lc true", calls=calls,
           supervisor_only=d, **floors)
    print(f"latency ({pace}): the same call denied, answered by the supervisor alone  median {d:.3f} ms; "
          f"the target leaves {0.2 * r:.3f} ms for all Peon adds to bash")
    if floors:
        print(f"latency ({pace}): bash -lc true posix_spawned and reaped by a reused bare worker "
              f"{floors['spawned']:.3f} ms ({floors['spawned'] / r:.2f}x), through a bare supervisor "
              f"{floors['spawned_supervised']:.3f} ms ({floors['spawned_supervised'] / r:.2f}x)")


def bench_deadline(session: peon.Session, workspace: Path, runs: int) -> None:
    (workspace / "forkloop.py").write_text(FORK_LOOP)
    # A session's first call waits for its forkserver and first worker (not counted against the call's
    # timeout, but seen from here): start them before timing.
    assert session.call("bash", {"command": "true"}).ok
    figures = []
    for _ in range(runs):
        (workspace / "count").unlink(missing_ok=True)
        timeout = 2.0
        sent = time.monotonic()
        # -I -S: the loop's processes are the same size whatever the interpreter's site-packages import
        # at start-up (a .pth that imports a package made each of the 300 processes several MiB larger).
        result = session.call("bash", {"command": f"exec {sys.executable} -I -S forkloop.py",
                                       "timeout_seconds": timeout})
        returned = time.monotonic()
        assert result.value["timed_out"], result
        loop_alive = [p for p in proctree.descendants(session.supervisor_pid) if "forkloop.py" in proctree.cmdline(p)]
        assert not loop_alive, f"fork loop survived: {loop_alive}"
        count = (workspace / "count").stat().st_size
        figures.append((returned - sent - timeout) * 1000)
    kind = session.info["containment"]["kind"]
    print(f"deadline->clean [{kind}]: fork loop of {count} processes: median {statistics.median(figures):.1f} ms, "
          f"max {max(figures):.1f} ms over {runs} runs (target < 100 ms; upper bound incl. dispatch)")
    record(f"deadline_to_clean.{kind}", statistics.median(figures), "ms", max=max(figures), runs=runs)


def bench_flood(session: peon.Session) -> None:
    sup = session.supervisor_pid
    peak_rss = peak_pss = 0
    done = threading.Event()

    def sample():
        nonlocal peak_rss, peak_pss
        while not done.is_set():
            workers = [p for p in proctree.descendants(sup) if proctree.cmdline(p).startswith("peon-worker bash")]
            if workers:
                rss, pss = rss_and_pss([sup, *workers])
                peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
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
    print(f"flood: peak supervisor+worker RSS {peak_rss / (1 << 20):.1f} MiB, PSS {peak_pss / (1 << 20):.1f} MiB "
          f"(target RSS < 64 MiB)")
    record("flood_rss", peak_rss / (1 << 20), "MiB", pss=peak_pss / (1 << 20))


def bench_idle(session: peon.Session, seconds: float) -> None:
    """CPU time the session's processes use while it has no call (psutil cpu_times; 10 ms resolution)."""
    session.call("bash", {"command": "true"})
    sup = session.supervisor_pid
    time.sleep(1.0)  # let the last worker exit and the standbys settle
    processes = [psutil.Process(pid) for pid in [sup, *proctree.descendants(sup)]]
    me = psutil.Process(os.getpid())

    def used() -> float:
        total = 0.0
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def client_threads() -> float:  # the client's reader thread, not this benchmark's own sleeping
        return sum(t.user_time + t.system_time for t in me.threads() if t.id != threading.get_native_id())

    before, client_before = used(), client_threads()
    time.sleep(seconds)
    after, client_after = used(), client_threads()
    names = ", ".join(proctree.cmdline(p.pid).split(" ")[0] for p in processes)
    session_ms, reader_ms = (after - before) * 1000, (client_after - client_before) * 1000
    print(f"idle: {len(processes)} session processes ({names}) used {session_ms:.0f} ms of CPU "
          f"and the client's reader {reader_ms:.0f} ms in {seconds:g} s without calls (target 0)")
    record("idle_cpu", session_ms + reader_ms, "ms", seconds=seconds)


def _standby_ready(supervisor: int, timeout: float = 30.0) -> None:
    """Wait until a worker below ``supervisor`` waits as a standby (it has prepared)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in psutil.Process(supervisor).children(recursive=True):
            try:
                if "peon-worker standby" in " ".join(process.cmdline()):
                    return
            except psutil.Error:
                continue
        time.sleep(0.01)


def bench_first_call(workspace: Path, state: Path, env: dict, runs: int) -> None:
    """Each run opens two new sessions (the default sandbox) and times the first call of each: one
    issued as soon as the session is open, one once its first standby waits; then warm calls."""
    firsts, readied, warms = [], [], []
    for run in range(runs):
        for when, into in (("open", firsts), ("standby", readied)):
            with peon.Session(workspace, ALLOW, env=env, state_dir=state / f"first-{when}-{run}") as session:
                if when == "standby":
                    _standby_ready(session.supervisor_pid)
                started = time.perf_counter()
                assert session.call("bash", {"command": "true"}).ok
                into.append(time.perf_counter() - started)
                for _ in range(5 if when == "open" else 0):
                    time.sleep(0.1)
                    started = time.perf_counter()
                    assert session.call("bash", {"command": "true"}).ok
                    warms.append(time.perf_counter() - started)
                sandbox = session.info.get("sandbox") or {}
    first, ready, warm = (statistics.median(times) * 1000 for times in (firsts, readied, warms))
    kind = sandbox.get("kind", "off") if sandbox.get("active") else "off"
    print(f"first call of a new session (sandbox {kind}, {runs} sessions each): bash true issued as soon as the "
          f"session is open: median {first:.2f} ms (max {max(firsts) * 1000:.2f}), {first / warm:.2f}x a warm call "
          f"({warm:.2f} ms, 100 ms apart; target <= 1.5); issued once its first standby waits: {ready:.2f} ms, "
          f"{ready / warm:.2f}x")
    record("first_call", first, "ms", baseline=warm, against="a warm call, 100 ms apart", runs=runs,
           max=max(firsts) * 1000, once_standby_waits=ready)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--deadline-runs", type=int, default=5)
    parser.add_argument("--apart-calls", type=int, default=50, help="calls 100 ms apart (default 50)")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--first-runs", type=int, default=5, help="new sessions whose first call is timed")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace, home = Path(tmp) / "ws", Path(tmp) / "home"
        workspace.mkdir()
        home.mkdir()
        env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        deny = {"approval": {**ALLOW["approval"], "process": "deny"}}
        with peon.Session(workspace, ALLOW, env=env, state_dir=Path(tmp) / "state") as session:
            print(f"containment: {session.info['containment']['kind']}")
            spawners = {"spawned": bare_worker.ReusedWorker("spawn", env=env),
                        "spawned_supervised": bare_worker.SupervisedReusedWorker("spawn", env=env)}
            try:
                with peon.Session(workspace, deny, env=env, state_dir=Path(tmp) / "state-deny") as denying:
                    bench_latency(session, denying, env, options.calls, spawners=spawners)
                    bench_latency(session, denying, env, options.apart_calls, gap=0.1, spawners=spawners)
            finally:
                for spawner in spawners.values():
                    spawner.close()
            bench_deadline(session, workspace, options.deadline_runs)
            bench_flood(session)
            bench_idle(session, options.idle_seconds)
        bench_first_call(workspace, Path(tmp), env, options.first_runs)
        if session.info["containment"]["kind"] != "process-tree":  # the fallback, measured too
            fallback = {**ALLOW, "runtime": {"containment": "process-tree"}}
            with peon.Session(workspace, fallback, env=env, state_dir=Path(tmp) / "state") as session:
                bench_deadline(session, workspace, options.deadline_runs)


if __name__ == "__main__":
    main()
