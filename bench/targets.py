"""Every speed and resource target of the core, measured in one run and printed in one table.

Runs the benchmarks that measure them (``bench/suite/``), one after the other, each in its own
interpreter with its own output shown as it comes: ``bench_core.py`` (``bash true`` against ``bash -lc
true``, the first call of a new session against a warm one, deadline to clean, the 1 GiB flood, idle
CPU), ``bench_read.py`` (``read`` against starting ``/bin/cat``), ``bench_mcp.py`` (``peon mcp`` against
server-filesystem and mcp-shell-server), ``bench_agents.py`` (the agent mix by 1 to 64 concurrent agents
in steady state — embedded sessions, a ``peon mcp`` each, or all sharing one ``peon serve`` — against
those two peers in the same run: CPU per call, calls per second and p99 of 64 agents, the most agents
before p99 passes 100 ms, an idle session's memory, a background job's) and ``soak.py`` (10,000 calls,
no growth). Each records its figures through :mod:`bench.lib.figures`; then one table gives, per target,
Peon's figure, the baseline measured in the same run, the ratio, the target and whether it is met. A
peer that is not installed (``bench/install_peers``) is named as absent; a figure that no benchmark
recorded — cgroup containment on a machine without it, the soak left out, a benchmark that failed — is
shown as not measured.

Each per-call target also has floors, measured in the same run, of three kinds:

* the design's: what any implementation of the current design pays — a call handed by a supervisor to
  a dedicated worker that serves one call at a time and, after a clean one, the next, with nothing of
  Peon's (:mod:`bench.lib.bare_worker`; back to back and apart, as the target). For a tool that starts no process
  (``read``), a message to a waiting bare ``multiprocessing`` worker and the bytes back, asked directly
  and through a bare supervisor process relaying to a worker of its own (``bench_read.py``); for a
  command (``bash``), the same worker ``posix_spawn``ing ``/bin/bash -lc true`` (the command the tool is
  specified to start) and reaping it through a pidfd, asked directly and through a bare supervisor
  (``bench_core.py``);
* the former design's, a worker per call, listed for comparison and never deciding a verdict: the same
  read by a bare ``multiprocessing`` worker started for the call (one standby ahead), alone and behind
  a bare supervisor (``bench_read.py``), plus, for ``bash``, the ``/bin/bash -lc`` it would start;
* Peon's: what Peon's own code costs a call of that shape today — a call answered by the supervisor
  alone (validated, rated, approved, audited, no worker), a call that does nothing in a worker (reused,
  as ``read``'s; back to back it also bounds ``bash`` and calls through ``peon mcp``), through ``peon
  mcp`` the supervisor's answer plus ``bash -lc`` (a :class:`Part` measured by another benchmark).

Every floor measured is listed with the ratio a call would reach if everything beyond it cost nothing.
The table shows the most binding of the design's and of Peon's; a target that even the design's floor
misses is "out of reach": no implementation of the current design meets it on this machine. One that
only Peon's floor misses is not met until Peon's own part of a call gets cheaper.

After the benchmarks it measures one session at rest (its supervisor, forkserver and the one standby
worker of an idle session, after a few calls): the memory a session costs, in PSS (shared pages divided
among the processes sharing them) and RSS. ``--write-page docs/performance.md`` then writes the user's page of
these figures (:func:`page`, pure): the table as printed, the machine, the exact command, and what
each figure means for a user — how many agents a host holds, what a session costs at rest.

Run: ``python bench/targets.py`` (at most about 15 minutes on 2 cores; ``--quick``, a few minutes, for
a short check with fewer calls, ``--soak-calls 0`` to leave the soak out, ``--profile`` to end with
``profile_call.py``'s account of where a call's CPU goes, ``--write-page PATH`` to write the page).
Exit status 0 when every benchmark ran, whatever the verdicts; 1 when one of them failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: bench.lib and its peon, from anywhere

from bench.lib.figures import ENV

BENCH = Path(__file__).resolve().parent

Comparison = Literal["<=", "<", ">="]
Verdict = Literal["met", "not met", "out of reach", "not measured"]
FloorKind = Literal["design", "former design", "peon"]
Figures = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Part:
    """A further part of a floor, held by another figure: the floor is the sum of its parts."""

    detail: str
    figure: str
    means: str


@dataclass(frozen=True)
class Floor:
    """What a per-call target cannot go below: a detail of a recorded figure (in ms), possibly plus a
    detail of another figure, and how it bounds the target's ratio."""

    kind: FloorKind  # the design's, the former design's, or Peon's code today (see the module's docstring)
    detail: str  # the detail of the figure that holds it
    means: str  # what was measured, for the reader
    # "added": it comes on top of the baseline's own work (Peon's bash also runs bash -lc);
    # "whole": it is a whole call by itself; "rate": a call of that many ms caps calls per second.
    bounds: Literal["added", "whole", "rate"]
    figure: str | None = None  # the key of the figure holding the detail, when not the target's own
    plus: Part | None = None  # a part measured elsewhere in the run (left out when it was not)

    def at_best(self, own: Mapping[str, Any], figures: Figures) -> tuple[float, str] | None:
        """The ratio a call would reach if it cost nothing beyond this floor, and how it is made up;
        None when the floor or the baseline was not measured."""
        holder = figures.get(self.figure) if self.figure else own
        baseline, against = own.get("baseline"), own.get("against")
        floor = holder.get(self.detail) if holder else None
        if not floor or not baseline:
            return None
        means = f"{self.means} {floor:.2f} ms"
        extra = (figures.get(self.plus.figure) or {}).get(self.plus.detail) if self.plus else None
        if self.plus and extra:
            floor += extra
            means += f" + {self.plus.means} {extra:.2f} ms"
        if self.bounds == "added":
            return (baseline + floor) / baseline, f"{means} + {against} {baseline:.2f} ms"
        if self.bounds == "whole":
            return floor / baseline, f"{means}, {against} {baseline:.2f} ms"
        return ((1000 / floor) / baseline,
                f"{means}: at most {1000 / floor:.0f} calls/s, {against} {baseline:.0f} calls/s")


SUPERVISOR_ONLY = "a call answered by the supervisor alone (no worker)"
NO_OP = "a call doing nothing in a worker"
BASH_LC = "/bin/bash -lc true alone, as the bash tool starts it"
# A call back to back does at least what such a call does back to back (admitted, handed to a waiting
# worker and answered): bench_read.py records it as the floor of read.back_to_back.
NO_OP_BACK_TO_BACK = Floor("peon", "floor", f"{NO_OP} (Session.call, back to back)", "whole",
                           figure="read.back_to_back")
Rhythm = Literal["back to back", "apart"]
RHYTHMS: dict[Rhythm, tuple[str, str]] = {"back to back": ("back_to_back", "back to back"),
                                          "apart": ("apart", "100 ms apart")}

# The current design, nothing of Peon's: a worker that waits for the call (reused from call to call),
# asked directly and through a bare supervisor (the caller, the supervisor and the worker: four hops).
REUSED = "a bare multiprocessing worker waiting for the call reading the file, nothing of Peon's"
REUSED_SUPERVISED = ("a bare supervisor process having the file read by a waiting bare worker of its own, "
                     "nothing of Peon's")
SPAWNED = "a bare long-lived worker posix_spawning bash -lc true and reaping it, nothing of Peon's"
SPAWNED_SUPERVISED = ("a bare supervisor process having bash -lc true posix_spawned and reaped by a long-lived "
                      "bare worker of its own, nothing of Peon's")
# The former design, a worker per call (listed, never deciding a verdict).
BARE = "the former design: a bare multiprocessing worker per call reading the file, nothing of Peon's"
SUPERVISED = ("the former design: a bare supervisor process having the file read by a bare worker per call, "
              "nothing of Peon's")


def _floors(kind: FloorKind, figure: str, details: tuple[tuple[str, str], ...], rhythm: Rhythm,
            changes: dict[str, Any]) -> tuple[Floor, ...]:
    key, said = RHYTHMS[rhythm]
    return tuple(dataclasses.replace(Floor(kind, detail, f"{means} ({said})", "whole", figure=f"{figure}.{key}"),
                                     **changes) for detail, means in details)


def reused_floors(rhythm: Rhythm, **changes: Any) -> tuple[Floor, ...]:
    """The design's floors of a tool that starts no process (the file read by a waiting worker, recorded
    with ``read``), alone then behind a bare supervisor, each changed alike."""
    return _floors("design", "read", (("reused", REUSED), ("reused_supervised", REUSED_SUPERVISED)), rhythm, changes)


def spawned_floors(rhythm: Rhythm, **changes: Any) -> tuple[Floor, ...]:
    """The design's floors of a command (``bash -lc true`` spawned by a long-lived worker, recorded with
    ``bash``): whole calls, ``bash -lc`` included."""
    return _floors("design", "bash", (("spawned", SPAWNED), ("spawned_supervised", SPAWNED_SUPERVISED)), rhythm,
                   changes)


def former_floors(rhythm: Rhythm, **changes: Any) -> tuple[Floor, ...]:
    """The former design's floors (a worker per call, recorded with ``read``), listed beside the design's."""
    return _floors("former design", "read", (("bare_multiprocessing", BARE), ("bare_supervised", SUPERVISED)),
                   rhythm, changes)


@dataclass(frozen=True)
class Target:
    key: str  # the figure's key, as its benchmark records it
    label: str
    compare: Comparison
    bound: float
    on_ratio: bool  # the bound applies to value / baseline, not to the value itself
    floors: tuple[Floor, ...] = ()

    def judge(self, figure: Mapping[str, Any] | None) -> tuple[Verdict, float | None]:
        """The verdict on ``figure`` (``None``: not recorded) and the number it was judged on."""
        if figure is None:
            return "not measured", None
        number = figure["value"]
        if self.on_ratio:
            if not figure.get("baseline"):
                return "not measured", None
            number = figure["value"] / figure["baseline"]
        return ("met" if self.holds(number) else "not met"), number

    def holds(self, number: float) -> bool:
        return {"<=": number <= self.bound, "<": number < self.bound, ">=": number >= self.bound}[self.compare]

    def measured_floors(self, figures: Figures, kind: FloorKind | None = None) -> list[tuple[float, str]]:
        """The ratio each of its floors (of ``kind``, or all) that was measured bounds it to, and what
        makes it up (see :class:`Floor`)."""
        own = figures.get(self.key)
        return [best for floor in self.floors if own is not None and kind in (None, floor.kind)
                and (best := floor.at_best(own, figures)) is not None]

    def at_best(self, figures: Figures, kind: FloorKind) -> tuple[float, str] | None:
        """The most binding of its floors of ``kind`` that were measured."""
        measured = self.measured_floors(figures, kind)
        if not measured:
            return None
        return (min if self.compare == ">=" else max)(measured, key=lambda best: best[0])


TARGETS = (
    Target("bash.back_to_back", "Session.call bash true, back to back", "<=", 1.2, True,
           (*spawned_floors("back to back", figure=None), *former_floors("back to back", bounds="added"),
            Floor("peon", "supervisor_only", SUPERVISOR_ONLY, "added"), NO_OP_BACK_TO_BACK)),
    Target("bash.apart", "Session.call bash true, 100 ms apart", "<=", 1.2, True,
           (*spawned_floors("apart", figure=None), *former_floors("apart", bounds="added"),
            Floor("peon", "supervisor_only", SUPERVISOR_ONLY, "added"))),
    Target("read.back_to_back", "Session.call read 4 KiB, back to back", "<=", 1.0, True,
           (*reused_floors("back to back", figure=None), *former_floors("back to back", figure=None),
            Floor("peon", "floor", NO_OP, "whole"))),
    Target("read.apart", "Session.call read 4 KiB, 100 ms apart", "<=", 1.0, True,
           (*reused_floors("apart", figure=None), *former_floors("apart", figure=None),
            Floor("peon", "floor", NO_OP, "whole"))),
    Target("mcp.read", "peon mcp tools/call read 1 KiB", "<=", 1.2, True,
           (*reused_floors("back to back"), *former_floors("back to back"),
            Floor("peon", "supervisor_only", f"{SUPERVISOR_ONLY}, through peon mcp", "whole"),
            NO_OP_BACK_TO_BACK)),
    Target("mcp.bash", "peon mcp tools/call bash true", "<=", 1.0, True,
           (*spawned_floors("back to back"), *former_floors("back to back", plus=Part("bash_lc", "mcp.bash", BASH_LC)),
            Floor("peon", "bash_lc", BASH_LC, "whole",
                  plus=Part("supervisor_only", "mcp.read", f"{SUPERVISOR_ONLY}, through peon mcp")),
            NO_OP_BACK_TO_BACK)),
    Target("mcp.read_rate", "peon mcp read, back to back (calls/s)", ">=", 1.0, True,
           (*reused_floors("back to back", bounds="rate"), *former_floors("back to back", bounds="rate"),
            dataclasses.replace(NO_OP_BACK_TO_BACK, bounds="rate"))),
    Target("mcp.start", "peon mcp start to first tools/list", "<=", 1.0, True),
    Target("agents.cpu.mcp", "agent mix: server CPU per call, peon mcp", "<=", 1.0, True),
    Target("agents.cpu.embedded", "agent mix: server CPU per call, embedded", "<=", 1.0, True),
    Target("agents.cpu.serve", "agent mix: server CPU per call, one peon serve", "<=", 1.0, True),
    Target("agents.rate.embedded", "64 agents, 50-500 ms think: calls/s, embedded", ">=", 0.9, True),
    Target("agents.rate.mcp", "the same, an agent per peon mcp", ">=", 0.9, True),
    Target("agents.rate.serve", "the same, agents sharing one peon serve", ">=", 0.9, True),
    Target("agents.p99.embedded", "64 agents, 50-500 ms think: p99, embedded", "<=", 1.2, True),
    Target("agents.p99.mcp", "the same, an agent per peon mcp", "<=", 1.2, True),
    Target("agents.p99.serve", "the same, agents sharing one peon serve", "<=", 1.2, True),
    Target("agents.agents.embedded", "agents, 50-500 ms think, p99 <= 100 ms, embedded", ">=", 64, False),
    Target("agents.agents.mcp", "the same, an agent per peon mcp", ">=", 64, False),
    Target("agents.agents.serve", "the same, agents sharing one peon serve", ">=", 64, False),
    Target("first_call", "first call of a new session, against a warm call", "<=", 1.5, True),
    Target("idle_pss.embedded", "idle session PSS, embedded", "<=", 30, False),
    Target("idle_pss.mcp", "idle session PSS, peon mcp", "<=", 40, False),
    Target("job.pss", "a background sleep job: PSS added", "<=", 1, False),
    Target("job.python_processes", "a background sleep job: Python processes added", "<=", 0, False),
    Target("deadline_to_clean.cgroup", "deadline to clean, 300-process fork loop, cgroup", "<", 100, False),
    Target("deadline_to_clean.process-tree", "the same, process-tree containment", "<", 100, False),
    Target("flood_rss", "1 GiB flood, supervisor + worker RSS", "<", 64, False),
    Target("idle_cpu", "idle session, CPU of all its processes", "<=", 0, False),
    Target("soak.descriptors", "soak: descriptors gained after warm-up", "<=", 0, False),
    Target("soak.processes", "soak: processes gained after warm-up", "<=", 0, False),
    Target("soak.rss_percent", "soak: largest RSS growth after warm-up", "<", 5, False),
)


def read_figures(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The recorded figures by key (a key recorded twice: the later one)."""
    figures = {}
    for line in lines:
        if line.strip():
            entry = json.loads(line)
            figures[entry["key"]] = entry
    return figures


def number(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def bound(target: Target, unit: str) -> str:
    return f"{target.compare} {target.bound:.1f}x" if target.on_ratio else f"{target.compare} {target.bound:g} {unit}"


def table(figures: Figures) -> list[str]:
    """The summary: one line per target, the count, then every floor measured."""
    lines = [f"{'target':<50} {'Peon':>12} {'baseline':>34} {'ratio':>6} {'design':>6} {'Peon':>5}  "
             f"{'target':<15} verdict",
             f"{'':<50} {'':>12} {'':>34} {'':>6} {'floor':>6} {'floor':>5}"]
    met = out_of_reach = 0
    floors = []
    for target in TARGETS:
        figure = figures.get(target.key)
        verdict, judged = target.judge(figure)
        design, peon = target.at_best(figures, "design"), target.at_best(figures, "peon")
        floors.extend(f"  {target.label}: {ratio:.2f}x, {means}" for ratio, means in target.measured_floors(figures))
        if verdict == "not met" and design is not None and not target.holds(design[0]):
            verdict = "out of reach"
        met += verdict == "met"
        out_of_reach += verdict == "out of reach"
        if figure is None:
            lines.append(f"{target.label:<50} {'—':>12} {'':>34} {'':>6} {'':>6} {'':>5}  {bound(target, ''):<15} "
                         "not measured")
            continue
        mine = f"{number(figure['value'])} {figure['unit']}"
        base = ratio = ""
        if figure.get("against"):
            base = (f"{number(figure['baseline'])} {figure['unit']} {figure['against']}" if figure.get("baseline")
                    else f"{figure['against']}: absent")
        if target.on_ratio and judged is not None:
            ratio = f"{judged:.2f}"
        design_ratio, peon_ratio = (f"{best[0]:.2f}" if best is not None else "" for best in (design, peon))
        lines.append(f"{target.label:<50} {mine:>12} {base[-34:]:>34} {ratio:>6} {design_ratio:>6} {peon_ratio:>5}  "
                     f"{bound(target, figure['unit']):<15} {verdict}")
    lines.append(f"{met} of {len(TARGETS)} targets met; {out_of_reach} out of reach: missed even by the design's floor")
    if floors:
        lines.append("floors, measured in this run (the ratio a call would reach if it cost nothing beyond the floor):")
        lines.extend(floors)
    return lines


# -- what a session costs, and the page ------------------------------------------------------------


@dataclass(frozen=True)
class Footprint:
    """One session at rest: its processes below the client, and their memory in KiB."""

    processes: dict[str, int]  # role -> count (supervisor, forkserver, standby)
    pss_kib: int  # shared pages divided among the processes sharing them: what the host pays
    rss_kib: int  # every page each process maps, shared ones counted in each
    client_pss_kib: int  # the embedding process's own Peon client (a Session in a fresh interpreter)


def measure_footprint() -> Footprint:
    """Open one session, make a few calls, wait until it is at rest, and measure its processes."""
    import psutil

    import peon
    from peon.workers import proctree

    roles = {"peon-supervisor": "supervisor", "peon-forkserver": "forkserver", "peon-worker standby": "standby"}
    with tempfile.TemporaryDirectory(prefix="peon-bench-footprint-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        (workspace / "file.txt").write_text("x" * 4096)
        env = {"HOME": tmp, "PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"}
        with peon.Session(workspace, {"approval": {"process": "allow"}}, env=env,
                          state_dir=Path(tmp) / "state") as session:
            for _ in range(5):
                assert session.call("read", {"path": "file.txt"}).ok
                assert session.call("bash", {"command": "true"}).ok
            sup = session.supervisor_pid
            until = time.monotonic() + 10
            while True:  # at rest: the forkserver and the idle session's one standby below the supervisor
                below = proctree.descendants(sup)
                kinds = [roles.get(proctree.cmdline(pid).split(" /")[0].strip(), "other") for pid in below]
                if sorted(kinds) == ["forkserver", "standby"] or time.monotonic() > until:
                    break
                time.sleep(0.02)
            pss = rss = 0
            counts: dict[str, int] = {}
            for pid in [sup, *below]:
                info = psutil.Process(pid).memory_full_info()
                pss, rss = pss + info.pss // 1024, rss + info.rss // 1024
                role = "supervisor" if pid == sup else roles.get(proctree.cmdline(pid).split(" /")[0].strip(), "other")
                counts[role] = counts.get(role, 0) + 1
            client = psutil.Process().memory_full_info().pss // 1024
    return Footprint(counts, pss, rss, client)


def machine() -> dict[str, str]:
    """The facts about this machine that the figures depend on."""
    facts = {"cores": str(os.cpu_count()), "kernel": f"Linux {platform.release()} {platform.machine()}",
             "python": f"{platform.python_implementation()} {platform.python_version()}"}
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
        facts["cpu"] = cpu
    except (OSError, StopIteration):
        pass
    try:
        total = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                     if line.startswith("MemTotal:"))
        facts["memory"] = f"{total / (1 << 20):.1f} GiB"
        facts["memory_kib"] = str(total)
    except (OSError, StopIteration, ValueError):
        pass
    return facts


# What each target's figure means to someone running agents on Peon, by key.
MEANINGS = {
    "bash.back_to_back": "what an agent's shell command costs on top of starting `bash -lc` itself, when calls "
                         "come one after another (a test loop, a build script driven by an agent)",
    "bash.apart": "the same for calls 100 ms apart, the usual rhythm of an agent that thinks between calls",
    "read.back_to_back": "a 4 KiB file read through Peon (isolated worker, path checks, audit) against "
                         "starting `cat`, calls one after another",
    "read.apart": "the same, calls 100 ms apart",
    "mcp.read": "one `read` through `peon mcp`, what an MCP client such as Claude Code waits for, against "
                "the reference filesystem server",
    "mcp.bash": "one `bash` call through `peon mcp` against a plain MCP shell server without isolation",
    "mcp.read_rate": "how many calls per second one `peon mcp` session sustains",
    "mcp.start": "how long an MCP client waits before it can list Peon's tools",
    "agents.cpu.mcp": "the CPU the server side spends per call of a typical agent's mix (reads, `git status`, "
                      "`ls`, writes) through `peon mcp`, against the two plain MCP servers an agent needs for the "
                      "same tools: what decides how many agents share a host",
    "agents.cpu.embedded": "the same for an application embedding Peon (`peon.Session`)",
    "agents.cpu.serve": "the same with every agent a client of one `peon serve` (its HTTP front end included)",
    "agents.rate.embedded": "the calls per second 64 agents get, each pausing 50-500 ms between calls and one "
                            "embedded session each, in a steady 15 s (all open, every one has called), against the "
                            "two plain MCP servers each agent would otherwise run, measured in the same run",
    "agents.rate.mcp": "the same with a `peon mcp` per agent, as coding-agent clients run it",
    "agents.rate.serve": "the same with every agent a client of one `peon serve`",
    "agents.p99.embedded": "the slowest 1 % of those 64 agents' calls, as the agent waits for them, against the "
                           "peers' in the same run",
    "agents.p99.mcp": "the same with a `peon mcp` per agent",
    "agents.p99.serve": "the same with every agent a client of one `peon serve`",
    "first_call": "how long the first call of a new session (a sandboxed `bash`, its worker's first) takes against "
                  "the same call once the session is warm: what an agent waits for when it starts",
    "agents.agents.embedded": "how many agents, each pausing 50-500 ms between calls, one embedded session each, "
                              "before the slowest 1 % of calls takes more than 100 ms",
    "agents.agents.mcp": "the same with a `peon mcp` per agent, as coding-agent clients run it",
    "agents.agents.serve": "the same with every agent a client of one `peon serve`",
    "idle_pss.embedded": "the memory an embedded session holds while its agent thinks (shared pages divided "
                         "among the processes sharing them)",
    "idle_pss.mcp": "the same for `peon mcp`, its own interpreter included",
    "job.pss": "the memory one background job (a dev server, a watcher) adds beyond the command itself",
    "job.python_processes": "the Python processes one background job adds",
    "deadline_to_clean.cgroup": "how long after a call's timeout every process it started (a 300-process fork "
                                "loop) is gone, with cgroup containment",
    "deadline_to_clean.process-tree": "the same without cgroups (containers without a delegated cgroup)",
    "flood_rss": "the memory Peon itself holds while a command prints 1 GiB (output is kept as head, tail and a "
                 "bounded store, so a flood does not grow it)",
    "idle_cpu": "the CPU a session costs while it waits for its agent (the target: none at all)",
    "soak.descriptors": "descriptors leaked over thousands of mixed calls (the target: none)",
    "soak.processes": "processes left behind over thousands of mixed calls (the target: none)",
    "soak.rss_percent": "how much the session's processes grew over thousands of mixed calls",
}


def page(printed: list[str], figures: Figures, footprint: Footprint | None, facts: Mapping[str, str],
         command: str, seconds: float, quick: bool) -> str:
    """The user's performance page: the table as printed, the machine, the command, what the figures mean."""
    lines = [
        "# Performance",
        "",
        "<!-- generated by bench/targets.py --write-page; regenerate it rather than editing it -->",
        "",
        "Every speed and resource target of Peon, measured in one run of one command on one machine, each",
        "against a baseline measured in the same run (a ratio, so the figures hold across machines better than",
        "the milliseconds do). A figure is a median unless its line says otherwise.",
        "",
    ]
    if quick:
        lines += ["**This page comes from a short run (`--quick`): a check that the figures are plausible, not",
                  "figures to quote.**", ""]
    lines += ["## The machine and the command", "", "| | |", "|---|---|"]
    for key in ("cpu", "cores", "memory", "kernel", "python"):
        if key in facts:
            lines.append(f"| {key} | {facts[key]} |")
    lines += [f"| run | {seconds:.0f} s |", "", "```sh", command, "```", "",
              "## The table", "",
              "Columns: Peon's figure; the baseline and what it is; their ratio; the ratio a call would reach",
              "if it cost nothing beyond the design's floor (nothing of Peon's: a bare supervisor handing the call",
              "to a bare `multiprocessing` worker waiting for it, which `posix_spawn`s `bash -lc` for a command)",
              "and beyond Peon's own floor; the target; the verdict. \"out of reach\" means even the design's",
              "floor misses the target on this machine.", "",
              "```text", *printed, "```", "",
              "## What the figures mean for you", ""]
    for target in TARGETS:
        figure = figures.get(target.key)
        shown = "not measured" if figure is None else f"{number(figure['value'])} {figure['unit']}"
        lines.append(f"* **{target.label}** ({shown}): {MEANINGS.get(target.key, '')}.")
    lines.append("")
    if footprint is not None:
        lines += ["### Memory per session, agents per host", "",
                  f"A session at rest ({', '.join(f'{n} {role}' for role, n in sorted(footprint.processes.items()))})"
                  f" costs the host **{footprint.pss_kib / 1024:.0f} MiB** (PSS: pages shared between its processes"
                  f" counted once; {footprint.rss_kib / 1024:.0f} MiB RSS, shared pages counted in each).",
                  f"The client in the agent's own process (`peon mcp`, `peon serve` or your application) adds about"
                  f" {footprint.client_pss_kib / 1024:.0f} MiB.", ""]
        total = int(facts.get("memory_kib", "0"))
        if total:
            per = footprint.pss_kib + footprint.client_pss_kib
            lines += [f"On this machine's {facts['memory']}, memory alone would hold about **{total // per}"
                      " idle agent sessions**; the commands the agents run need their own memory on top, so plan",
                      "for those first."]
        idle = figures.get("idle_cpu")
        if idle is not None:
            used = "no CPU at all" if idle["value"] <= 0 else f"{number(idle['value'])} {idle['unit']} of CPU"
            lines.append(f"An idle session used {used} in this run's idle window (the idle figure above).")
        lines += ["A session at rest costs no CPU, so the CPU a host needs follows the calls that run at once,",
                  "not the number of sessions."]
        lines.append("")
    return "\n".join(lines)


def runs(quick: bool, soak_calls: int, profile: bool = False) -> list[list[str]]:
    """The benchmark commands, each script's path in ``bench/`` first: the ones docs/performance.md is
    measured with, or shorter ones for ``--quick``."""
    commands = [
        ["suite/bench_core.py", "--calls", "50" if quick else "200", "--deadline-runs", "3" if quick else "5",
         "--apart-calls", "20" if quick else "50", "--first-runs", "3" if quick else "5"],
        ["suite/bench_read.py", "--calls", "50" if quick else "200", "--apart-calls", "20" if quick else "50"],
        ["suite/bench_mcp.py", "--rounds", "1" if quick else "3", "--calls", "50" if quick else "200",
         "--starts", "4" if quick else "10"],
        ["suite/bench_agents.py", *(["--quick"] if quick else [])],
    ]
    if soak_calls:
        commands.append(["suite/soak.py", "--calls", str(soak_calls), "--warmup", str(min(4000, soak_calls // 2))])
    if profile:
        commands.append(["suite/profile_call.py", "--calls", "100" if quick else "300"])
    return commands


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and a 1,000-call soak: a check, not a figure")
    parser.add_argument("--soak-calls", type=int, help="calls of the soak (default 10000; 1000 with --quick; 0: none)")
    parser.add_argument("--profile", action="store_true", help="end with a perf profile of back-to-back calls")
    parser.add_argument("--write-page", metavar="PATH", type=Path,
                        help="write the performance page (the table, the machine, the command, what it means) there")
    options = parser.parse_args()
    soak_calls = options.soak_calls if options.soak_calls is not None else 1000 if options.quick else 10_000
    failed = []
    with tempfile.TemporaryDirectory(prefix="peon-bench-targets-") as tmp:
        recorded = Path(tmp) / "figures.jsonl"
        recorded.touch()
        env = dict(os.environ, **{ENV: str(recorded)})
        started = time.monotonic()
        for script, *args in runs(options.quick, soak_calls, options.profile):
            print(f"\n+ {Path(sys.executable).name} bench/{script} {' '.join(args)}", flush=True)
            begun = time.monotonic()
            if subprocess.run([sys.executable, str(BENCH / script), *args], env=env).returncode != 0:
                failed.append(Path(script).name)
            print(f"({Path(script).name}: {time.monotonic() - begun:.0f} s)", flush=True)
        figures = read_figures(recorded.read_text(encoding="utf-8").splitlines())
    footprint = None
    try:
        footprint = measure_footprint()
    except Exception as exc:  # a figure that could not be taken is reported, not a crash of the whole run
        print(f"session footprint: not measured ({type(exc).__name__}: {exc})")
        failed.append("session footprint")
    else:
        print(f"\nsession at rest: {footprint.pss_kib / 1024:.1f} MiB PSS, {footprint.rss_kib / 1024:.1f} MiB RSS "
              f"({footprint.processes}); client {footprint.client_pss_kib / 1024:.1f} MiB PSS")
    seconds = time.monotonic() - started
    printed = [f"every target, one run ({seconds:.0f} s; {os.cpu_count()} cores; "
               f"load average {os.getloadavg()[0]:.2f})", *table(figures)]
    if failed:
        printed.append(f"failed: {', '.join(failed)} (their figures are missing above)")
    print("\n" + "\n".join(printed))
    if options.write_page:
        command = shlex.join(["python", "bench/targets.py", *sys.argv[1:]])
        options.write_page.write_text(page(printed, figures, footprint, machine(), command, seconds, options.quick),
                                      encoding="utf-8")
        print(f"wrote {options.write_page}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
