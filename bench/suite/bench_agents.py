"""Agents per host: the agent mix by N concurrent agents in steady state, CPU per call by process, p50/p99.

Each agent owns a workspace (a git repository with a 4 KiB file) and its own server, and repeats the
agent mix — ``read`` 4 KiB x5, ``git status --short`` x2, ``ls``, ``write`` 2 KiB x2, interleaved —
one call at a time, either *paced* (a think time drawn uniformly from 50-500 ms after each answer,
seeded) or *back to back*. For each N (default 1, 16, 64) it measures every front in **steady state**:
all N agents are open and calling, every one of them has had a call answered, and then a window of
``--window`` seconds (15; 5 back to back) is measured — the calls answered in it, their latencies, and
the CPU the processes used from its start to its end. It prints, per front:

* p50 and p99 of a call's latency as the agent sees it, and the calls per second all agents got;
* CPU time per call (user + system, from ``/proc``) by process: the client (this process: the agents'
  event loop and the clients' threads), and the server's processes — for Peon the front end (``peon
  mcp``), the supervisors, the forkservers, and the workers together with the commands they ran (the
  ones still alive and the ones reaped); for the peers the two servers and the commands they ran;
* the knee: the first N whose paced p99 passes 100 ms;
* beside the window's figures, the same run measured the way this benchmark used to (every call from
  the first agent's first call to the last agent's last call, each agent making ``--calls`` calls from a
  staggered start): the ramp-up and the ramp-down, when fewer than N agents call, make that figure
  lower than what N agents meet in steady state, and the CPU per call it gave came from a few dozen calls
  in clock ticks.

Front ends: ``embedded`` (a ``peon.AsyncSession`` per agent, all in this process), ``peon mcp`` (a
``peon mcp`` process per agent, through the official MCP client over stdio), ``peon serve`` (one
``peon serve`` on 127.0.0.1, a free port it picks, shared by all agents: each a ``peon.AsyncRemoteSession``
— the official MCP SDK's Streamable HTTP client — working in a directory of its own in the server's one
workspace, since a ``peon serve`` holds one session), and the peers an agent needs for the same tools —
``@modelcontextprotocol/server-filesystem`` (``read_text_file``, ``write_file``) plus ``mcp-shell-server``
(``shell_execute``), two servers per agent — when ``bench/install_peers`` installed them; each absent peer
is named and skipped. The fronts run one after the other for each N, alternating their order, so they
see the same machine; every ratio is against the peers measured in the same run.

Figures go to ``bench/targets.py`` through :mod:`bench.lib.figures` (``agents.*``): at the largest N, each
front's calls per second and p99 against the peers'; the server CPU per call (median over the steady
windows) against the peers'; the knee. ``--quick`` runs N = 1, 4 with 2 s windows: a smoke check, not a
figure.

Run: ``python bench/suite/bench_agents.py [--quick] [--agents 1,16,64] [--window 15] [--calls 20]
[--fronts embedded,mcp,serve,peers] [--rhythms paced,back-to-back]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

import psutil

import peon
from bench.lib import mcp_servers
from bench.lib.figures import record
from bench.lib.mcp_servers import FILESYSTEM, PEON, SERVER_LOG, SHELL_SERVER
from bench.lib.process_cpu import PeonCpu, TreeCpu, children, client_cpu, cmdline

SERVE_START_SECONDS = 60.0
ALLOW = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow", "delegate": "allow"}}
Kind = Literal["read", "status", "ls", "write"]
# The agent mix: read 4 KiB x5, git status --short x2, ls, write 2 KiB x2, interleaved.
MIX: tuple[Kind, ...] = ("read", "status", "read", "write", "read", "ls", "read", "status", "read", "write")
THINK_SECONDS = (0.05, 0.5)
KNEE_MS = 100.0
PEERS = "fs+shell peers"  # the front of the peer MCP servers, which every ratio is against
Rhythm = Literal["paced", "back to back"]


# -- front ends --------------------------------------------------------------------------------------


class Agent:
    """One agent's server connection: ``call(kind)`` runs one call of the mix and checks its outcome."""

    async def call(self, kind: Kind) -> None:
        raise NotImplementedError


class EmbeddedAgent(Agent):
    def __init__(self, session: peon.AsyncSession):
        self.session = session

    async def call(self, kind: Kind) -> None:
        tool, args = PEON_CALLS[kind]
        result = await self.session.call(tool, args)
        if not result.ok:
            raise RuntimeError(f"{tool} failed: {result.error}")


PEON_CALLS: dict[Kind, tuple[str, dict[str, Any]]] = {
    "read": ("read", {"path": "four_kib.txt"}),
    "status": ("bash", {"command": "git status --short"}),
    "ls": ("bash", {"command": "ls"}),
    "write": ("write", {"path": "two_kib.txt", "content": "w" * 2047 + "\n", "mode": "replace"}),
}


def calls_in(directory: str) -> dict[Kind, tuple[str, dict[str, Any]]]:
    """The mix's calls for an agent working in ``directory`` of the session's workspace: the same files
    and the same commands, run there."""
    return {"read": ("read", {"path": f"{directory}/four_kib.txt"}),
            "status": ("bash", {"command": f"cd {directory} && git status --short"}),
            "ls": ("bash", {"command": f"cd {directory} && ls"}),
            "write": ("write", {"path": f"{directory}/two_kib.txt", "content": "w" * 2047 + "\n", "mode": "replace"})}


class RemoteAgent(Agent):
    """An agent of a shared ``peon serve``: its own client, its own directory of the one workspace."""

    def __init__(self, session: peon.AsyncRemoteSession, directory: str):
        self.session = session
        self.routes = calls_in(directory)

    async def call(self, kind: Kind) -> None:
        tool, args = self.routes[kind]
        result = await self.session.call(tool, args)
        if not result.ok:
            raise RuntimeError(f"{tool} failed: {result.error}")


class McpAgent(Agent):
    """Calls of the mix through MCP clients: ``routes`` maps a kind to (client, tool, arguments)."""

    def __init__(self, routes: dict[Kind, tuple[Any, str, dict[str, Any]]]):
        self.routes = routes

    async def call(self, kind: Kind) -> None:
        client, tool, args = self.routes[kind]
        result = await client.call_tool(tool, args)
        if result.is_error:
            raise RuntimeError(f"{tool} failed: {result}")


@dataclass
class Started:
    agents: list[Agent]
    cpu: PeonCpu | TreeCpu


async def start_embedded(workspaces: list[Path], env: dict[str, str], stack: contextlib.AsyncExitStack) -> Started:
    sessions = await asyncio.gather(*(peon.AsyncSession(ws, ALLOW, env=env, state_dir=ws.parent / f"{ws.name}.state")
                                      .start() for ws in workspaces))
    for session in sessions:
        stack.push_async_callback(session.aclose)
    supervisors = [session.session.supervisor_pid for session in sessions if session.session is not None]
    return Started([EmbeddedAgent(session) for session in sessions], PeonCpu([], supervisors))


async def _mcp_client(command: list[str], env: dict[str, str], cwd: Path, stack: contextlib.AsyncExitStack) -> Any:
    client = await stack.enter_async_context(mcp_servers.connect(command, env, cwd))
    await client.list_tools()
    return client


def _server_pids(command: list[str], known: set[int]) -> list[int]:
    """This process's children running ``command`` that are not in ``known``."""
    found = []
    for child in psutil.Process().children():
        if child.pid in known:
            continue
        try:
            line = child.cmdline()
        except psutil.Error:
            continue
        if line[-len(command[1:]):] == command[1:] if command[1:] else Path(command[0]).name in " ".join(line[:2]):
            found.append(child.pid)
    return found


async def start_mcp(workspaces: list[Path], env: dict[str, str], stack: contextlib.AsyncExitStack) -> Started:
    agents: list[Agent] = []
    fronts: list[int] = []
    before = {child.pid for child in psutil.Process().children()}
    # One at a time, in this task: an MCP client's cancel scopes must be left in the task that entered them.
    clients = [await _mcp_client([str(PEON), "mcp", "--workspace", str(ws), "--allow", "process",
                                "--allow", "filesystem"], env, ws, stack)
               for ws in workspaces]
    for client in clients:
        agents.append(McpAgent({kind: (client, *PEON_CALLS[kind]) for kind in PEON_CALLS}))
    fronts = [child.pid for child in psutil.Process().children() if child.pid not in before]
    supervisors = [pid for front in fronts for pid in children(front)
                   if "supervisor" in " ".join(cmdline(pid)) or "peon-supervisor" in " ".join(cmdline(pid))]
    return Started(agents, PeonCpu(fronts, supervisors))


def _ready(base: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{base}/readyz", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:  # not listening yet, or 503 while its session starts
        return False


async def _serve_ready(server: subprocess.Popen[bytes], port_file: Path) -> str:
    """The URL of a ``peon serve`` once its session is ready (``/readyz``)."""
    deadline = time.monotonic() + SERVE_START_SECONDS
    while not port_file.exists() or not port_file.read_text().strip():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"peon serve did not start (exit status {server.poll()})")
        await asyncio.sleep(0.02)
    base = f"http://127.0.0.1:{int(port_file.read_text())}"
    while not await asyncio.to_thread(_ready, base):
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"peon serve did not become ready (exit status {server.poll()})")
        await asyncio.sleep(0.05)
    return f"{base}/mcp"


async def _stop_serve(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)  # it drains, stops its session and exits
    try:
        await asyncio.to_thread(server.wait, 30)
    except subprocess.TimeoutExpired:
        server.kill()
        await asyncio.to_thread(server.wait)


async def start_serve(workspaces: list[Path], env: dict[str, str], stack: contextlib.AsyncExitStack) -> Started:
    """One ``peon serve`` on 127.0.0.1 whose workspace holds every agent's directory, and a client per agent."""
    shared = workspaces[0].parent
    if any(ws.parent != shared for ws in workspaces):
        raise ValueError(f"the agents' directories must share one parent to be one workspace: {workspaces}")
    port_file = shared.parent / f"{shared.name}.port"
    server = subprocess.Popen([str(PEON), "serve", "--workspace", str(shared), "--host", "127.0.0.1", "--port", "0",
                               "--port-file", str(port_file), "--allow", "process", "--allow", "filesystem",
                               "--state-dir", str(shared.parent / f"{shared.name}.state")],
                              env=env, cwd=shared, stdin=subprocess.DEVNULL, stdout=SERVER_LOG["file"],
                              stderr=SERVER_LOG["file"])
    stack.push_async_callback(_stop_serve, server)
    url = await _serve_ready(server, port_file)
    agents: list[Agent] = []
    for ws in workspaces:
        session = await stack.enter_async_context(peon.AsyncRemoteSession(url, protocol="2026-07-28"))
        agents.append(RemoteAgent(session, ws.name))
    supervisors = [pid for pid in children(server.pid) if "supervisor" in " ".join(cmdline(pid))]
    return Started(agents, PeonCpu([server.pid], supervisors))


def peers_available() -> tuple[bool, str]:
    missing = mcp_servers.absent()
    return not missing, ", ".join(f"{name} ({needs})" for name, needs in missing.items())


async def start_peers(workspaces: list[Path], env: dict[str, str], stack: contextlib.AsyncExitStack) -> Started:
    node = shutil.which("node") or "node"
    before = {child.pid for child in psutil.Process().children()}
    filesystems = [await _mcp_client([node, str(FILESYSTEM), str(ws)], env, ws, stack) for ws in workspaces]
    middle = {child.pid for child in psutil.Process().children()}
    shell_env = {**env, "ALLOW_COMMANDS": "git,ls"}
    shells = [await _mcp_client([str(SHELL_SERVER)], shell_env, ws, stack) for ws in workspaces]
    after = {child.pid for child in psutil.Process().children()}
    agents: list[Agent] = []
    for ws, files, shell in zip(workspaces, filesystems, shells, strict=True):
        agents.append(McpAgent({
            "read": (files, "read_text_file", {"path": str(ws / "four_kib.txt")}),
            "write": (files, "write_file", {"path": str(ws / "two_kib.txt"), "content": "w" * 2047 + "\n"}),
            "status": (shell, "shell_execute", {"command": ["git", "status", "--short"], "directory": str(ws)}),
            "ls": (shell, "shell_execute", {"command": ["ls"], "directory": str(ws)}),
        }))
    return Started(agents, TreeCpu({"server-filesystem": sorted(middle - before),
                                    "mcp-shell-server": sorted(after - middle)}))


FRONTS: dict[str, Callable[..., Any]] = {"embedded": start_embedded, "peon mcp": start_mcp, "peon serve": start_serve,
                                         PEERS: start_peers}


# -- one run -------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    front: str
    agents: int
    rhythm: Rhythm
    latencies: list[float]  # seconds, of the calls answered in the window
    wall: float  # the window's length, in seconds
    cpu: dict[str, float]  # seconds per call, by role
    former: Outcome | None = None  # the same agents measured as this benchmark used to (see the module's docstring)

    @property
    def calls(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        """Calls per second all agents got."""
        return self.calls / self.wall if self.wall else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    @property
    def server_cpu_ms(self) -> float:
        return sum(value for role, value in self.cpu.items() if role != "client") * 1000


async def drive(agents: list[Agent], calls: int, rhythm: Rhythm, seed: int) -> list[float]:
    """Every agent makes ``calls`` calls of the mix (starting at its own place in it); the latencies."""
    latencies: list[float] = []

    async def one(index: int, agent: Agent) -> None:
        rng = random.Random(seed * 1000 + index)
        if rhythm == "paced":  # agents do not all start at once
            await asyncio.sleep(rng.uniform(0, THINK_SECONDS[1]))
        for i in range(calls):
            kind = MIX[(index + i) % len(MIX)]
            started = time.perf_counter()
            await agent.call(kind)
            latencies.append(time.perf_counter() - started)
            if rhythm == "paced":
                await asyncio.sleep(rng.uniform(*THINK_SECONDS))

    async with asyncio.TaskGroup() as group:
        for index, agent in enumerate(agents):
            group.create_task(one(index, agent))
    return latencies


Sample = Callable[[], dict[str, float]]


@dataclass
class Window:
    """What :func:`steady` measured: the calls answered in the window and the CPU used over it."""

    latencies: list[float]
    seconds: float
    cpu: dict[str, float]  # seconds, by role, from the window's start to its end


async def steady(agents: list[Agent], rhythm: Rhythm, seed: int, window: float, sample: Sample) -> Window:
    """Every agent calls the mix (from its own place in it, paced or back to back) until the window is
    over. The window opens once every agent has had a call answered — all N are open and calling — and
    lasts ``window`` seconds; its calls are those answered in it. ``sample`` (CPU by role) is taken at its
    start and at its end, in a thread, so that the agents go on meanwhile."""
    answered: list[tuple[float, float]] = []  # (when the call was made, when it was answered)
    have_called: set[int] = set()
    everyone = asyncio.Event()
    over = asyncio.Event()

    async def one(index: int, agent: Agent) -> None:
        rng = random.Random(seed * 1000 + index)
        if rhythm == "paced":  # agents do not all start at once
            await asyncio.sleep(rng.uniform(0, THINK_SECONDS[1]))
        i = 0
        while not over.is_set():
            kind = MIX[(index + i) % len(MIX)]
            i += 1
            started = time.perf_counter()
            await agent.call(kind)
            answered.append((started, time.perf_counter()))
            if index not in have_called:
                have_called.add(index)
                if len(have_called) == len(agents):
                    everyone.set()
            if rhythm == "paced" and not over.is_set():
                await asyncio.sleep(rng.uniform(*THINK_SECONDS))

    async def timed_sample() -> tuple[float, dict[str, float]]:
        before = time.perf_counter()
        figures = await asyncio.to_thread(sample)
        return (before + time.perf_counter()) / 2, figures  # the sample's middle: when it stands

    async with asyncio.TaskGroup() as group:
        for index, agent in enumerate(agents):
            group.create_task(one(index, agent))
        await everyone.wait()
        opened, first = await timed_sample()
        await asyncio.sleep(max(0.0, opened + window - time.perf_counter()))
        closed, last = await timed_sample()
        over.set()
    latencies = [end - began for began, end in answered if opened <= end < closed]
    return Window(latencies, closed - opened, {role: last[role] - first.get(role, 0.0) for role in last})


def make_workspaces(root: Path, count: int) -> list[Path]:
    workspaces = []
    for i in range(count):
        ws = root / f"agent-{i}"
        ws.mkdir(parents=True)
        (ws / "four_kib.txt").write_text(("x" * 63 + "\n") * 64)
        (ws / "two_kib.txt").write_text("")
        (ws / "src").mkdir()
        (ws / "src" / "main.py").write_text("print('hello')\n")
        subprocess.run(["git", "init", "-q", str(ws)], check=True)
        subprocess.run(["git", "-C", str(ws), "add", "."], check=True)
        subprocess.run(["git", "-C", str(ws), "-c", "user.name=bench", "-c", "user.email=bench@localhost",
                        "commit", "-q", "-m", "start"], check=True)
        workspaces.append(ws)
    return workspaces


@dataclass(frozen=True)
class Plan:
    """How long each rhythm's window lasts, and whether the former measurement is taken too."""

    windows: dict[Rhythm, float]
    former_calls: int = 0  # calls per agent of the former measurement (0: not taken)


async def measure(front: str, workspaces: list[Path], env: dict[str, str], rhythms: Iterable[Rhythm],
                  plan: Plan) -> list[Outcome]:
    """Each rhythm's steady-state window of the agents' calls (and the former measurement, if planned)."""
    outcomes = []
    async with contextlib.AsyncExitStack() as stack:
        started: Started = await FRONTS[front](workspaces, env, stack)
        await drive(started.agents, 3, "back to back", seed=0)  # warm-up: standbys, caches

        def sample() -> dict[str, float]:
            return {"client": client_cpu(), **started.cpu.sample()}

        for rhythm in rhythms:
            await asyncio.sleep(0.3)  # let what the last calls left settle
            window = await steady(started.agents, rhythm, len(workspaces), plan.windows[rhythm], sample)
            count = max(1, len(window.latencies))
            outcome = Outcome(front, len(workspaces), rhythm, window.latencies, window.seconds,
                              {role: used / count for role, used in window.cpu.items()})
            if plan.former_calls:
                outcome.former = await former(started, front, len(workspaces), rhythm, plan.former_calls)
            outcomes.append(outcome)
    return outcomes


async def former(started: Started, front: str, agents: int, rhythm: Rhythm, calls: int) -> Outcome:
    """The measurement this benchmark used to take: each agent makes ``calls`` calls from a staggered
    start, and every call counts, from the first agent's first call to the last agent's last one."""
    await asyncio.sleep(0.3)
    cpu_before, client_before = started.cpu.sample(), client_cpu()
    begun = time.perf_counter()
    latencies = await drive(started.agents, calls, rhythm, seed=agents)
    wall = time.perf_counter() - begun
    await asyncio.sleep(0.05)
    cpu_after, client_after = started.cpu.sample(), client_cpu()
    count = len(latencies)
    cpu = {"client": (client_after - client_before) / count,
           **{role: (cpu_after[role] - cpu_before.get(role, 0.0)) / count for role in cpu_after}}
    return Outcome(front, agents, rhythm, latencies, wall, cpu)


def show(outcome: Outcome) -> None:
    roles = ", ".join(f"{role} {value * 1000:.2f}" for role, value in outcome.cpu.items())
    print(f"  {outcome.front:<15} N={outcome.agents:<3} {outcome.rhythm:<13} p50 {outcome.percentile(0.5):7.2f} ms  "
          f"p99 {outcome.percentile(0.99):7.2f} ms  {outcome.rate:7.1f} calls/s  "
          f"server CPU/call {outcome.server_cpu_ms:6.2f} ms ({roles}; {outcome.calls} calls in {outcome.wall:.1f} s)",
          flush=True)
    if outcome.former is not None:
        was = outcome.former
        print(f"  {'':<15} {'':<5} {'formerly':<13} p50 {was.percentile(0.5):7.2f} ms  "
              f"p99 {was.percentile(0.99):7.2f} ms  {was.rate:7.1f} calls/s  "
              f"server CPU/call {was.server_cpu_ms:6.2f} ms ({was.calls} calls in {was.wall:.1f} s, "
              "ramp-up and ramp-down included)", flush=True)


def knee(outcomes: list[Outcome], front: str) -> int | None:
    """The first N whose paced p99 passes the bound (None: none of those measured)."""
    for outcome in sorted((o for o in outcomes if o.front == front and o.rhythm == "paced"), key=lambda o: o.agents):
        if outcome.percentile(0.99) > KNEE_MS:
            return outcome.agents
    return None


def summary(outcomes: list[Outcome], fronts: list[str], sizes: list[int]) -> None:
    print(f"\nsummary (steady state; the knee: first N whose paced p99 > {KNEE_MS:g} ms; measured N: {sizes})")
    cpu: dict[str, float] = {}
    for front in fronts:
        mine = [o for o in outcomes if o.front == front]
        if not mine:
            continue
        found = knee(outcomes, front)
        per_call = statistics.median(o.server_cpu_ms for o in mine)
        cpu[front] = per_call
        capacity = max((o.rate for o in mine if o.rhythm == "back to back"), default=0.0)
        print(f"  {front:<15} knee {'none up to ' + str(max(sizes)) if found is None else 'N=' + str(found):<16} "
              f"server CPU per call (median over runs) {per_call:6.2f} ms; capacity back to back "
              f"{capacity:6.1f} calls/s")
        below = [n for n in sizes if found is None or n < found]
        record(f"agents.agents.{_key(front)}", float(max(below, default=0)), "agents",
               measured_up_to=max(sizes), knee=found or 0)
        record(f"agents.capacity.{_key(front)}", capacity, "calls/s")
    most = max(sizes)
    at_most = {o.front: o for o in outcomes if o.agents == most and o.rhythm == "paced"}
    peer = at_most.get(PEERS)
    for front in fronts:
        if front == PEERS or front not in cpu:
            continue
        record(f"agents.cpu.{_key(front)}", cpu[front], "ms", baseline=cpu.get(PEERS), against=PEERS)
        if PEERS in cpu:
            print(f"  server CPU per call, {front} / {PEERS}: {cpu[front] / cpu[PEERS]:.2f}x (target <= 1.0x)")
        largest = at_most.get(front)
        if largest is None:
            continue
        record(f"agents.rate.{_key(front)}", largest.rate, "calls/s", baseline=peer.rate if peer else None,
               against=PEERS, agents=most)
        record(f"agents.p99.{_key(front)}", largest.percentile(0.99), "ms",
               baseline=peer.percentile(0.99) if peer else None, against=PEERS, agents=most)
        if peer is not None:
            print(f"  {most} agents paced, {front} / {PEERS}: calls/s {largest.rate / peer.rate:.2f}x "
                  f"(target >= 0.9x), p99 {largest.percentile(0.99) / peer.percentile(0.99):.2f}x (target <= 1.2x)")


# -- at rest: memory of an idle session, and what a background job adds -------------------------------


def _tree(pid: int) -> list[int]:
    try:
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return []


def pss_mib(pids: Iterable[int]) -> float:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().pss
        except psutil.Error:
            continue
    return total / (1 << 20)


def python_processes(pids: Iterable[int]) -> int:
    count = 0
    for pid in pids:
        try:
            count += "python" in Path(psutil.Process(pid).exe()).name
        except psutil.Error:
            continue
    return count


async def at_rest(front: str, root: Path, env: dict[str, str]) -> None:
    """PSS of one idle session of ``front`` (its server's processes, after a call and a pause), and for
    Peon what background ``sleep`` jobs add (PSS, processes, Python processes): the first (``job.first_*``,
    the job host's start included) and a second beside it (``job.*``: what each further job adds)."""
    [workspace] = make_workspaces(root / f"rest-{_key(front)}", 1)
    async with contextlib.AsyncExitStack() as stack:
        started: Started = await FRONTS[front]([workspace], env, stack)
        await drive(started.agents, len(MIX), "back to back", seed=0)
        await asyncio.sleep(2.0)  # past the pool's return to one standby
        roots = (started.cpu.supervisors + started.cpu.fronts if isinstance(started.cpu, PeonCpu)
                 else [pid for pids in started.cpu.roles.values() for pid in pids])
        if isinstance(started.cpu, PeonCpu) and started.cpu.fronts:
            roots = started.cpu.fronts  # peon mcp: its supervisor is below it
        pids = sorted({pid for root_pid in roots for pid in _tree(root_pid)})
        idle = pss_mib(pids)
        print(f"  {front:<15} idle session: PSS {idle:.1f} MiB in {len(pids)} processes", flush=True)
        if front != PEERS:
            record(f"idle_pss.{_key(front)}", idle, "MiB", processes=len(pids))
        if front != "embedded":
            return
        agent = started.agents[0]
        assert isinstance(agent, EmbeddedAgent)
        # Two background jobs: the first starts the session's job host (in cgroup containment), the
        # second shows what each further job adds.
        jobs: list[str] = []
        before, before_pss = pids, idle
        for which in ("first", "further"):
            result = await agent.session.call("bash", {"command": "exec sleep 60", "background": True})
            if not result.ok:
                raise RuntimeError(f"the background job did not start: {result.error}")
            jobs.append(result.value["job_id"])
            await asyncio.sleep(1.0)
            with_job = sorted({pid for root_pid in roots for pid in _tree(root_pid)})
            added = [pid for pid in with_job if pid not in before]
            sleeps = [pid for pid in added if cmdline(pid)[:1] == ["sleep"]]
            extra, extra_python = len(added) - len(sleeps), python_processes(added)
            with_pss = pss_mib(with_job)
            grown = with_pss - before_pss
            print(f"  {front:<15} the {which} background sleep job: +{grown:.2f} MiB PSS, {extra} process(es) "
                  f"besides the command ({extra_python} Python)", flush=True)
            prefix = "job.first_" if which == "first" else "job."
            record(f"{prefix}pss", grown, "MiB", processes=extra)
            record(f"{prefix}python_processes", float(extra_python), "processes")
            before, before_pss = with_job, with_pss
        for job in jobs:
            await agent.session.call("job_stop", {"job_id": job})


def _key(front: str) -> str:
    return {"embedded": "embedded", "peon mcp": "mcp", "peon serve": "serve", PEERS: "peers"}[front]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 1, 4 and 2 s windows: a smoke check")
    parser.add_argument("--agents", help="comma-separated N (default 1,16,64)")
    parser.add_argument("--window", type=float, help="seconds of a paced steady-state window (default 15; 2 with "
                                                      "--quick); back to back, a third of it (at least 2 s)")
    parser.add_argument("--calls", type=int, default=0,
                        help="also measure the former way, each agent making this many calls (default: not)")
    parser.add_argument("--fronts", default="embedded,mcp,serve,peers", help="which of embedded, mcp, serve, peers")
    parser.add_argument("--rhythms", default="paced,back-to-back", help="paced and/or back-to-back")
    args = parser.parse_args()
    sizes = [int(n) for n in (args.agents or ("1,4" if args.quick else "1,16,64")).split(",")]
    window = args.window or (2.0 if args.quick else 15.0)
    plan = Plan({"paced": window, "back to back": max(2.0, window / 3)}, args.calls)
    names = {"embedded": "embedded", "mcp": "peon mcp", "serve": "peon serve", "peers": PEERS}
    fronts = [names[name.strip()] for name in args.fronts.split(",")]
    rhythms: list[Rhythm] = ["paced" if r.strip() == "paced" else "back to back" for r in args.rhythms.split(",")]
    available, missing = peers_available()
    if PEERS in fronts and not available:
        print(f"peers: absent: {missing} — skipped")
        fronts.remove(PEERS)
    print(f"peon {peon.__version__}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}; "
          f"N = {sizes}; steady windows of {window:g} s paced, {plan.windows['back to back']:g} s back to back; "
          f"fronts: {', '.join(fronts)}")
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="peon-bench-agents-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = mcp_servers.server_env(home)
        with (Path(tmp) / "servers.log").open("w+", encoding="utf-8", errors="replace") as log:
            SERVER_LOG["file"] = log
            for round_no, size in enumerate(sizes):
                order = fronts if round_no % 2 == 0 else fronts[::-1]
                for front in order:
                    workspaces = make_workspaces(Path(tmp) / f"{_key(front)}-{size}", size)
                    for outcome in await measure(front, workspaces, env, rhythms, plan):
                        show(outcome)
                        outcomes.append(outcome)
                    shutil.rmtree(workspaces[0].parent, ignore_errors=True)
            print("\nat rest")
            for front in fronts:
                if front != "peon serve":  # a session at rest is the same session whatever serves it
                    await at_rest(front, Path(tmp), env)
            SERVER_LOG["file"] = sys.stderr
    summary(outcomes, fronts, sizes)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
