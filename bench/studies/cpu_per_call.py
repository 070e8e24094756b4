"""CPU per call by process, of one checkout or of several side by side (A/B, interleaved in one run).

For each checkout given (``--tree NAME=PATH``, this one by default) a driver process imports Peon from
that checkout and keeps one session open (embedded, or a ``peon mcp`` of that checkout through the
official MCP client); the drivers then take turns, round by round in alternating order, each running
``--calls`` calls of one tool (back to back, or ``--apart`` seconds apart) and reporting the CPU time its
session's processes used per call:

* ``client``: the driver itself (the embedding application's share: the session's threads, and for
  ``peon mcp`` the MCP client), from ``getrusage``;
* ``front end``: the ``peon mcp`` process (its threads' ``schedstat``, in nanoseconds);
* ``supervisor``: the supervisor's threads (``schedstat``);
* ``workers``: the session's cgroup (``cpu.stat`` ``usage_usec``): the forkserver, every worker and every
  command they started, the ones that exited included; in process-tree containment the forkserver's
  own and reaped CPU and its live children's, from ``/proc`` (clock ticks).

The server's CPU is all but the client's. Load from the rest of the machine does not enter these figures
(unlike wall time), and taking turns puts what it does to caches and frequency on each checkout alike.
The medians over rounds are printed, with the ratio of each checkout to the first.

Run: ``python bench/studies/cpu_per_call.py [--tree base=/path/to/old/checkout] [--tree new=.] [--tool read]
[--front embedded|mcp] [--calls 200] [--rounds 5] [--apart 0]``
(tools: ``read`` 4 KiB, ``bash`` ``true``, ``write`` 2 KiB, ``status`` ``git status --short``, ``ls``, ``noop``
(a ``read`` of a missing file: validated, rated, answered by the supervisor), ``mix`` (the agent mix of
``bench_agents.py``).)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
CHECKOUT = HERE.parents[2]
TICKS = os.sysconf("SC_CLK_TCK")
ALLOW = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow"}}
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "read": ("read", {"path": "four_kib.txt"}),
    "bash": ("bash", {"command": "true"}),
    "write": ("write", {"path": "two_kib.txt", "content": "w" * 2047 + "\n", "mode": "replace"}),
    "status": ("bash", {"command": "git status --short"}),
    "ls": ("bash", {"command": "ls"}),
    "noop": ("read", {"path": "missing.txt"}),
}
MIX = ("read", "status", "read", "write", "read", "ls", "read", "status", "read", "write")


# -- the driver (a process per checkout) -------------------------------------------------------------


def _schedstat_ns(pid: int) -> int:
    """CPU time of every live thread of ``pid``, in nanoseconds (0 once it is gone)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def _stat_seconds(pid: int) -> tuple[float, float]:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    utime, stime, cutime, cstime = (int(x) / TICKS for x in fields[11:15])
    return utime + stime, cutime + cstime


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            found += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Roles:
    """Samples the CPU of a session's processes, by role, in seconds."""

    def __init__(self, supervisor: int, front: int | None, cgroup: str | None):
        self.supervisor = supervisor
        self.front = front
        self.cgroup = Path(cgroup) if cgroup else None

    def _workers(self) -> float:
        if self.cgroup is not None:
            for line in (self.cgroup / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        total = 0.0
        for child in _children(self.supervisor):
            if "forkserver" in _cmdline(child):
                own, reaped = _stat_seconds(child)
                total += own + reaped + sum(sum(_stat_seconds(worker)) for worker in _children(child))
        return total

    def sample(self) -> dict[str, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        figures = {"client": usage.ru_utime + usage.ru_stime}
        if self.front is not None:
            figures["front end"] = _schedstat_ns(self.front) / 1e9
        figures["supervisor"] = _schedstat_ns(self.supervisor) / 1e9
        figures["workers"] = self._workers()
        return figures


def mix_workspace(root: Path) -> Path:
    """The workspace the mix runs in: a repository holding the files its calls read and write."""
    ws = root / "ws"
    ws.mkdir()
    (ws / "four_kib.txt").write_text(("x" * 63 + "\n") * 64)
    (ws / "two_kib.txt").write_text("")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run(["git", "-C", str(ws), "add", "."], check=True)
    subprocess.run(["git", "-C", str(ws), "-c", "user.name=bench", "-c", "user.email=bench@localhost",
                    "commit", "-q", "-m", "start"], check=True)
    return ws


def _env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
            "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config")}


def drive(options: argparse.Namespace) -> None:
    """The driver: one session of this checkout's Peon; a round per ``go`` line on stdin."""
    kinds = list(MIX) if options.tool == "mix" else [options.tool]
    with tempfile.TemporaryDirectory(prefix="peon-bench-cpu-ab-") as tmp:
        ws = mix_workspace(Path(tmp))
        env = _env(Path(tmp))
        if options.front == "mcp":
            import asyncio

            asyncio.run(_drive_mcp(options, ws, env, kinds))
            return
        import peon

        config = {**ALLOW, **json.loads(options.config)}
        with peon.Session(ws, config, env=env, state_dir=Path(tmp) / "state") as session:
            roles = Roles(session.supervisor_pid, None, (session.info.get("containment") or {}).get("cgroup"))

            def call(kind: str) -> None:
                tool, args = CALLS[kind]
                result = session.call(tool, args)
                if not result.ok and kind != "noop":
                    raise RuntimeError(f"{tool} failed: {result.error}")

            _rounds(options, kinds, roles, call)


async def _drive_mcp(options: argparse.Namespace, ws: Path, env: dict[str, str], kinds: list[str]) -> None:
    import asyncio

    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {**env, "PYTHONPATH": options.tree}
    params = StdioServerParameters(command=sys.executable, args=["-m", "peon.cli", "mcp", "--workspace", str(ws),
                                                                 "--allow", "process", "--allow", "filesystem"],
                                   env=env, cwd=str(ws))
    before = set(_children(os.getpid()))
    async with Client(stdio_client(params, errlog=sys.stderr), mode="legacy") as client:
        await client.list_tools()
        [front] = [pid for pid in _children(os.getpid()) if pid not in before]
        supervisor = next(pid for pid in _children(front) if "supervisor" in _cmdline(pid))
        cgroup = None
        for line in Path(f"/proc/{supervisor}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                unified = Path("/sys/fs/cgroup/unified")
                base = unified if unified.is_dir() else Path("/sys/fs/cgroup")
                found = [p for p in (base / line[3:].lstrip("/")).glob("peon-*") if p.is_dir()]
                cgroup = str(found[0]) if found else None
        roles = Roles(supervisor, front, cgroup)
        loop = asyncio.get_running_loop()

        def call(kind: str) -> None:
            tool, args = CALLS[kind]
            result = asyncio.run_coroutine_threadsafe(client.call_tool(tool, args), loop).result()
            if result.is_error and kind != "noop":
                raise RuntimeError(f"{tool} failed: {result}")

        await asyncio.to_thread(_rounds, options, kinds, roles, call)


def _rounds(options: argparse.Namespace, kinds: list[str], roles: Roles, call: Any) -> None:
    for i in range(30):
        call(kinds[i % len(kinds)])
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        time.sleep(0.3)
        before = roles.sample()
        latencies = []
        for i in range(options.calls):
            if options.apart:
                time.sleep(options.apart)
            started = time.perf_counter()
            call(kinds[i % len(kinds)])
            latencies.append(time.perf_counter() - started)
        time.sleep(0.05)  # a retired worker's exit lands in the counts
        after = roles.sample()
        print(json.dumps({"cpu": {role: (after[role] - before[role]) / options.calls for role in after},
                          "median": statistics.median(latencies)}), flush=True)


# -- the comparison -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a checkout (repeatable)")
    parser.add_argument("--tool", default="read", choices=[*CALLS, "mix"])
    parser.add_argument("--front", default="embedded", choices=["embedded", "mcp"])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--apart", type=float, default=0.0, help="seconds between calls (0: back to back)")
    parser.add_argument("--config", default="{}", help="JSON merged over the approval settings (e.g. the sandbox)")
    parser.add_argument("--drive", help=argparse.SUPPRESS)  # internal: be the driver of this checkout
    options = parser.parse_args()
    if options.drive:
        options.tree = options.drive
        drive(options)
        return
    trees = dict(item.split("=", 1) for item in options.tree) if options.tree else {"this": str(CHECKOUT)}
    drivers: dict[str, subprocess.Popen[str]] = {}
    for name, path in trees.items():
        path = str(Path(path).resolve())
        env = {**os.environ, "PYTHONPATH": path}
        drivers[name] = subprocess.Popen(
            [sys.executable, str(HERE), "--drive", path, "--tool", options.tool, "--front", options.front,
             "--calls", str(options.calls), "--apart", str(options.apart), "--config", options.config],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=path)
    figures: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    try:
        for driver in drivers.values():
            assert driver.stdout is not None
            json.loads(driver.stdout.readline())
        names = list(trees)
        for round_no in range(options.rounds):
            for name in names if round_no % 2 == 0 else names[::-1]:
                driver = drivers[name]
                assert driver.stdin is not None and driver.stdout is not None
                driver.stdin.write("go\n")
                driver.stdin.flush()
                figures[name].append(json.loads(driver.stdout.readline()))
    finally:
        for driver in drivers.values():
            if driver.stdin is not None:
                driver.stdin.close()
            driver.wait(60)
    how = f"{options.apart * 1000:g} ms apart" if options.apart else "back to back"
    print(f"{options.tool} through {options.front}, {options.calls} calls {how} x {options.rounds} rounds; "
          f"CPU per call in ms (median over rounds); load average {os.getloadavg()[0]:.2f}")
    first: float | None = None
    for name, rounds in figures.items():
        roles = list(rounds[0]["cpu"])
        per_role = {role: statistics.median(r["cpu"][role] for r in rounds) * 1000 for role in roles}
        server = statistics.median(sum(v for k, v in r["cpu"].items() if k != "client") for r in rounds) * 1000
        first = server if first is None else first
        shown = "  ".join(f"{role} {value:.3f}" for role, value in per_role.items())
        print(f"  {name:<10} server {server:.3f} ({server / first:.2f}x)  {shown}  "
              f"wall median {statistics.median(r['median'] for r in rounds) * 1000:.2f}")


if __name__ == "__main__":
    main()
