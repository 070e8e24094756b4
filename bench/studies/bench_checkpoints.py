"""What checkpoints cost a call, and how the store grows: against the same call without checkpoints,
measured in one run (the two sessions' calls alternate, so the machine's noise falls on both).

* a 10,000-file workspace (a git repository): a ``bash`` call that changes nothing, p50 with and
  without checkpoints, the difference, and ``git status`` on that tree (the bar: ≤ 15 ms more and
  ≤ 1.2 times ``git status``);
* a small workspace (10 files): the same call, the ratio (the bar: ≤ 1.1 times);
* the store's size growth over ``--growth-calls`` calls (default 1,000) each appending a line to one
  file of the small workspace (objects and the record log).

    python bench/studies/bench_checkpoints.py [--calls 60] [--growth-calls 1000] [--json]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: its peon, from anywhere

import peon

ALLOW = {"approval": {"filesystem": "allow", "process": "allow"}}


def make_workspace(root: Path, files: int) -> Path:
    root.mkdir(parents=True)
    per_dir = 100
    for index in range(files):
        folder = root / f"d{index // per_dir}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{index % per_dir}.txt").write_text(f"file {index}\n" * 4)
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=root, check=True)
    return root


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def p50(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def compare(workspace: Path, state: Path, calls: int) -> dict[str, float]:
    with peon.Session(workspace, {**ALLOW, "checkpoints": {"enabled": True}}, state_dir=state / "on") as on, \
            peon.Session(workspace, {**ALLOW, "checkpoints": {"enabled": False}}, state_dir=state / "off") as off:
        for session in (on, off):  # warm: the workers, the store's first snapshot
            for _ in range(3):
                assert session.call("bash", {"command": "true"}).ok
        with_cp, without = [], []
        for _ in range(calls):
            with_cp.append(timed(lambda: on.call("bash", {"command": "true"})))
            without.append(timed(lambda: off.call("bash", {"command": "true"})))
    return {"with_checkpoints_ms": p50(with_cp), "without_ms": p50(without),
            "added_ms": round(p50(with_cp) - p50(without), 2), "ratio": round(p50(with_cp) / p50(without), 3)}


def git_status_ms(workspace: Path, calls: int) -> float:
    run = lambda: subprocess.run(["git", "status", "--porcelain"], cwd=workspace, capture_output=True)  # noqa: E731
    run()
    return p50([timed(run) for _ in range(calls)])


def store_bytes(state: Path) -> dict[str, int]:
    total, objects = 0, 0
    for folder, _dirs, files in os.walk(state / "checkpoints"):
        for name in files:
            size = os.lstat(os.path.join(folder, name)).st_size
            total += size
            objects += size if "objects" in folder else 0
    return {"store_bytes": total, "object_bytes": objects}


def growth(workspace: Path, state: Path, calls: int) -> dict[str, int | float]:
    with peon.Session(workspace, ALLOW, state_dir=state / "growth") as session:
        session.call("bash", {"command": "true"})
        start = store_bytes(state / "growth")
        for index in range(calls):
            session.call("bash", {"command": f"echo line {index} >> d0/f{index % 10}.txt"})
        end = store_bytes(state / "growth")
    return {"calls": calls, "store_bytes_before": start["store_bytes"], "store_bytes_after": end["store_bytes"],
            "growth_bytes": end["store_bytes"] - start["store_bytes"],
            "object_growth_bytes": end["object_bytes"] - start["object_bytes"],
            "bytes_per_call": round((end["store_bytes"] - start["store_bytes"]) / max(calls, 1), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=60, help="calls of each kind per measurement")
    parser.add_argument("--growth-calls", type=int, default=1000, help="calls of the store-growth session")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="peon-bench-checkpoints-") as tmp:
        root = Path(tmp)
        large = make_workspace(root / "large", 10_000)
        small = make_workspace(root / "small", 10)
        report = {"large": {**compare(large, root / "state-large", options.calls),
                            "git_status_ms": git_status_ms(large, options.calls)},
                  "small": compare(small, root / "state-small", options.calls)}
        big = report["large"]
        big["added_over_git_status"] = round(big["added_ms"] / big["git_status_ms"], 3)
        report["growth"] = growth(small, root / "state-growth", options.growth_calls)
    if options.json:
        print(json.dumps(report, indent=2))
        return
    big, little, grown = report["large"], report["small"], report["growth"]
    print(f"10,000 files: a call that changes nothing {big['with_checkpoints_ms']} ms with checkpoints, "
          f"{big['without_ms']} ms without (+{big['added_ms']} ms, p50); git status {big['git_status_ms']} ms "
          f"(checkpoints add {big['added_over_git_status']}x git status)")
    print(f"10 files: {little['with_checkpoints_ms']} ms with, {little['without_ms']} ms without "
          f"({little['ratio']}x)")
    print(f"store growth over {grown['calls']} calls each appending a line: {grown['growth_bytes']} bytes "
          f"({grown['bytes_per_call']} per call; objects {grown['object_growth_bytes']})")


if __name__ == "__main__":
    main()
