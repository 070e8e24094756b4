"""What pinning an agent's program costs per call, against the plain PATH lookup measured in the same run.

For each program — a small script run by this Python (``#!<python>``), and a ``#!/usr/bin/env node``
script run by Node.js when ``node`` is installed (its binary is ~100 MB, like Claude Code's native
binary) — it times, as medians over ``--calls`` runs:

* baseline: ``resolve_executable`` alone (a stat-based PATH lookup: what the adapters did before);
* resolve: following the ``#!`` chain without hashing (what the worker does before it checks the pins);
* approve, cold: following the chain and hashing every file with an empty cache (the supervisor's
  first call for a program);
* approve, warm: the same with the per-process cache filled (the supervisor's later calls);
* pin: reopening, ``fstat`` and hashing every file right before the start (the worker, every call).

Prints milliseconds and ratios to the baseline. Run: ``python bench/studies/bench_launch.py [--calls N]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

from peon.tools.shared import launch
from peon.tools.shared.agent import resolve_executable


def median_ms(fn: Callable[[], object], calls: int, before: Callable[[], None] = lambda: None) -> float:
    times = []
    for _ in range(calls):
        before()
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(name: str, directory: Path, calls: int) -> None:
    path = str(directory)
    executable = resolve_executable(name, path)
    assert executable is not None
    program = launch.resolve_program(executable, path)
    size = sum(f.size for f in program.files())

    def pin() -> None:
        with launch.pinned(program, program.pins()):
            pass

    rows = [
        ("baseline: PATH lookup", median_ms(lambda: resolve_executable(name, path), calls)),
        ("resolve (no hash)", median_ms(lambda: launch.resolve_program(executable, path, with_hash=False), calls)),
        ("approve, cold", median_ms(lambda: launch.resolve_program(executable, path), calls,
                                    before=launch._hash_cache.clear)),
        ("approve, warm", median_ms(lambda: launch.resolve_program(executable, path), calls)),
        ("pin (worker)", median_ms(pin, calls, before=launch._hash_cache.clear)),
    ]
    base = rows[0][1]
    print(f"\n{name}: {' -> '.join(program.argv_prefix)} ({len(program.files())} files, {size / 1e6:.1f} MB)")
    for label, ms in rows:
        print(f"  {label:<24} {ms:9.3f} ms   x{ms / base:10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        script = directory / "agent-py"
        script.write_text(f"#!{sys.executable}\nprint('hi')\n")
        script.chmod(0o755)
        measure("agent-py", directory, options.calls)
        node = shutil.which("node")
        if node:
            (directory / "node").symlink_to(node)
            script = directory / "agent-node"
            script.write_text("#!/usr/bin/env node\nconsole.log('hi')\n")
            script.chmod(0o755)
            measure("agent-node", directory, options.calls)
        else:
            print("\nagent-node: skipped, no node on PATH")


if __name__ == "__main__":
    main()
