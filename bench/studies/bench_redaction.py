"""The cost and the false positives of redaction (docs/security.md, "Redaction").

Three parts, in one run:

* ``detector``: the redactor alone (:class:`peon.core.redaction.stream.StreamRedactor`, fed 1 MiB
  chunks) on ordinary text — the Python standard library's non-test modules, ``git log -p -n 200`` of
  this checkout (less the redaction's own code, tests and bench, which hold its formats on purpose), 10,000 each
  of UUIDs, 40-hex hashes and base64 of random bytes — and a flood (``yes``-like lines): MiB/s, and
  what it redacted in each (the false positives: target none).
* ``flood``: two sessions, redaction on and off (``[redaction] enabled``), each running a ``bash`` call
  that prints ``--flood-mib`` MiB (default 100) of log-like lines, rounds alternating between them; the
  CPU of the session's whole process tree (supervisor, forkserver, workers, commands: ``/proc``) per
  call. Target: on <= 1.10 x off.
* ``mix``: the same two sessions, the agent mix of ``cpu_per_call.py`` (reads, ``git status``, writes,
  ``ls``), ``--calls`` calls a round: CPU per call. Target: on <= 1.03 x off.

Run: ``python bench/studies/bench_redaction.py [--rounds 5] [--calls 100] [--flood-mib 100] [--part all]``
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

from bench.lib.process_cpu import tree_cpu
from bench.studies.cpu_per_call import CALLS, mix_workspace
from bench.studies.cpu_per_call import MIX as MIX_NAMES
from peon.core.redaction.redactor import Redactor
from peon.core.redaction.stream import StreamRedactor

CHECKOUT = Path(__file__).resolve().parents[2]
ALLOW = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow"}}
MIX = tuple(CALLS[name] for name in MIX_NAMES)  # the agent mix of cpu_per_call.py


def corpora() -> dict[str, bytes]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    modules = b"".join(path.read_bytes() for path in sorted(stdlib.rglob("*.py"))
                       if "test" not in path.relative_to(stdlib).as_posix() and "site-packages" not in path.parts)
    # (but the files that hold credentials' formats on purpose: the redaction's own code, tests and bench)
    git = subprocess.run(["git", "-C", str(CHECKOUT), "log", "-p", "-n", "200", "--", ".", ":!peon/core/redaction",
                          ":!tests/unit/test_redaction.py", ":!tests/unit/test_redaction_scan.py",
                          ":!tests/session/test_redacted_output.py", ":!tests/frontends/test_mcp_redaction.py",
                          ":!bench/studies/bench_redaction.py"], capture_output=True).stdout
    ids = "\n".join([str(uuid.uuid4()) for _ in range(10000)]
                    + [hashlib.sha1(str(i).encode()).hexdigest() for i in range(10000)]
                    + [base64.b64encode(os.urandom(48)).decode() for _ in range(10000)]).encode()
    flood = b"2026-12-07T06:00:00Z INFO worker 7 processed request 1234 in 12 ms\n" * (64 << 20 >> 6)
    return {"stdlib (non-test modules)": modules, "git log -p -n 200": git, "uuid + 40-hex + base64": ids,
            "flood (log lines)": flood}


def detector() -> None:
    redactor = Redactor({b"an-unrelated-session-secret": "env:SOME_TOKEN"}, key=b"bench")
    print("detector: MiB/s, and what it redacted (false positives)")
    for name, data in corpora().items():
        stream = StreamRedactor(redactor)
        started = time.process_time()
        for at in range(0, len(data), 1 << 20):
            stream.feed(data[at:at + (1 << 20)])
        stream.finish()
        took = time.process_time() - started
        print(f"  {name:28} {len(data) / 2**20:7.1f} MiB  {len(data) / 2**20 / max(took, 1e-9):7.0f} MiB/s  "
              f"redacted: {dict(stream.counts) or 'nothing'}")


def sessions(options: argparse.Namespace) -> None:
    import peon

    flood = (f"yes '2026-12-07T06:00:00Z INFO worker 7 processed request 1234 in 12 ms' "
             f"| head -c {options.flood_mib << 20}")
    figures: dict[str, dict[str, list[float]]] = {"flood": {"on": [], "off": []}, "mix": {"on": [], "off": []}}
    with tempfile.TemporaryDirectory(prefix="peon-bench-redaction-") as tmp:
        opened = {}
        for name, enabled in (("on", True), ("off", False)):
            root = Path(tmp) / name
            root.mkdir()
            env = {"HOME": str(root), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
                   "XDG_CONFIG_HOME": str(root / "config"), "GITHUB_TOKEN": "ghp_" + "B3nchT0ken" * 3 + "abcdef",
                   "DATABASE_PASSWORD": "not-a-real-password-42"}
            opened[name] = peon.Session(mix_workspace(root), {**ALLOW, "redaction": {"enabled": enabled}}, env=env,
                                        state_dir=root / "state")
        try:
            for index in range(options.rounds):
                for name in (("on", "off") if index % 2 == 0 else ("off", "on")):
                    session = opened[name]
                    if options.part in ("all", "flood"):
                        before = tree_cpu(session.supervisor_pid)
                        result = session.call("bash", {"command": flood})
                        assert result.ok, result.error
                        figures["flood"][name].append(tree_cpu(session.supervisor_pid) - before)
                    if options.part in ("all", "mix"):
                        before = tree_cpu(session.supervisor_pid)
                        for call in range(options.calls):
                            tool, args = MIX[call % len(MIX)]
                            assert session.call(tool, args).ok
                        figures["mix"][name].append((tree_cpu(session.supervisor_pid) - before) / options.calls)
        finally:
            for session in opened.values():
                session.close()
    for part, by_name in figures.items():
        if not by_name["on"]:
            continue
        on, off = statistics.median(by_name["on"]), statistics.median(by_name["off"])
        unit = f"s for {options.flood_mib} MiB" if part == "flood" else "ms per call"
        scale = 1 if part == "flood" else 1000
        target = 1.10 if part == "flood" else 1.03
        print(f"{part}: redaction on {on * scale:.3f} {unit}, off {off * scale:.3f}: "
              f"{on / off if off else float('nan'):.3f} x (target <= {target} x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--flood-mib", type=int, default=100)
    parser.add_argument("--part", choices=["all", "detector", "flood", "mix"], default="all")
    options = parser.parse_args()
    if options.part in ("all", "detector"):
        detector()
    if options.part != "detector":
        sessions(options)


if __name__ == "__main__":
    main()
