"""``read`` latency through a session, against starting ``/bin/cat`` and plain Python file reads
measured in the same run.

1. A 4 KiB file: median of ``session.call("read", {"path": "small.txt"})`` against
   ``subprocess.run(["/bin/cat", path], stdout=PIPE)`` (the cost of one tiny process start: target
   ratio <= 1.0 — a read through Peon, in a dedicated worker, costs no more) and against
   ``open(path, "rb").seek(0).read()`` of the same file. The cases take turns in blocks of consecutive
   calls (:mod:`bench.lib.rhythm`): each timed call comes right after one of its own kind.
2. A 64 KiB slice at offset 1 GiB of a 2 GiB sparse file (the slice holds text, the rest is a hole):
   median of ``session.call("read", {"path": "sparse.bin", "offset": 1 GiB, "limit": 64 KiB})`` against
   ``open().seek(1 GiB).read(64 KiB)``.

Prints medians and 90th percentiles, the session/plain ratios, and the ratio of the 64 KiB slice to
the 4 KiB read through the session (the slice of a 2 GiB file should cost about what 64 KiB costs, not
what 2 GiB would). Two more rows explain the gap: the same read done in-process by the tool's own code
(``peon.tools.read.read_file``: open the root, parse, openat2, fstat, read, sha256 of files up to 16
MiB, UTF-8 check), and the floor of any call through a session (a tool that returns ``{}`` at once,
still validated, approved and run in a worker). Through a session a read also resolves its path
twice (in the supervisor, for rating and approval, and in the worker, to insist on what was approved).

   The 4 KiB read is measured again with 100 ms between calls, an agent's rhythm (``--apart-calls``),
   against ``/bin/cat`` likewise: a call that finds its worker waiting and the machine idle; the no-op
   floor too. ``bench/targets.py`` takes each floor as the best the target could be: a read through
   a worker costs at least what a call that does nothing there costs.

   The design's floors, from nothing of Peon's (:mod:`bench.lib.bare_worker`), back to back and apart: the
   4 KiB file read by a bare ``multiprocessing`` worker that serves call after call (a message to a waiting
   process and the bytes back, in ``Connection`` frames, as a session's worker is asked), and the
   design's whole path: the request handed to a bare supervisor process that has it read by a reused
   bare worker of its own, as a session's supervisor does (four hops between processes, nothing else).

   The former design's floors, a worker per call: the file read by a bare ``multiprocessing`` worker
   per call (the ``forkserver`` context, one standby ahead, with no validation, approval, audit, cgroup
   or event loop), back to back and apart, back to back by a worker forked by hand (``os.fork`` of this
   process, whose RSS is printed beside it), and through a bare supervisor having it read by a bare
   worker per call of its own, back to back and apart.

   Why calls apart cost what they do: the same work done in this process back to back and after
   10 ms idle (``--idle-rounds``) — the admission of the read (``peon.approval.admission.admit``: validate,
   rate, ask the policy), the read done by the tool's own code, and a start of ``/bin/cat``. On a
   machine whose caches go cold while a CPU idles, Python code that touches many objects slows down
   far more than a process start does, and a call through Peon runs such code in three processes. A
   loop of 2,000 additions (small code, no data to speak of) is timed likewise: what idling does to
   this machine's CPU itself.

3. The cost of ``read``'s ``sha256``: the in-process 4 KiB read with and without hashing, and a 16 MiB
   file (the largest that is hashed) read whole with and without hashing, as microseconds per MiB.

Run: ``python bench/suite/bench_read.py [--calls N] [--apart-calls N] [--idle-rounds N]
[--resolver auto|openat2|walk]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

import psutil

import peon
from bench.lib import bare_worker
from bench.lib.figures import record
from bench.lib.rhythm import apart, back_to_back
from peon.approval.admission import admit
from peon.client.config import load_config
from peon.core.config_view import ResolvedConfig
from peon.core.paths import parse_file_path
from peon.approval.policy import ApprovalPolicy
from peon.core.tool import SessionView
from peon.tools import BUILTIN_TOOLS
from peon.approval.validation import load_validator
from peon.tools.read import SHA256_MAX_FILE_BYTES, read_file
from peon.workers import fs

CONFIG = {"approval": {"read_only": "allow", "filesystem": "allow"}}
SMALL = 4096
SLICE = 64 * 1024
OFFSET = 1 << 30
SPARSE_SIZE = 2 << 30


def plain_read(path: Path, offset: int, length: int | None) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read() if length is None else f.read(length)


def read_in_process(ws: Path, path, offset: int, limit: int | None, max_bytes: int, resolver: fs.Resolver,
               hash_max_bytes: int = SHA256_MAX_FILE_BYTES) -> dict:
    root = fs.open_root(ws)
    try:
        return read_file(root, path, offset, limit, max_bytes, resolver, hash_max_bytes=hash_max_bytes)
    finally:
        os.close(root)


def resolve_once(ws: Path, path) -> None:
    """What a read adds per call in each of the supervisor and the worker: open the root, resolve."""
    root = fs.open_root(ws)
    try:
        fs.resolve(root, path, follow_final=True, must_exist=True)
    finally:
        os.close(root)


def hash_cost(ws: Path, resolver: fs.Resolver, rounds: int) -> tuple[float, float]:
    """(hashing, plain) medians for reading a 16 MiB file whole through fs.read_window."""
    big = ws / "hashed.bin"
    big.write_bytes(os.urandom(SHA256_MAX_FILE_BYTES))
    path = parse_file_path("hashed.bin")
    root = fs.open_root(ws)
    try:
        runs = back_to_back({
            "hashing": lambda: fs.read_window(root, path, resolver, lambda total: (0, total),
                                              hash_max_bytes=SHA256_MAX_FILE_BYTES),
            "plain": lambda: fs.read_window(root, path, resolver, lambda total: (0, total)),
        }, rounds)
    finally:
        os.close(root)
    big.unlink()
    return statistics.median(runs["hashing"]), statistics.median(runs["plain"])


def admission_of_read(ws: Path, env: dict[str, str]):
    """``admit`` of a 4 KiB read with the built-in tools and this benchmark's policy, as the supervisor runs it."""
    resolved = ResolvedConfig(load_config(CONFIG, workspace=ws, env=env).to_wire())
    view = SessionView(workspace=ws, config=resolved.config, env={"PATH": "/usr/bin:/bin"})
    tools = {tool.name: tool for tool in (cls() for cls in BUILTIN_TOOLS)}
    schemas = {name: tool.schema_for(view) for name, tool in tools.items()}
    load_validator(schemas.values())
    policy = ApprovalPolicy.from_loaded(resolved)

    def run() -> None:
        admission = admit(call_id="bench", tool_name="read", raw_args={"path": "small.txt"}, tools=tools,
                          schemas=schemas, view=view, policy=policy)
        assert admission.error is None, admission.error

    return run


def busy_loop() -> int:
    total = 0
    for i in range(2000):
        total += i
    return total


def idle_penalty(cases: dict, rounds: int, idle: float = 0.01) -> dict[str, tuple[float, float]]:
    """Median of each case back to back and after ``idle`` seconds of sleep, interleaved."""
    hot: dict[str, list[float]] = {name: [] for name in cases}
    cold: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            for _ in range(3):
                fn()
            started = time.perf_counter()
            fn()
            hot[name].append(time.perf_counter() - started)
            time.sleep(idle)
            started = time.perf_counter()
            fn()
            cold[name].append(time.perf_counter() - started)
    return {name: (statistics.median(hot[name]), statistics.median(cold[name])) for name in cases}


def describe(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="timed calls per case (default 300)")
    parser.add_argument("--resolver", default="auto", choices=["auto", "openat2", "walk"])
    parser.add_argument("--apart-calls", type=int, default=50,
                        help="calls 100 ms apart, an agent's rhythm (default 50)")
    parser.add_argument("--idle-rounds", type=int, default=40,
                        help="rounds of in-process work back to back and after 10 ms idle (default 40)")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="peon-bench-read-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        small = ws / "small.txt"
        small.write_bytes((b"0123456789abcdef" * (SMALL // 16))[:SMALL])
        sparse = ws / "sparse.bin"
        with open(sparse, "wb") as f:
            f.truncate(SPARSE_SIZE)
            f.seek(OFFSET)
            f.write((b"the quick brown fox jumps over the lazy dog\n" * (SLICE // 44 + 1))[:SLICE])
        allocated = os.stat(sparse).st_blocks * 512

        # The session imports the no-op tool as it imports an embedder's: by its import path, from the
        # checkout put on its PYTHONPATH.
        checkout = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PEON_FS_RESOLVER=options.resolver,
                   PYTHONPATH=os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p))
        resolver = fs.choose_resolver(options.resolver)
        with peon.Session(ws, CONFIG, state_dir=Path(tmp) / "state", env=env,
                          tools=["bench.lib.noop_tool:NoopTool"]) as session:
            small_args = {"path": "small.txt"}
            slice_args = {"path": "sparse.bin", "offset": OFFSET, "limit": SLICE}
            for args, size in ((small_args, SMALL), (slice_args, SLICE)):  # warm up, and check the answers
                for _ in range(20):
                    result = session.call("read", args)
                    assert result.ok and result.value["bytes"] == size, result
            bare, forked = bare_worker.MultiprocessingReader(small), bare_worker.ForkReader(small)
            supervised = bare_worker.SupervisedReader(small)
            reused, reused_supervised = bare_worker.ReusedWorker("read", small), \
                bare_worker.SupervisedReusedWorker("read", small)
            assert bare() == forked() == supervised() == reused() == reused_supervised() == small.read_bytes()
            rss = psutil.Process().memory_info().rss
            small_path, slice_path = parse_file_path("small.txt"), parse_file_path("sparse.bin")
            max_bytes = session.info["config"]["limits"]["read_max_bytes"]
            # In alternating blocks of consecutive calls (bench/lib/rhythm.py): load from elsewhere falls on all alike.
            runs = back_to_back({
                "session 4k": lambda: session.call("read", small_args),
                "session slice": lambda: session.call("read", slice_args),
                "floor": lambda: session.call("bench_noop", {}),
                "bare multiprocessing": bare,
                "bare fork": forked,
                "bare supervisor": supervised,
                "reused worker": reused,
                "reused supervisor": reused_supervised,
                "plain 4k": lambda: plain_read(small, 0, None),
                "cat 4k": lambda: subprocess.run(["/bin/cat", str(small)], stdout=subprocess.PIPE, check=True),
                "plain slice": lambda: plain_read(sparse, OFFSET, SLICE),
                "in-process 4k": lambda: read_in_process(ws, small_path, 0, None, max_bytes, resolver),
                "in-process slice": lambda: read_in_process(ws, slice_path, OFFSET, SLICE, max_bytes, resolver),
            }, options.calls)
            forked.close()
            spaced = apart({  # the standby is ready and the machine idle when each comes
                "session": lambda: session.call("read", small_args),
                "floor": lambda: session.call("bench_noop", {}),
                "bare multiprocessing": bare,
                "bare supervisor": supervised,
                "reused worker": reused,
                "reused supervisor": reused_supervised,
                "cat": lambda: subprocess.run(["/bin/cat", str(small)], stdout=subprocess.PIPE, check=True),
            }, options.apart_calls, 0.1)
            for reader in (bare, supervised, reused, reused_supervised):
                reader.close()
        # Away from session calls, whose background work (the next standby worker) slows what follows.
        sha = back_to_back({
            "with": lambda: read_in_process(ws, small_path, 0, None, max_bytes, resolver),
            "without": lambda: read_in_process(ws, small_path, 0, None, max_bytes, resolver, -1),
        }, options.calls)
        hashing, unhashed = hash_cost(ws, resolver, max(5, options.calls // 30))
        resolving = back_to_back({"resolve": lambda: resolve_once(ws, small_path)}, options.calls)["resolve"]
        idle = idle_penalty({
            "admission of the read": admission_of_read(ws, env),
            "the read in-process": lambda: read_in_process(ws, small_path, 0, None, max_bytes, resolver),
            "starting /bin/cat": lambda: subprocess.run(["/bin/cat", str(small)], stdout=subprocess.PIPE, check=True),
            "a loop of 2,000 additions": busy_loop,  # the machine's own: small code, no data
        }, options.idle_rounds)
        cases = {
            "4 KiB file": (runs["session 4k"], runs["plain 4k"], runs["in-process 4k"]),
            "64 KiB at 1 GiB of 2 GiB sparse": (runs["session slice"], runs["plain slice"], runs["in-process slice"]),
        }
        floor = runs["floor"]
        cat = runs["cat 4k"]
        bare_mp, bare_fork = describe(runs["bare multiprocessing"])[0], describe(runs["bare fork"])[0]
        bare_sup = describe(runs["bare supervisor"])[0]
        reused_med, reused_sup = describe(runs["reused worker"])[0], describe(runs["reused supervisor"])[0]

    print(f"read latency, {options.calls} calls per case, resolver {resolver.value}, "
          f"sparse file {SPARSE_SIZE >> 30} GiB with {allocated >> 10} KiB allocated")
    print(f"{'case':<34} {'Session.call':>12} {'p90':>9} {'plain':>9} {'ratio':>6} {'in-process':>11}")
    medians = {}
    for name, (through_session, plain, in_process) in cases.items():
        s_med, s_p90 = describe(through_session)
        p_med, _ = describe(plain)
        i_med, _ = describe(in_process)
        medians[name] = s_med
        print(f"{name:<34} {s_med * 1e6:>9.0f} us {s_p90 * 1e6:>6.0f} us {p_med * 1e6:>6.1f} us "
              f"{s_med / p_med:>5.0f}x {i_med * 1e6:>8.1f} us")
    c_med, c_p90 = describe(cat)
    print(f"{'/bin/cat of the 4 KiB file':<34} {c_med * 1e6:>9.0f} us {c_p90 * 1e6:>6.0f} us")
    print(f"read 4 KiB through the session / starting /bin/cat on it: {medians['4 KiB file'] / c_med:.2f}x "
          "(target <= 1.0)")
    f_med, f_p90 = describe(floor)
    record("read.back_to_back", medians["4 KiB file"] * 1e3, "ms", baseline=c_med * 1e3, against="starting /bin/cat",
           calls=options.calls, floor=f_med * 1e3, bare_multiprocessing=bare_mp * 1e3, bare_fork=bare_fork * 1e3,
           bare_supervised=bare_sup * 1e3, reused=reused_med * 1e3, reused_supervised=reused_sup * 1e3)
    a_med, _ = describe(spaced["session"])
    ac_med, _ = describe(spaced["cat"])
    af_med, _ = describe(spaced["floor"])
    ab_med, _ = describe(spaced["bare multiprocessing"])
    as_med, _ = describe(spaced["bare supervisor"])
    ar_med, _ = describe(spaced["reused worker"])
    ars_med, _ = describe(spaced["reused supervisor"])
    print(f"read 4 KiB 100 ms apart: {a_med * 1e6:.0f} us, /bin/cat {ac_med * 1e6:.0f} us: {a_med / ac_med:.2f}x "
          f"(target <= 1.0, {options.apart_calls} calls each); the no-op floor {af_med * 1e6:.0f} us, "
          f"a reused bare worker {ar_med * 1e6:.0f} us, through a bare supervisor {ars_med * 1e6:.0f} us; "
          f"the former design: a bare multiprocessing worker per call {ab_med * 1e6:.0f} us, through a bare "
          f"supervisor {as_med * 1e6:.0f} us")
    record("read.apart", a_med * 1e3, "ms", baseline=ac_med * 1e3, against="starting /bin/cat",
           calls=options.apart_calls, floor=af_med * 1e3, bare_multiprocessing=ab_med * 1e3,
           bare_supervised=as_med * 1e3, reused=ar_med * 1e3, reused_supervised=ars_med * 1e3)
    print(f"{'per-call floor (no-op tool)':<34} {f_med * 1e6:>9.0f} us {f_p90 * 1e6:>6.0f} us")
    print(f"nothing of Peon's, a reused worker reading the 4 KiB file, back to back: {reused_med * 1e6:.0f} us "
          f"({reused_med / c_med:.2f}x /bin/cat), through a bare supervisor {reused_sup * 1e6:.0f} us "
          f"({reused_sup / c_med:.2f}x)")
    print(f"the former design, one worker per call reading the 4 KiB file, back to back: bare multiprocessing "
          f"{bare_mp * 1e6:.0f} us ({bare_mp / c_med:.2f}x /bin/cat), os.fork of this process ({rss >> 20} MiB RSS) "
          f"{bare_fork * 1e6:.0f} us ({bare_fork / c_med:.2f}x), through a bare supervisor "
          f"{bare_sup * 1e6:.0f} us ({bare_sup / c_med:.2f}x)")
    small_med, slice_med = medians.values()
    h_med, _ = describe(sha["with"])
    n_med, _ = describe(sha["without"])
    mib = SHA256_MAX_FILE_BYTES / (1 << 20)
    print(f"sha256: in-process 4 KiB read {h_med * 1e6:.1f} us with, {n_med * 1e6:.1f} us without "
          f"({(h_med - n_med) * 1e6:+.1f} us); a {mib:.0f} MiB file read whole {hashing * 1e3:.1f} ms with, "
          f"{unhashed * 1e3:.1f} ms without: {(hashing - unhashed) * 1e6 / mib:.0f} us per MiB; "
          f"files over {mib:.0f} MiB (the 2 GiB sparse file) are not hashed")
    print(f"resolving the path for approval (supervisor) and again before opening (worker): "
          f"{statistics.median(resolving) * 1e6:.1f} us each")
    print("the same work back to back / after 10 ms idle: " + "; ".join(
        f"{name} {hot * 1e6:.0f} / {cold * 1e6:.0f} us ({cold / hot:.1f}x)" for name, (hot, cold) in idle.items()))
    print(f"64 KiB slice / 4 KiB read through the session: {slice_med / small_med:.2f}x; "
          f"read above the no-op floor: 4 KiB {(small_med - f_med) * 1e6:+.0f} us, "
          f"64 KiB slice {(slice_med - f_med) * 1e6:+.0f} us")


if __name__ == "__main__":
    main()
