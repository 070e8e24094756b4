"""Soak: a long mixed workload through one session, watching for leaks.

The workload cycles through reads, writes, short bash commands, runaway bash (background daemons,
``setsid`` escapes, a small fork loop, a 16 MiB flood), cancels, timeouts and approval denials. Every
``--sample-every`` calls it samples, for the client (this process), the supervisor and the
forkserver: open file descriptors and RSS; and the number of processes in the session's tree. After
the warm-up (the first ``--warmup`` calls) the first sample is the baseline; the report prints each
figure at the baseline, its maximum and its last value, and the growth from baseline to the end.

Pass criteria (printed): no growth in descriptors or processes, RSS growth under 5 % after warm-up.

Run: ``python bench/suite/soak.py [--calls 10000]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

import psutil

import peon
from bench.lib.figures import record
from peon.workers import proctree

FORK_LOOP = (Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "forkloop.py").read_text()
CONFIG = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "ask", "delegate": "deny"}}


def approver(request: dict) -> str:
    return "deny" if "DENY" in request["summary"] else "allow_once"


def fds(pid: int) -> int:
    return psutil.Process(pid).num_fds()


def rss_kib(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss // 1024




def wait_until_settled(sup: int, timeout: float = 5.0) -> None:
    """Until the session is at rest: the forkserver and one standby below the supervisor (a second is
    retired a second after the last call that used a worker up)."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        below = proctree.descendants(sup)
        if len(below) == 2 and sum(proctree.cmdline(p) == "peon-worker standby" for p in below) == 1:
            return
        time.sleep(0.01)


def workload(session: peon.Session, i: int) -> str:
    """One call of the mix; returns its kind. Every outcome is checked, so a regression fails the soak."""
    kind = i % 20
    if kind in (0, 1, 2):
        name = f"f{i % 7}.txt"
        mode = "replace" if (session.workspace / name).exists() else "create"
        r = session.call("write", {"path": name, "content": f"line {i}\n" * 50, "mode": mode})
        assert r.ok, r
        return "write"
    if kind in (3, 4, 5):
        r = session.call("read", {"path": "big.txt", "offset": (i * 37) % 4000, "limit": 512})
        assert r.ok, r
        return "read"
    if kind in (6, 7, 8, 9):
        r = session.call("bash", {"command": f"echo {i}"})
        assert r.ok and r.value["output"] == f"{i}\n", r
        return "bash"
    if kind == 10:
        r = session.call("bash",
                         {"command": "sleep 1000 & setsid sleep 1000 & nohup sleep 1000 >/dev/null 2>&1 & echo ok"})
        assert r.ok and r.value["exit_code"] == 0, r
        return "runaway"
    if kind == 11:
        r = session.call("bash", {"command": "head -c 16777216 /dev/zero"})
        assert r.ok and r.value["output_bytes"] == 16 << 20, r
        return "flood"
    if kind == 12:
        r = session.call("bash", {"command": "sleep 10", "timeout_seconds": 0.05})
        # On a machine busy enough to hold the worker back past deadline + 1 s, the tool is abandoned.
        assert (r.ok and r.value["timed_out"]) or (r.error and r.error.code == "timeout"), r
        return "timeout"
    if kind == 13:
        handle = session.submit("bash", {"command": "sleep 10"})
        time.sleep(0.01)
        handle.cancel()
        r = handle.result(timeout=30)
        assert (r.ok and r.value["cancelled"]) or (r.error and r.error.code == "cancelled"), r
        return "cancel"
    if kind == 14:
        r = session.call("bash", {"command": "echo DENY"})
        assert r.error and r.error.code == "denied", r
        return "denied"
    if kind == 15 and i % 100 == 15:
        (session.workspace / "count").unlink(missing_ok=True)
        r = session.call("bash", {"command": f"exec {sys.executable} forkloop.py 30", "timeout_seconds": 0.5})
        assert r.ok and r.value["timed_out"], r
        return "forkloop"
    if kind == 16:
        r = session.call("read", {"path": "../outside"})
        assert r.error and r.error.code == "outside_workspace", r
        return "refused"
    r = session.call("bash", {"command": "true"})
    assert r.ok, r
    return "bash"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--sample-every", type=int, default=250)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace, home = Path(tmp) / "ws", Path(tmp) / "home"
        workspace.mkdir()
        home.mkdir()
        (workspace / "big.txt").write_text("0123456789abcdef\n" * 300)
        (workspace / "forkloop.py").write_text(FORK_LOOP)
        env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        samples = []
        counts: dict[str, int] = {}
        started = time.monotonic()
        with peon.Session(workspace, CONFIG, env=env, approver=approver, state_dir=Path(tmp) / "state") as session:
            sup = session.supervisor_pid
            assert session.call("read", {"path": "big.txt", "limit": 1}).ok  # the forkserver starts behind `ready`
            forkserver = next(p for p in proctree.children(sup) if proctree.cmdline(p).startswith("peon-forkserver"))
            for i in range(options.calls):
                kind = workload(session, i)
                counts[kind] = counts.get(kind, 0) + 1
                if i >= options.warmup and (i - options.warmup) % options.sample_every == 0:
                    # let the last worker finish exiting and the standbys settle
                    wait_until_settled(sup)
                    samples.append({
                        "call": i,
                        "client_fds": fds(os.getpid()), "supervisor_fds": fds(sup), "forkserver_fds": fds(forkserver),
                        "tree_processes": len(proctree.descendants(sup)) + 1,
                        "client_rss": rss_kib(os.getpid()), "supervisor_rss": rss_kib(sup),
                        "forkserver_rss": rss_kib(forkserver),
                    })
        elapsed = time.monotonic() - started
    print(f"soak: {options.calls} calls in {elapsed:.0f} s ({options.calls / elapsed:.0f} calls/s); mix: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    first, last = samples[0], samples[-1]
    verdicts = []
    grown = {}
    for key in first:
        if key == "call":
            continue
        peak = max(s[key] for s in samples)
        growth = grown[key] = last[key] - first[key]
        unit = " KiB" if key.endswith("rss") else ""
        pct = f" ({100 * growth / first[key]:+.1f} %)" if key.endswith("rss") else ""
        print(f"soak: {key:16s} after warm-up {first[key]}{unit}, max {peak}{unit}, end {last[key]}{unit}, "
              f"growth {growth:+d}{unit}{pct}")
        if key.endswith("rss"):
            verdicts.append(growth / first[key] < 0.05)
        else:
            verdicts.append(growth <= 0)
    record("soak.descriptors", max(v for k, v in grown.items() if k.endswith("_fds")), "fds", calls=options.calls)
    record("soak.processes", grown["tree_processes"], "processes", calls=options.calls)
    record("soak.rss_percent", max(100 * v / first[k] for k, v in grown.items() if k.endswith("_rss")), "%",
           calls=options.calls)
    print("soak: supervisor RSS by sample (MiB): "
          + " ".join(f"{s['supervisor_rss'] / 1024:.1f}" for s in samples))
    print(f"soak: {len(samples)} samples from call {first['call']} to {last['call']}; "
          f"verdict: {'PASS' if all(verdicts) else 'FAIL'} (no fd or process growth, RSS growth < 5 %)")


if __name__ == "__main__":
    main()
