"""MCP-level figures: ``peon mcp`` against peer MCP servers, side by side in the same run.

Every figure is measured through the official Python MCP SDK client (``mcp``, the ``test`` extra) over
stdio, with the ``initialize`` handshake for every server (the peers speak no 2026-07-28), from the same
process, interleaved server by server, repeated ``--rounds`` times; medians are printed with the ratio
against the peer and the target:

1. ``tools/call read`` of a 1 KiB file, back to back — Peon ≤ 1.0x ``@modelcontextprotocol/server-filesystem``
   ``read_text_file``;
2. ``tools/call bash {"command": "true"}`` — Peon ≤ 0.8x PyPI ``mcp-shell-server`` ``shell_execute``
   (``["true"]``; it runs the argv directly, Peon runs ``/bin/bash -lc``, so a ``bash -lc true`` started
   here with the servers' environment is timed too: the floor of Peon's figure);
3. back-to-back ``read`` throughput, calls/s — Peon ≥ server-filesystem (sequential: each call waits
   for the previous answer, as an agent does; also with 8 calls in flight);
4. process start to the first ``tools/list`` answer — Peon ≤ server-filesystem.

Peon's own share of a call is the MCP figure minus ``Session.call`` of the same tool measured in the
same run (the supervisor↔worker path), so the front end's cost and the core's are reported apart. A
``tools/call`` that the supervisor answers alone (invalid arguments: no worker) is timed as the floor
of Peon's ``read``; ``bench/targets.py`` prints each floor's ratio beside the target.

The peers are pinned and installed by ``bench/install_peers`` (server-filesystem from
``bench/js/package-lock.json``; mcp-shell-server from ``bench/peers/requirements.txt`` into its own
virtualenv, since it needs ``mcp<2`` and the client here is ``mcp`` 2.x). An absent peer is skipped with
a line saying so; Peon's figures are printed anyway.

The servers' stderr (banners, request logs) goes to a file of the run and is printed only if the run
fails.

Run: ``python bench/suite/bench_mcp.py [--rounds 3] [--calls 200] [--starts 10] [--profile DIR]``
(``--profile`` records ``py-spy`` flame graphs of ``peon mcp`` during the read loop, from the ``bench``
extra.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

import psutil
from mcp.client import Client

import peon
from bench.lib import mcp_servers
from bench.lib.figures import record
from bench.lib.mcp_servers import FILESYSTEM, PEON, SERVER_LOG, SHELL_SERVER

RAW_BASH = "bash -lc true"  # started by this process: the floor of Peon's bash
ALLOW = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow", "delegate": "allow"}}


@dataclass
class Server:
    """One MCP server as the benchmark starts it, and how it is asked for the two operations."""

    name: str
    command: list[str]
    env: dict[str, str]
    read: tuple[str, dict[str, Any]] | None = None
    bash: tuple[str, dict[str, Any]] | None = None
    pid: int | None = field(default=None, repr=False)


def connect(server: Server, cwd: Path) -> Client:
    return mcp_servers.connect(server.command, server.env, cwd)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


async def timed_calls(client: Client, tool: str, arguments: dict[str, Any], calls: int) -> list[float]:
    for _ in range(min(20, calls)):  # warm-up: caches, the standby worker, the JIT of the peer
        result = await client.call_tool(tool, arguments)
        assert not result.is_error, result
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        result = await client.call_tool(tool, arguments)
        times.append(time.perf_counter() - start)
        assert not result.is_error, result
    return times


async def pipelined(client: Client, tool: str, arguments: dict[str, Any], calls: int, in_flight: int) -> float:
    """Calls per second with ``in_flight`` requests outstanding at any moment."""
    gate = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with gate:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(calls):
            group.create_task(one())
    return calls / (time.perf_counter() - start)


async def start_to_answers(server: Server, cwd: Path) -> tuple[float, float]:
    """Seconds from spawning the server to its ``initialize`` answer and to its first ``tools/list`` answer."""
    start = time.perf_counter()
    async with connect(server, cwd) as client:
        initialized = time.perf_counter() - start
        listed = await client.list_tools()
        elapsed = time.perf_counter() - start
    assert listed.tools
    return initialized, elapsed


def server_process(server: Server) -> psutil.Process:
    """The server process the client started (a child of this process running the server's command)."""
    tail = server.command[1:]  # a script's command line starts with its interpreter
    for child in psutil.Process().children():
        try:
            cmdline = child.cmdline()
            if cmdline[len(cmdline) - len(tail):] == tail and Path(server.command[0]).name in " ".join(cmdline[:2]):
                return child
        except psutil.Error:
            continue
    raise LookupError(f"no process of {server.name}")


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


async def with_client(server: Server, cwd: Path, body: Callable[[Client], Awaitable[Any]]) -> Any:
    async with connect(server, cwd) as client:
        await client.list_tools()
        return await body(client)


async def interleaved(client: Client, session: peon.Session, tool: str, arguments: dict[str, Any], calls: int,
                      block: int = 10) -> tuple[list[float], list[float]]:
    """The same call through ``peon mcp`` and through ``Session.call`` (the supervisor↔worker path the
    front end sits on), alternating in blocks so both see the same machine; the first call of each
    block follows the other path's calls, and is not counted (see ``bench/lib/rhythm.py``)."""
    def direct(count: int) -> list[float]:
        times = []
        for _ in range(count):
            start = time.perf_counter()
            result = session.call(tool, arguments)
            times.append(time.perf_counter() - start)
            assert result.ok, result
        return times

    for _ in range(min(20, calls)):  # warm-up
        await client.call_tool(tool, arguments)
    await asyncio.to_thread(direct, min(20, calls))
    through_mcp: list[float] = []
    through_session: list[float] = []
    while len(through_mcp) < calls:
        mcp_block = []
        for _ in range(block):
            start = time.perf_counter()
            result = await client.call_tool(tool, arguments)
            mcp_block.append(time.perf_counter() - start)
            assert not result.is_error, result
        through_mcp += mcp_block[1:]
        through_session += (await asyncio.to_thread(direct, block))[1:]
    return through_mcp, through_session


def servers(workspace: Path, env: dict[str, str]) -> tuple[Server, list[Server]]:
    target = str(workspace / "one_kib.txt")
    ours = Server("peon mcp", [str(PEON), "mcp", "--workspace", str(workspace), "--allow", "process"], env,
                  read=("read", {"path": "one_kib.txt"}), bash=("bash", {"command": "true"}))
    peers = []
    missing = mcp_servers.absent()
    for name, needs in missing.items():
        print(f"peer {name}: absent ({needs}) — skipped")
    if "server-filesystem" not in missing:
        peers.append(Server("server-filesystem", [shutil.which("node") or "node", str(FILESYSTEM), str(workspace)],
                            env, read=("read_text_file", {"path": target})))
    if "mcp-shell-server" not in missing:
        peers.append(Server("mcp-shell-server", [str(SHELL_SERVER)], {**env, "ALLOW_COMMANDS": "true"},
                            bash=("shell_execute", {"command": ["true"], "directory": str(workspace)})))
    return ours, peers


def profile(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy")
    if spy is None:
        print("profile: py-spy is not installed (pip install -e '.[bench]') — skipped")
        return None
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--duration", str(int(seconds) + 1), "--rate", "1000",
                             "--format", "speedscope", "--output", str(out), "--threads", "--subprocesses"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@dataclass
class Figures:
    values: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, server: str, what: str, value: float) -> None:
        self.values.setdefault((server, what), []).append(value)

    def median(self, server: str, what: str) -> float | None:
        found = self.values.get((server, what))
        return statistics.median(found) if found else None


async def one_round(ours: Server, peers: list[Server], workspace: Path, env: dict[str, str], args: argparse.Namespace,
                    figures: Figures, round_no: int) -> None:
    order = [ours, *peers] if round_no % 2 == 0 else [*peers, ours]
    for server in order:
        starts = [await start_to_answers(server, workspace) for _ in range(args.starts)]
        figures.add(server.name, "initialize", statistics.median(s[0] for s in starts))
        figures.add(server.name, "start", statistics.median(s[1] for s in starts))
    for server in order:
        if server.read:
            await with_client(server, workspace, reads_of(server, args, figures))
        if server.bash:
            await with_client(server, workspace, bashes_of(server, args, figures))
    raw = await asyncio.to_thread(raw_bash, env, args.calls)
    figures.add(RAW_BASH, "bash", statistics.median(raw))
    session = await asyncio.to_thread(peon.Session, workspace, ALLOW, env=env)
    try:
        for what in ("read", "bash"):
            tool, arguments = getattr(ours, what)

            async def share(client: Client, what: str = what, tool: str = tool,
                            arguments: dict[str, Any] = arguments) -> None:
                mcp, direct = await interleaved(client, session, tool, arguments, args.calls)
                figures.add(ours.name, f"{what}_interleaved", statistics.median(mcp))
                figures.add("Session.call", f"{what}_interleaved", statistics.median(direct))

            await with_client(ours, workspace, share)
    finally:
        await asyncio.to_thread(session.close)


def reads_of(server: Server, args: argparse.Namespace, figures: Figures) -> Callable[[Client], Awaitable[None]]:
    assert server.read is not None
    tool, arguments = server.read

    async def reads(client: Client) -> None:
        process = server_process(server)
        ping = await timed(client.send_ping, args.calls)
        figures.add(server.name, "ping", statistics.median(ping))
        if server.name == "peon mcp":  # answered by the supervisor alone: no worker runs
            invalid = await timed(lambda: client.call_tool(tool, {}), args.calls)
            figures.add(server.name, "supervisor_only", statistics.median(invalid))
        cpu, started = cpu_seconds(process), time.perf_counter()
        times = await timed_calls(client, tool, arguments, args.calls)
        figures.add(server.name, "read_seq_rate", args.calls / (time.perf_counter() - started))
        figures.add(server.name, "read_cpu", (cpu_seconds(process) - cpu) / (args.calls + min(20, args.calls)))
        figures.add(server.name, "read", statistics.median(times))
        figures.add(server.name, "read_rate_8", await pipelined(client, tool, arguments, args.calls, 8))

    return reads


def bashes_of(server: Server, args: argparse.Namespace, figures: Figures) -> Callable[[Client], Awaitable[None]]:
    assert server.bash is not None
    tool, arguments = server.bash

    async def bashes(client: Client) -> None:
        figures.add(server.name, "bash", statistics.median(await timed_calls(client, tool, arguments, args.calls)))

    return bashes


def raw_bash(env: dict[str, str], calls: int) -> list[float]:
    """``/bin/bash -lc true`` started from here, as Peon's ``bash`` starts it: no MCP, no Peon."""
    def start() -> None:
        subprocess.run(["/bin/bash", "-lc", "true"], env=env, check=True)

    for _ in range(min(20, calls)):
        start()
    times = []
    for _ in range(calls):
        begun = time.perf_counter()
        start()
        times.append(time.perf_counter() - begun)
    return times


async def timed(request: Callable[[], Awaitable[Any]], calls: int) -> list[float]:
    for _ in range(min(20, calls)):
        await request()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        await request()
        times.append(time.perf_counter() - start)
    return times


def report(figures: Figures, ours: Server, peers: list[Server], rounds: int) -> None:
    print(f"\nmedians over {rounds} round(s)")

    def line(label: str, what: str, fmt: Callable[[float], str]) -> None:
        for name in [ours.name, *(p.name for p in peers), "Session.call", RAW_BASH]:
            value = figures.median(name, what)
            if value is not None:
                print(f"  {label:<38} {name:<18} {fmt(value)}")

    def ratio(what: str, peer: str, target: str, key: str | None = None, unit: str = "ms",
              **floors: float | None) -> None:
        """Print the ratio; record the figure as ``key`` for bench/targets.py (in ``unit``: seconds are ms),
        with the ``floors`` measured (seconds, recorded as ms)."""
        mine, theirs = figures.median(ours.name, what), figures.median(peer, what)
        scale = 1000 if unit == "ms" else 1
        if key is not None and mine is not None:
            record(key, mine * scale, unit, baseline=None if theirs is None else theirs * scale, against=peer,
                   **{name: value * 1000 for name, value in floors.items() if value is not None})
        if mine is None or theirs is None:
            print(f"  ratio {what}: {peer} absent")
            return
        print(f"  ratio {what}: peon / {peer} = {mine / theirs:.2f}  (target {target})")

    line("tools/call read 1 KiB (per call)", "read", ms)
    ratio("read", "server-filesystem", "<= 1.0", "mcp.read",
          supervisor_only=figures.median(ours.name, "supervisor_only"))
    line("tools/call bash true (per call)", "bash", ms)
    ratio("bash", "mcp-shell-server", "<= 0.8", "mcp.bash", bash_lc=figures.median(RAW_BASH, "bash"))
    line("read, back to back (calls/s)", "read_seq_rate", lambda v: f"{v:.1f} calls/s")
    ratio("read_seq_rate", "server-filesystem", ">= 1.0", "mcp.read_rate", "calls/s")
    line("read, 8 in flight (calls/s)", "read_rate_8", lambda v: f"{v:.1f} calls/s")
    ratio("read_rate_8", "server-filesystem", ">= 1.0")
    line("start to first tools/list answer", "start", ms)
    ratio("start", "server-filesystem", "<= 1.0", "mcp.start")
    line("start to the initialize answer", "initialize", ms)
    line("ping round trip (client + transport)", "ping", ms)
    line("tools/call answered by the supervisor", "supervisor_only", ms)
    line("server CPU per read call", "read_cpu", ms)
    for what in ("read", "bash"):
        total = figures.median(ours.name, f"{what}_interleaved")
        core = figures.median("Session.call", f"{what}_interleaved")
        if total is not None and core is not None:
            print(f"  peon mcp's own share of {what}: {ms(total - core)} of {ms(total)} through MCP; Session.call "
                  f"{ms(core)} (interleaved in blocks of 10; the share includes the SDK client and the pipe)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--profile", type=Path, help="directory for py-spy profiles of peon mcp")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="peon-bench-mcp-") as tmp:
        home, workspace = Path(tmp) / "home", Path(tmp) / "ws"
        home.mkdir()
        workspace.mkdir()
        (workspace / "one_kib.txt").write_bytes(bytes(range(32, 127)) * 10 + b"x" * 74)  # 1024 bytes of text
        env = mcp_servers.server_env(home)
        ours, peers = servers(workspace, env)
        print(f"peon {peon.__version__}; python {sys.version.split()[0]}; node {shutil.which('node') or 'absent'}; "
              f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}; "
              f"{args.rounds} rounds x {args.calls} calls, {args.starts} starts")
        figures = Figures()
        log_path = Path(tmp) / "servers.log"
        with log_path.open("w+", encoding="utf-8", errors="replace") as log:
            SERVER_LOG["file"] = log
            try:
                for round_no in range(args.rounds):
                    await one_round(ours, peers, workspace, env, args, figures, round_no)
                    print(f"round {round_no + 1}: " + ", ".join(
                        f"{server}/{what} {values[-1]:.1f}/s" if what.startswith("read_") and "rate" in what else
                        f"{server}/{what} {values[-1] * 1000:.2f} ms"
                        for (server, what), values in figures.values.items()))
                if args.profile:
                    await profile_read_loop(ours, workspace, args)
            except BaseException:
                log.seek(0)
                tail = log.read()[-4000:]
                print(f"the servers' stderr (last {len(tail)} characters):\n{tail}", file=sys.stderr)
                raise
            finally:
                SERVER_LOG["file"] = sys.stderr
        report(figures, ours, peers, args.rounds)
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")


async def profile_read_loop(ours: Server, workspace: Path, args: argparse.Namespace) -> None:
    args.profile.mkdir(parents=True, exist_ok=True)
    tool, arguments = ours.read or ("read", {})

    async def body(client: Client) -> None:
        import psutil

        children = psutil.Process().children(recursive=True)
        front = next(p for p in children if "mcp" in p.cmdline() and "--workspace" in p.cmdline())
        out = args.profile / "peon-mcp-read.speedscope.json"
        spy = profile(front.pid, out, 5)
        if spy is None:
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            await client.call_tool(tool, arguments)
        spy.wait(30)
        print(f"profile: {out}")

    await with_client(ours, workspace, body)


if __name__ == "__main__":
    warnings.filterwarnings("ignore", message="ping is removed")  # every server here speaks 2025-11-25
    asyncio.run(main())
