"""What the OS sandbox costs per call, against the same call unsandboxed, measured in the same run.

1. Per call, through a real session: ``session.call("bash", ...)`` with ``[sandbox] mode = "off"`` (the
   baseline); the default sandbox (``auto``: Landlock with the mount view and seccomp where this machine
   allows); the same with ``network = false`` (plus the session's network namespace, joined per call);
   Landlock alone (the layers beside it switched off with ``PEON_SANDBOX_SIMULATE``); and bubblewrap
   (where it can run), interleaved call by call so every variant sees the same machine. Two commands:
   ``true`` and a short real one (``git status`` in a small repository, or ``ls -R /usr/include`` without
   git). Goal: the default sandbox <= 1.05x in CPU, <= 1.10x in wall time. Wall time per call
   (median), then CPU time per call (everything the session's processes and this client used, in
   alternating batches): on a busy machine wall time mostly measures waiting for a CPU.
2. ``--strategies``: how the worker could start a command inside a Landlock domain, measured in one
   worker-sized interpreter starting ``/bin/true`` (the spawn cost itself, no session): posix_spawn
   unsandboxed (the baseline); one restricted thread per call that posix_spawns (Peon's choice, a bare
   ``_thread`` and a lock), the same with ``threading.Thread``; fork, restrict the child, exec; and a
   pre-exec helper (a Python program that restricts itself and execs).
3. ``--parts``: where a sandboxed start's extra CPU goes, in one worker-sized interpreter starting
   ``bash -lc true`` with the plans of real sessions (default and ``network = false``) against the same
   start unsandboxed: each step of the worker's start (timed on the thread's CPU clock by wrapping the
   function the worker calls), the bare thread round trip, and the command's own extra CPU (Landlock's
   path walks, the seccomp filter on each system call).

Run: ``python bench/studies/bench_sandbox.py [--calls N] [--strategies] [--parts]``
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

import peon
from peon.workers import proctree, sandbox
from peon.workers.sandbox import landlock as ll

ALLOW = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow", "delegate": "allow"}}


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def cpu_seconds() -> float:
    """User + system CPU time of this process and its reaped children."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def describe(times: list[float]) -> str:
    q = statistics.quantiles(times, n=10)
    return f"median {median_ms(times):7.3f} ms  p10 {q[0] * 1000:7.3f}  p90 {q[-1] * 1000:7.3f}"


def session_variants(workspace: Path, state: Path, env: dict) -> dict[str, peon.Session]:
    variants: dict[str, dict] = {"off": {"mode": "off"}, "default": {}, "offline": {"network": False},
                                 "landlock": {"kind": "landlock"}}  # auto: it lists what it leaves out
    envs = {"landlock": {**env, sandbox.SIMULATE_ENV: "no-namespaces,no-seccomp"}}
    bwrap = sandbox.probe_bwrap(env, network=True)
    if bwrap.works:
        variants["bwrap"] = {"mode": "required", "kind": "bwrap", "isolate_abstract_sockets": False}
    else:
        print(f"bwrap: skipped ({bwrap.detail})")
    abi = ll.abi_version().abi
    if abi < 6:
        variants["landlock"].update(isolate_signals=False, isolate_abstract_sockets=False)
    sessions = {}
    for name, table in variants.items():
        sessions[name] = peon.Session(workspace, {**ALLOW, "sandbox": table}, state_dir=state / name,
                                      env=envs.get(name, env))
        print(f"{name:<9} layers: {sessions[name].info['sandbox'].get('layers') or 'none'}")
    return sessions


def _schedstat_seconds(pid: int) -> float:
    """CPU time of the live threads of ``pid`` (nanoseconds in ``schedstat``: no 10 ms ticks)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def _tree_ticks_seconds(root: int) -> float:
    """CPU time of ``root`` and every live descendant, with what each reaped (``/proc/<pid>/stat``: in clock
    ticks, so only a rough figure over few calls)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in [root, *proctree.descendants(root)]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return total / ticks


def session_cpu_seconds(session: peon.Session) -> float:
    """CPU time (user + system) used so far by the session's processes and this client. With the session's
    cgroup (``cpu.stat``, microseconds) it counts the forkserver, every worker and every command, living or
    gone, plus the supervisor's threads (``schedstat``); without one, the process tree in clock ticks."""
    me = time.process_time()  # every thread of this client, nanosecond clock
    path = (session.info.get("containment") or {}).get("cgroup")
    if path:
        try:
            with open(os.path.join(path, "cpu.stat")) as f:
                usage = next(int(line.split()[1]) for line in f if line.startswith("usage_usec "))
            return usage / 1e6 + _schedstat_seconds(session.supervisor_pid) + me
        except (OSError, StopIteration, ValueError):
            pass
    return _tree_ticks_seconds(session.supervisor_pid) + me


def rotated(sessions: dict[str, peon.Session], round_: int) -> list[tuple[str, peon.Session]]:
    """The variants in a different order each round: no variant always runs after the same other one
    (after bwrap, say, whose run leaves the CPU's caches colder)."""
    items = list(sessions.items())
    shift = round_ % len(items)
    return items[shift:] + items[:shift]


def bench_cpu(sessions: dict[str, peon.Session], command: str, label: str, calls: int, batch: int = 10) -> None:
    """CPU per call, in batches alternating between the variants: unlike wall time, it does not grow
    with the load other processes put on the machine."""
    used: dict[str, float] = dict.fromkeys(sessions, 0.0)
    done: dict[str, int] = dict.fromkeys(sessions, 0)
    for round_ in range(max(1, calls // batch)):
        for name, session in rotated(sessions, round_):
            before = session_cpu_seconds(session)
            for _ in range(batch):
                session.call("bash", {"command": command})
            time.sleep(0.05)  # let the last worker be reaped, so its CPU time is counted
            used[name] += session_cpu_seconds(session) - before
            done[name] += batch
    base = used["off"] / done["off"]
    for name in sessions:
        per_call = used[name] / done[name]
        print(f"{label:<14} {name:<9} CPU per call {per_call * 1000:7.3f} ms  ratio {per_call / base:.3f}")


def bench_calls(sessions: dict[str, peon.Session], command: str, label: str, calls: int) -> None:
    for _ in range(10):
        for session in sessions.values():
            session.call("bash", {"command": command})
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for round_ in range(calls):
        for name, session in rotated(sessions, round_):
            start = time.perf_counter()
            result = session.call("bash", {"command": command})
            times[name].append(time.perf_counter() - start)
            assert result.ok and result.value["exit_code"] == 0, result
            assert (result.value["sandbox"] is None) == (name == "off"), result.value
    base = median_ms(times["off"])
    for name, samples in times.items():
        print(f"{label:<14} {name:<9} {describe(samples)}  ratio {median_ms(samples) / base:.3f}")


def real_command(workspace: Path, env: dict) -> str:
    if shutil.which("git"):
        repo = workspace / "repo"
        repo.mkdir()
        for i in range(50):
            (repo / f"file{i}.txt").write_text(f"line {i}\n")
        git = {**env, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
        subprocess.run(["git", "init", "-q"], cwd=repo, env=git, check=True)
        subprocess.run(["git", "add", "."], cwd=repo, env=git, check=True)
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "x"], cwd=repo, env=git,
                       check=True)
        return "cd repo && GIT_CONFIG_NOSYSTEM=1 git status --short >/dev/null"
    return "ls -R /usr/include >/dev/null"


def main_calls(calls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="peon-bench-sandbox-") as tmp:
        root = Path(tmp)
        workspace, home = root / "ws", root / "home"
        workspace.mkdir()
        home.mkdir()
        env = {**os.environ, "HOME": str(home)}  # a clean HOME: the login profile stays cheap
        command = real_command(workspace, env)
        sessions = session_variants(workspace, root / "state", env)
        try:
            print(f"Landlock ABI {ll.abi_version().abi}; {calls} calls per variant, interleaved")
            bench_calls(sessions, "true", "bash true", calls)
            bench_calls(sessions, command, "short command", calls)
            bench_cpu(sessions, "true", "bash true", calls)
            bench_cpu(sessions, command, "short command", calls)
            print(f"(short command: {command}; ratios against mode = off in the same run)")
        finally:
            for session in sessions.values():
                session.close()


# -- strategies -------------------------------------------------------------------------------------

HELPER = """
import os, sys
sys.path.insert(0, sys.argv[1])
from peon.workers.sandbox import landlock as ll
abi = ll.abi_version().abi
ruleset = ll.Ruleset(abi, ll.fs_rights(abi))
ruleset.allow_beneath("/", ll.FS_READ)
ruleset.allow_beneath(sys.argv[2], ll.fs_rights(abi))
ruleset.restrict_current_thread()
os.execv(sys.argv[3], sys.argv[3:])
"""


def main_strategies(calls: int) -> None:
    import peon.tools  # noqa: F401  (a worker-sized interpreter)
    from peon.workers.sandbox.plan import SandboxPlan

    abi = ll.abi_version().abi
    if abi < 1:
        print("strategies: skipped (no Landlock)")
        return
    argv = ["/bin/true"]
    env = {"PATH": "/usr/bin:/bin"}
    with tempfile.TemporaryDirectory(prefix="peon-bench-strategies-") as tmp:
        plan = SandboxPlan("landlock", (tmp, "/dev/null"), ("/",), True, abi >= 6, abi >= 6, abi=abi)
        confinement = sandbox.LandlockConfinement(plan)
        helper = Path(tmp) / "helper.py"
        helper.write_text(HELPER)
        root = str(Path(__file__).resolve().parents[2])

        def spawn(args: list[str], executable: str | None = None) -> int:
            stdin = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
            return os.posix_spawn(args[0], args, env, file_actions=stdin, setsid=True, setsigdef=(signal.SIGPIPE,),
                                  setsigmask=())

        def posix_spawn() -> int:
            return spawn(argv)

        def thread_per_call() -> int:
            return confinement.spawn(spawn, argv)

        def threading_thread_per_call() -> int:
            """The same with threading.Thread (start-up handshake + join): more wake-ups per call."""
            outcome: list[int] = []

            def confined() -> None:
                with ll.Ruleset(abi, ll.fs_rights(abi)) as ruleset:
                    ruleset.allow_beneath("/", ll.FS_READ)
                    ruleset.allow_beneath(tmp, ll.fs_rights(abi))
                    ruleset.restrict_current_thread()
                outcome.append(spawn(argv))

            thread = threading.Thread(target=confined)
            thread.start()
            thread.join()
            return outcome[0]

        def fork_restrict_exec() -> int:
            ruleset = ll.Ruleset(abi, ll.fs_rights(abi))
            ruleset.allow_beneath("/", ll.FS_READ)
            ruleset.allow_beneath(tmp, ll.fs_rights(abi))
            pid = os.fork()
            if pid == 0:
                try:
                    ruleset.restrict_current_thread()
                    os.setsid()
                    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                    os.execve(argv[0], argv, env)
                finally:
                    os._exit(127)
            ruleset.close()
            return pid

        def pre_exec_helper() -> int:
            return spawn([sys.executable, "-I", "-S", str(helper), root, tmp, *argv])

        strategies = [posix_spawn, thread_per_call, threading_thread_per_call, fork_restrict_exec, pre_exec_helper]
        times: dict[str, list[float]] = {s.__name__: [] for s in strategies}
        cpu: dict[str, list[float]] = {s.__name__: [] for s in strategies}
        for round_ in range(calls + 5):
            for strategy in strategies:
                if strategy is pre_exec_helper and round_ % 5:
                    continue  # ~50x slower: sampled every fifth round
                used = cpu_seconds()
                start = time.perf_counter()
                os.waitpid(strategy(), 0)
                if round_ >= 5:
                    times[strategy.__name__].append(time.perf_counter() - start)
                    cpu[strategy.__name__].append(cpu_seconds() - used)
        base = median_ms(times["posix_spawn"])
        base_cpu = statistics.mean(cpu["posix_spawn"]) * 1e6
        print("strategies: start and reap /bin/true from one interpreter; wall time, then CPU time (this process "
              "and the child, user + system; independent of other load)")
        for name, samples in times.items():
            m, c = median_ms(samples), statistics.mean(cpu[name]) * 1e6
            print(f"  {name:<26} {describe(samples)}  ratio {m / base:5.2f}   "
                  f"CPU {c:8.0f} us  +{c - base_cpu:7.0f} us  ratio {c / base_cpu:5.2f}")


# -- parts ------------------------------------------------------------------------------------------

# (module, attribute, label): the steps of LandlockConfinement.spawn, each timed where the worker calls it
# ("sandbox": peon.workers.sandbox.confine, where spawn looks them up).
PARTS = (("sandbox", "prepared_ruleset", "ruleset (kept; its directories stat'ed)"),
         ("namespaces", "host_sockets_text", "host sockets listed (network = false)"),
         ("Confinement", "take_ledger", "agent-control paths recorded"),
         ("namespaces", "enter", "mount view entered, checked, completed; network joined"),
         ("sandbox", "drop_capabilities", "capabilities dropped"),
         ("Ruleset", "restrict_current_thread", "Landlock restrict_self"),
         ("Filter", "load", "seccomp program loaded (the kernel JIT-compiles it)"))


def main_parts(calls: int) -> None:
    import _thread
    import dataclasses

    import peon.tools  # a worker-sized interpreter
    from peon.workers.sandbox import confine, namespaces, syscall_filter
    from peon.workers.sandbox.plan import SandboxPlan, quiet_profile

    if ll.abi_version().abi < 1 or namespaces.probe():
        print("parts: skipped (needs Landlock and namespaces, i.e. root)")
        return
    with tempfile.TemporaryDirectory(prefix="peon-bench-parts-") as tmp:
        root = Path(tmp)
        workspace, home = root / "ws", root / "home"
        workspace.mkdir()
        home.mkdir()
        (workspace / ".git" / "hooks").mkdir(parents=True)
        env = {**os.environ, "HOME": str(home)}
        plans = {}
        for name, table in {"default": {}, "offline": {"network": False}}.items():
            session = peon.Session(workspace, {**ALLOW, "sandbox": table}, state_dir=root / name, env=env)
            plans[name] = SandboxPlan.from_dict(session.info["sandbox"]["plan"])
            session.close()
        for plan in plans.values():  # the session's cache directory went with it
            for path in plan.writable:
                if not path.startswith("/dev/"):
                    os.makedirs(path, exist_ok=True)
        netns = namespaces.session_network()  # this process's own, in place of the closed session's
        plans["offline"] = dataclasses.replace(plans["offline"], netns=netns.path, netns_inode=netns.inode)
        os.chdir(workspace)
        argv = ["/bin/bash", "-lc", "true"]

        def start(args: list[str], executable: str | None = None) -> int:
            read, write = os.pipe2(os.O_CLOEXEC)
            pid = os.posix_spawn(executable or args[0], list(args), env, setsid=True, setsigmask=(),
                                 setsigdef=(signal.SIGPIPE,),
                                 file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                               (os.POSIX_SPAWN_DUP2, write, 1), (os.POSIX_SPAWN_DUP2, write, 2)])
            os.close(write)
            while os.read(read, 65536):
                pass
            os.close(read)
            return pid

        spent: dict[str, float] = {}
        owners = {"sandbox": confine, "namespaces": namespaces, "Ruleset": ll.Ruleset, "Filter": syscall_filter.Filter,
                  "Confinement": confine.Confinement}
        for owner, attribute, label in PARTS:
            function = getattr(owners[owner], attribute)

            def timed(*args: object, _function: object = function, _label: str = label, **kwargs: object) -> object:
                began = time.thread_time()
                try:
                    return _function(*args, **kwargs)  # type: ignore[operator]
                finally:
                    spent[_label] = spent.get(_label, 0.0) + time.thread_time() - began

            setattr(owners[owner], attribute, timed)

        def round_trip() -> None:
            done = _thread.allocate_lock()
            done.acquire()
            _thread.start_new_thread(done.release, ())
            done.acquire()

        variants = {"off": None, **{name: sandbox.LandlockConfinement(plan) for name, plan in plans.items()}}
        parent = dict.fromkeys(variants, 0.0)
        child = dict.fromkeys(variants, 0.0)
        parts = {name: {} for name in variants}
        for round_ in range(calls + 10):
            for name, confinement in variants.items():
                spent.clear()
                began = time.process_time()
                pid = (start(quiet_profile(argv)) if confinement is None else confinement.spawn(start, argv))
                used = time.process_time() - began
                usage = os.wait4(pid, 0)[2]
                if round_ >= 10:
                    parent[name] += used
                    child[name] += usage.ru_utime + usage.ru_stime
                    for label, seconds in spent.items():
                        parts[name][label] = parts[name].get(label, 0.0) + seconds
        began = time.process_time()
        for _ in range(calls):
            round_trip()
        thread = (time.process_time() - began) / calls
        print(f"parts: CPU per start of bash -lc true from a worker-sized interpreter, {calls} starts each "
              "(microseconds, extra against the unsandboxed start)")
        for name in variants:
            if name == "off":
                continue
            extra_parent = (parent[name] - parent["off"]) / calls * 1e6
            extra_child = (child[name] - child["off"]) / calls * 1e6
            print(f"  {name}: +{extra_parent + extra_child:.0f} in all: +{extra_parent:.0f} in the worker, "
                  f"+{extra_child:.0f} in the command")
            for label, seconds in parts[name].items():
                print(f"    {seconds / calls * 1e6:6.0f}  {label}")
            print(f"    {thread * 1e6:6.0f}  a bare thread's start and end, and the two wake-ups (measured apart)")
        print(f"  (unsandboxed: {parent['off'] / calls * 1e6:.0f} in the worker, {child['off'] / calls * 1e6:.0f} "
              "in the command)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--strategies", action="store_true", help="also compare ways to start a confined command")
    parser.add_argument("--strategies-only", action="store_true", help="only compare ways to start a confined command")
    parser.add_argument("--parts", action="store_true", help="only show where a sandboxed start's extra CPU goes")
    options = parser.parse_args()
    if options.parts:
        main_parts(max(options.calls, 200))
        return
    if not options.strategies_only:
        main_calls(options.calls)
    if options.strategies or options.strategies_only:
        main_strategies(max(options.calls, 200))


if __name__ == "__main__":
    main()
