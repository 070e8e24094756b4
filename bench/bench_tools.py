"""``grep`` and ``edit`` through a session, against what an agent would do without them, in the same run.

1. ``grep`` on a large tree (a copy of this interpreter's standard library, about 2,400 files; or
   ``--tree DIR``) with ``output: "count"`` and an offset past the end, so every file is searched and
   nothing stops ripgrep early,
   against running ``rg`` directly with the same search options (``--count --sort path`` and the ignore,
   hidden and symlink rules ``grep`` passes) from this process. Target: median ratio <= 1.3. The tool
   also lists the tree's secret-like files first (a second, name-only ripgrep walk): that is part of
   its cost and counted.
2. ``edit`` of one line in a 1 MiB file against ``read`` + ``write`` (``replace`` with the
   ``expected_sha256`` the read returned) of the same file, both through the session. Target: median
   ratio <= 1.2.

The cases take turns call by call, so load on the machine hits both sides alike; medians and 90th
percentiles of wall time are printed with the ratios, and the CPU time of ``rg`` run directly
(``RUSAGE_CHILDREN``) beside its wall time.

Run: ``python bench/bench_tools.py [--rounds N] [--tree DIR]``
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import peon
from peon.tools.shared.search import rg_base_argv
from peon.tools.grep import rg_executable

# read_max_bytes: the read + write side reads the whole 1 MiB file in one call
CONFIG = {"approval": {"read_only": "allow", "filesystem": "allow"}, "limits": {"read_max_bytes": 4 << 20}}
PATTERN = r"def \w+\(self"


def describe(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"median {statistics.median(ordered) * 1000:8.2f} ms  p90 {ordered[int(len(ordered) * 0.9)] * 1000:8.2f} ms"


def copy_tree(source: Path, target: Path) -> int:
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "site-packages"))
    return sum(len(files) for _, _, files in os.walk(target))


def bench_grep(ws: Path, session: peon.Session, rounds: int) -> float:
    rg = rg_executable()
    argv = [*rg_base_argv(rg), "--sort", "path", "--count", "--null", "--regexp", PATTERN, "--", "."]
    tool, direct, cpu = [], [], []
    expected = None
    for _ in range(rounds):
        started = time.perf_counter()
        # an offset past the end: every file is searched and counted, as rg directly does (no early stop)
        value = session.call("grep", {"pattern": PATTERN, "output": "count", "offset": 10**9}).value
        tool.append(time.perf_counter() - started)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        out = subprocess.run(argv, cwd=ws, stdout=subprocess.PIPE, check=False).stdout
        direct.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        expected = out.count(b"\n")
    assert value["timed_out"] is False and expected is not None
    print(f"grep tree: {expected} files with matches ({len(value['skipped'])} secret-like files skipped by grep)")
    print(f"  grep through the session  {describe(tool)}")
    print(f"  rg directly               {describe(direct)}  (rg CPU median {statistics.median(cpu) * 1000:.2f} ms)")
    ratio = statistics.median(tool) / statistics.median(direct)
    print(f"  ratio grep / rg           {ratio:.2f}  (target <= 1.3)")
    return ratio


def bench_edit(ws: Path, session: peon.Session, rounds: int) -> float:
    line = "".join(f"{i:07d} some text of a source file, long enough to look like code\n" for i in range(16_000))
    target = ws / "one_mib.txt"
    target.write_text(line[: 1 << 20].rsplit("\n", 1)[0] + "\nMARKER 0\n")
    edit, read_write = [], []
    for n in range(rounds):
        started = time.perf_counter()
        result = session.call("edit", {"path": "one_mib.txt", "edits": [
            {"old_string": f"MARKER {2 * n}\n", "new_string": f"MARKER {2 * n + 1}\n"}]})
        edit.append(time.perf_counter() - started)
        assert result.ok, result.error
        started = time.perf_counter()
        read = session.call("read", {"path": "one_mib.txt"}).value
        content = read["content"].replace(f"MARKER {2 * n + 1}\n", f"MARKER {2 * n + 2}\n")
        written = session.call("write", {"path": "one_mib.txt", "content": content, "mode": "replace",
                                         "expected_sha256": read["sha256"]})
        read_write.append(time.perf_counter() - started)
        assert written.ok, written.error
    print(f"edit of one line in a {target.stat().st_size} byte file")
    print(f"  edit                      {describe(edit)}")
    print(f"  read + write              {describe(read_write)}")
    ratio = statistics.median(edit) / statistics.median(read_write)
    print(f"  ratio edit / (read+write) {ratio:.2f}  (target <= 1.2)")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tree", type=Path, default=Path(sysconfig.get_path("stdlib")))
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="peon-bench-tools-") as tmp:
        ws = Path(tmp) / "ws"
        files = copy_tree(options.tree, ws / "tree")
        print(f"tree: {files} files copied from {options.tree}")
        with peon.Session(ws, CONFIG, state_dir=Path(tmp) / "state") as session:
            session.call("glob", {"pattern": "**/*.py", "limit": 1})  # page cache warm for both sides
            bench_grep(ws, session, options.rounds)
            bench_edit(ws, session, options.rounds)


if __name__ == "__main__":
    main()
