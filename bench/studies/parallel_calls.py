"""Calls issued together: the wall time of four ``sleep 1`` calls issued at once, and a ``read`` issued
while a long command runs against the same ``read`` on an idle session, through every front end.

Fronts: an embedded ``Session`` called from four threads, ``AsyncSession`` (``asyncio.gather``),
``peon mcp`` through the official MCP SDK (four requests in flight on one connection), one ``peon
serve`` with four ``AsyncRemoteSession`` clients, and one ``RemoteSession`` called from four threads.
With calls run side by side (``limits.max_parallel_calls`` > 1) the four end in about the time of one;
one at a time (``--max-parallel 1``) they take four times as long. The ``read`` rows give the median of
``--reads`` reads on an idle session, and the slowest of up to ``--reads`` reads issued while a ``sleep
5`` runs in the same session.

Run: ``python bench/studies/parallel_calls.py [--max-parallel 8] [--reads 20]
[--fronts embedded,async,mcp,serve,remote]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import peon
from bench.lib import mcp_servers
from bench.lib.mcp_servers import PEON, SERVER_LOG

SLEEP = {"command": "sleep 1"}
LONG = {"command": "sleep 5"}
TOGETHER = 4


def config(max_parallel: int) -> dict[str, Any]:
    return {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow"},
            "limits": {"max_parallel_calls": max_parallel}}


def _threads(call: Callable[[], Any], count: int) -> float:
    """Seconds from the start of ``count`` threads each making ``call`` to the end of the last."""
    start = time.monotonic()
    threads = [threading.Thread(target=call) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - start


async def _gathered(call: Callable[[], Awaitable[Any]], count: int) -> float:
    start = time.monotonic()
    await asyncio.gather(*(call() for _ in range(count)))
    return time.monotonic() - start


async def _reads(read: Callable[[], Awaitable[Any]], long: Callable[[], Awaitable[Any]],
                 count: int) -> tuple[float, float]:
    """(median idle read, slowest read issued while ``long`` runs), in seconds: one call run at a time
    makes the first read issued during ``long`` wait for it."""
    async def timed() -> float:
        start = time.monotonic()
        await read()
        return time.monotonic() - start
    idle = [await timed() for _ in range(count)]
    running = asyncio.ensure_future(long())
    await asyncio.sleep(0.3)  # the long command has started
    busy: list[float] = []
    while len(busy) < count and not running.done():
        busy.append(await timed())
    await running
    return statistics.median(idle), max(busy)


def _from_threads(session: Any, reads: int) -> tuple[float, float, float]:
    """The figures of a session whose ``call`` blocks (``Session``, ``RemoteSession``), called from threads."""
    session.call("bash", {"command": "true"})  # standbys up
    together = _threads(lambda: session.call("bash", SLEEP), TOGETHER)

    async def read() -> Any:
        return await asyncio.to_thread(session.call, "read", {"path": "f.txt"})

    async def long() -> Any:
        return await asyncio.to_thread(session.call, "bash", LONG)
    idle, busy = asyncio.run(_reads(read, long, reads))
    return together, idle, busy


def embedded(ws: Path, cfg: dict[str, Any], reads: int) -> tuple[float, float, float]:
    with peon.Session(ws, cfg) as session:
        return _from_threads(session, reads)


async def async_session(ws: Path, cfg: dict[str, Any], reads: int) -> tuple[float, float, float]:
    async with peon.AsyncSession(ws, cfg) as session:
        await session.call("bash", {"command": "true"})
        together = await _gathered(lambda: session.call("bash", SLEEP), TOGETHER)
        idle, busy = await _reads(lambda: session.call("read", {"path": "f.txt"}),
                                  lambda: session.call("bash", LONG), reads)
    return together, idle, busy


async def mcp(ws: Path, cfg: dict[str, Any], reads: int) -> tuple[float, float, float]:
    config_file = ws.parent / "peon.toml"
    config_file.write_text("[approval]\nread_only = \"allow\"\nfilesystem = \"allow\"\nprocess = \"allow\"\n"
                           f"[limits]\nmax_parallel_calls = {cfg['limits']['max_parallel_calls']}\n")
    env = mcp_servers.server_env(ws.parent)
    async with mcp_servers.connect([str(PEON), "mcp", "--workspace", str(ws), "--config", str(config_file)],
                                   env, ws) as client:
        await client.call_tool("bash", {"command": "true"})
        together = await _gathered(lambda: client.call_tool("bash", SLEEP), TOGETHER)
        idle, busy = await _reads(lambda: client.call_tool("read", {"path": "f.txt"}),
                                  lambda: client.call_tool("bash", LONG), reads)
    return together, idle, busy


@contextlib.contextmanager
def serving(ws: Path, max_parallel: int) -> Any:
    port_file = ws.parent / "serve.port"
    config_file = ws.parent / "serve.toml"
    config_file.write_text(f"[limits]\nmax_parallel_calls = {max_parallel}\n")
    server = subprocess.Popen([str(PEON), "serve", "--workspace", str(ws), "--host", "127.0.0.1", "--port", "0",
                               "--port-file", str(port_file), "--allow", "process", "--allow", "filesystem",
                               "--config", str(config_file)],
                              env=mcp_servers.server_env(ws.parent), cwd=ws, stdin=subprocess.DEVNULL,
                              stdout=SERVER_LOG["file"], stderr=SERVER_LOG["file"])
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):  # written once it serves
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"peon serve did not start (exit status {server.poll()})")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{int(port_file.read_text())}/mcp"
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


async def serve(ws: Path, cfg: dict[str, Any], reads: int) -> tuple[float, float, float]:
    with serving(ws, cfg["limits"]["max_parallel_calls"]) as url:
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(peon.AsyncRemoteSession(url)) for _ in range(TOGETHER)]
            await clients[0].call("bash", {"command": "true"})
            start = time.monotonic()
            await asyncio.gather(*(client.call("bash", SLEEP) for client in clients))
            together = time.monotonic() - start
            idle, busy = await _reads(lambda: clients[0].call("read", {"path": "f.txt"}),
                                      lambda: clients[1].call("bash", LONG), reads)
    return together, idle, busy


def remote(ws: Path, cfg: dict[str, Any], reads: int) -> tuple[float, float, float]:
    with serving(ws, cfg["limits"]["max_parallel_calls"]) as url, peon.RemoteSession(url) as session:
        return _from_threads(session, reads)


FRONTS: dict[str, Callable[[Path, dict[str, Any], int], Any]] = {
    "embedded": embedded, "async": async_session, "mcp": mcp, "serve": serve, "remote": remote}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-parallel", type=int, default=8)
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--fronts", default=",".join(FRONTS))
    options = parser.parse_args()
    print(f"| front (max_parallel_calls = {options.max_parallel}) | four `sleep 1` issued together "
          "| `read` idle (median) | `read` issued while `sleep 5` runs (slowest) |")
    print("|---|---|---|---|")
    for name in options.fronts.split(","):
        with tempfile.TemporaryDirectory() as root:
            ws = Path(root) / "ws"
            ws.mkdir()
            (ws / "f.txt").write_text("x" * 4096)
            SERVER_LOG["file"] = open(Path(root) / "server.log", "w")  # noqa: SIM115 - closed with the run
            try:
                outcome = FRONTS[name](ws, config(options.max_parallel), options.reads)
                if asyncio.iscoroutine(outcome):
                    outcome = asyncio.run(outcome)
            finally:
                SERVER_LOG["file"].close()
            together, idle, busy = outcome
            print(f"| {name} | {together:.2f} s | {idle * 1e3:.1f} ms | {busy * 1e3:.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
