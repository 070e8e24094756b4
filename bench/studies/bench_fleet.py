"""A fleet on one machine: N sandboxes, each its own Peon process with its own workspace, driven at the
same time — over MCP Streamable HTTP (``peon serve``, one loopback port each) and, as the baseline
measured in the same run, over MCP stdio (``peon mcp``, one process each).

The same calls in both: every sandbox runs ``--calls`` calls of ``--tool`` one after another (``read``
of a 1 KiB file, or ``bash true``), all sandboxes at once from one asyncio loop. Clients:

* ``stdio``  — the official MCP SDK client over stdio to ``peon mcp`` (2026-07-28);
* ``http``   — the official MCP SDK client over Streamable HTTP to ``peon serve`` (2026-07-28);
* ``remote`` — ``peon.AsyncRemoteSession`` (the SDK client plus Peon's result mapping and an idempotency
  key per call) to ``peon serve``.

Printed per client: throughput (calls/s over the whole fleet), p50 and p99 call latency, and their ratio
to stdio. Every call must be answered, in its own sandbox: the run fails otherwise. Repeat with
``--rounds`` (medians are printed); other processes on the machine move the figures.

Run: ``python bench/studies/bench_fleet.py [--servers 4] [--calls 100] [--tool read] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

import peon

START_SECONDS = 60.0


def arguments(tool: str, index: int) -> dict[str, Any]:
    return {"path": f"data-{index}.txt"} if tool == "read" else {"command": "true"}


def check(tool: str, index: int, value: dict[str, Any]) -> None:
    if tool == "read" and value.get("content") != f"{index:04d}" * 256:
        raise AssertionError(f"sandbox {index} read someone else's file: {str(value)[:80]}")


class Fleet:
    """N workspaces with their data, and the server processes of one transport."""

    def __init__(self, root: Path, count: int):
        self.root = root
        self.workspaces = []
        for index in range(count):
            workspace = root / f"sandbox-{index}"
            workspace.mkdir()
            (workspace / f"data-{index}.txt").write_text(f"{index:04d}" * 256)  # 1 KiB, different in each
            self.workspaces.append(workspace)
        home = root / "home"
        home.mkdir(exist_ok=True)
        self.env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
                    "XDG_CONFIG_HOME": str(home / "config")}
        self.env.pop("PEON_SERVE_TOKEN", None)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start_http(self) -> list[str]:
        urls, ports = [], []
        for index, workspace in enumerate(self.workspaces):
            port_file = self.root / f"port-{index}"
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "peon.cli", "serve", "-w", str(workspace), "--port", "0", "--port-file",
                 str(port_file), "--allow", "process", "--allow", "read_only"],
                env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            ports.append(port_file)
        deadline = time.monotonic() + START_SECONDS
        for port_file in ports:
            while not port_file.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("peon serve did not start")
                time.sleep(0.02)
            urls.append(f"http://127.0.0.1:{int(port_file.read_text())}/mcp")
        for url in urls:
            wait_ready(url, deadline)
        return urls

    def stdio_params(self, index: int) -> StdioServerParameters:
        command = [sys.executable, "-m", "peon.cli", "mcp", "--workspace", str(self.workspaces[index]),
                   "--allow", "process", "--allow", "read_only"]
        return StdioServerParameters(command=command[0], args=command[1:], env=self.env,
                                     cwd=str(self.workspaces[index]))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def wait_ready(url: str, deadline: float) -> None:
    import urllib.request

    ready = url.replace("/mcp", "/readyz")
    while True:
        try:
            with urllib.request.urlopen(ready, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not become ready")
        time.sleep(0.05)


async def drive_sdk(client: Client, index: int, tool: str, calls: int, latencies: list[float]) -> None:
    args = arguments(tool, index)
    for _ in range(calls):
        started = time.perf_counter()
        result = await client.call_tool(tool, args)
        latencies.append(time.perf_counter() - started)
        if result.is_error:
            raise AssertionError(f"sandbox {index}: {result.content}")
        check(tool, index, result.structured_content or {})


async def drive_remote(session: peon.AsyncRemoteSession, index: int, tool: str, calls: int,
                       latencies: list[float]) -> None:
    args = arguments(tool, index)
    for _ in range(calls):
        started = time.perf_counter()
        result = await session.call(tool, args)
        latencies.append(time.perf_counter() - started)
        if not result.ok:
            raise AssertionError(f"sandbox {index}: {result.error}")
        check(tool, index, result.value or {})


async def run_clients(open_clients: list[Any], drive: Any, tool: str, calls: int) -> tuple[float, list[float]]:
    """Open every client (not timed), then time all sandboxes' calls at once."""
    latencies: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(c) for c in open_clients]
        for index, client in enumerate(clients):  # one warm-up call each
            await drive(client, index, tool, 1, [])
        started = time.perf_counter()
        await asyncio.gather(*(drive(client, i, tool, calls, latencies) for i, client in enumerate(clients)))
        wall = time.perf_counter() - started
    if len(latencies) != len(clients) * calls:
        raise AssertionError(f"{len(latencies)} answers for {len(clients) * calls} calls")
    return wall, latencies


def figures(wall: float, latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {"throughput": len(latencies) / wall, "p50": statistics.median(ordered) * 1000,
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000}


def one_round(servers: int, calls: int, tool: str) -> dict[str, dict[str, float]]:
    root = Path(tempfile.mkdtemp(prefix="peon-fleet-"))
    fleet = Fleet(root, servers)
    out = {}
    try:
        stdio = [Client(fleet.stdio_params(i), mode="2026-07-28") for i in range(servers)]
        out["stdio"] = figures(*asyncio.run(run_clients(stdio, drive_sdk, tool, calls)))
        urls = fleet.start_http()
        http = [Client(url, mode="2026-07-28") for url in urls]
        out["http"] = figures(*asyncio.run(run_clients(http, drive_sdk, tool, calls)))
        remote = [peon.AsyncRemoteSession(url, protocol="2026-07-28") for url in urls]
        out["remote"] = figures(*asyncio.run(run_clients(remote, drive_remote, tool, calls)))
    finally:
        fleet.stop()
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--calls", type=int, default=100, help="calls per sandbox")
    parser.add_argument("--tool", choices=("read", "bash"), default="read")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    rounds = [one_round(options.servers, options.calls, options.tool) for _ in range(options.rounds)]
    print(f"fleet: {options.servers} sandboxes x {options.calls} calls of {options.tool}, {options.rounds} round(s), "
          f"medians; every call answered in its own sandbox")
    base = {key: statistics.median(r["stdio"][key] for r in rounds) for key in ("throughput", "p50", "p99")}
    for client in ("stdio", "http", "remote"):
        f = {key: statistics.median(r[client][key] for r in rounds) for key in ("throughput", "p50", "p99")}
        print(f"  {client:<7} {f['throughput']:8.1f} calls/s ({f['throughput'] / base['throughput']:.2f}x stdio)   "
              f"p50 {f['p50']:7.2f} ms ({f['p50'] / base['p50']:.2f}x)   p99 {f['p99']:7.2f} ms "
              f"({f['p99'] / base['p99']:.2f}x)")


if __name__ == "__main__":
    main()
