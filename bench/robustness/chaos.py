"""Chaos: N sessions under random faults of every kind, every invariant checked.

Each session runs in a client process of its own (this script with ``--runner``), so a client can die
like any other process. Its workload (``chaos_calls.py``) is a mix of checked calls — reads of known
files, writes then reads, ``bash`` with known output, timeouts, background jobs and their output, a job
sent after the idle job host was stopped, a job that writes itself into a sibling job's cgroup and must
still end with its ``job_stop`` — and of calls whose commands attack Peon from inside (now and then
several submitted at once, which the session runs side by side, each checked alike): a command that
stops or kills its worker, stops the forkserver or the job host, kills the supervisor, stops its worker
and kills its supervisor and its client (the client is replaced), a fork loop past
``limits.max_processes``, a memory hog past ``limits.memory_max_bytes``. From outside, this process
injects at random times (``--fault-every`` seconds apart on average): ``SIGKILL``, ``SIGSTOP``
(continued later, or never) and ``SIGTERM`` to a random process of a session (supervisor, forkserver,
standby or running worker, command), a full disk under the session's state directory (a tmpfs per
session, filled for a few seconds), an immutable audit log (``chattr +i``) and the death of a client
(``SIGKILL``, then a new client).

Invariants, each violation printed:

* answered by its bound: every call is answered within its client-side bound (its timeout, the
  start bound, the worker grace and the answer margin, :meth:`peon.client.watchdog.Watchdog.start_bound`);
* ``ok`` ⇒ correct: a call answered ``ok`` (and not killed by an injected fault: exit 0, no signal)
  has exactly the expected output;
* nothing left after close: once a client closed its session, or died, no process of that
  session is alive (found by a tag in their environment) and, in cgroup mode, its cgroup is gone by
  the end of the run (a later session removes a dead supervisor's);
* every executed call audited: each call answered ``ok`` has its decision line in the audit log,
  and every line of every audit file is whole JSON; every job of a session that closed (its
  supervisor never died) has its ``job_ended`` line, or a ``lost`` line counts it, even when a full
  disk or an immutable log refused it when the job ended;
* the session recovers: after each fault, the session (or its replacement client) answers a checked
  call ``ok`` within ``--recovery`` seconds of the fault's end.

Both containment modes run side by side (``--containment both``: sessions alternate cgroup and
process-tree), each unsandboxed and sandboxed (``--sandbox both``): a sandboxed session's mix adds, alone
now and then, an attack on the sandbox's edges (``chaos_edges.py``: the allowlist proxy, git's
redirections and agent-control files, ``write`` and ``grep`` of what needs a person's yes, the limits of
Peon's own processes), each checked whatever its answer.
Run: ``python bench/robustness/chaos.py [--minutes 20] [--sessions 4] [--seed N]``; it must run as root
for the tmpfs and ``chattr`` faults (without them those kinds are skipped and said so). The pure part —
the invariants over the recorded events — is :func:`violations`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere
from bench.robustness.chaos_calls import KNOWN_FILES, ROOT, check, next_call
from bench.robustness.chaos_edges import EDGE_SHARE, SANDBOX, Edges, check_edge, next_edge_call

FORK_LOOP = (ROOT / "tests" / "fixtures" / "forkloop.py").read_text()
TAG = "PEON_CHAOS_TAG"
ANSWER_SLACK_SECONDS = 5.0  # a loaded machine: the client's own check runs once a second
SIGNALS = (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM)
# Answers that say the call was handed to a worker: its decision line must be in the audit log.
RAN = frozenset({"worker_crashed", "worker_hung", "worker_oom", "limit_exceeded"})
OUTSIDE_FAULTS = ("signal", "full_disk", "immutable_log", "client_death")
PARALLEL_SHARE = 0.3  # of the rounds that submit several calls at once, up to PARALLEL_MAX
PARALLEL_MAX = 4


def session_config(containment: str, sandbox: str = "off") -> dict[str, Any]:
    return {
        "approval": {"read_only": "allow", "filesystem": "allow", "process": "allow", "delegate": "deny"},
        "limits": {"worker_start_seconds": 3.0, "worker_grace_seconds": 2.0, "max_timeout_seconds": 30.0,
                   "default_timeout_seconds": 20.0, "max_processes": 100, "memory_max_bytes": 192 << 20},
        "audit": {"max_bytes": 4 << 20, "backups": 100},
        "runtime": {"containment": containment},
        # Unsandboxed: the commands that stop or kill Peon's own processes must reach them (the default
        # sandbox refuses such signals), the harder case for the core. Sandboxed: the sandbox's edges.
        "sandbox": {"mode": "off"} if sandbox == "off" else dict(SANDBOX),
    }


# -- the runner: one client process, one session ----------------------------------------------------

def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _write_fixtures(workspace: Path, until: float) -> None:
    """The files the checked calls expect. A client started while its slot's disk is full (an injected fault)
    retries until the fault ends: the harness's own set-up failing is not a session that did not recover."""
    while True:
        try:
            for name, text in KNOWN_FILES.items():
                (workspace / name).write_text(text)
            (workspace / "forkloop.py").write_text(FORK_LOOP)
            return
        except OSError:
            if time.time() >= until:
                raise
            time.sleep(0.2)


def run_session(options: argparse.Namespace) -> None:
    """The ``--runner`` process: calls until ``--until`` (epoch seconds), recording every outcome."""
    import peon

    workspace, state = Path(options.workspace), Path(options.state)
    _write_fixtures(workspace, options.until)
    env = {"HOME": str(workspace), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           TAG: options.tag}
    edges = Edges.prepare(workspace.parent, workspace) if options.sandbox != "off" else None
    if edges is not None:
        env["TMPDIR"] = str(edges.tmp)
    rng = random.Random(options.seed)
    config = session_config(options.containment, options.sandbox)
    session = _open(peon, workspace, config, env, state, options, edges)
    n = 0
    while time.time() < options.until:
        calls = []
        if edges is not None and rng.random() < EDGE_SHARE:  # an attack on the sandbox's edges, alone
            n += 1
            calls.append(next_edge_call(rng, n, edges))
        else:  # now and then several calls at once (the session runs them side by side), each checked alike
            for _ in range(1 + (rng.randint(1, PARALLEL_MAX - 1) if rng.random() < PARALLEL_SHARE else 0)):
                n += 1
                calls.append(next_call(rng, n))
        batch = len(calls)
        grace = float(config["limits"]["worker_grace_seconds"])
        submitted = [(call, time.time(), session._watchdog.start_bound() + call.timeout + grace + 5.0,
                      session.submit(call.tool, call.args)) for call in calls]
        replace = restart = False
        for call, started, bound, handle in submitted:
            try:
                result = handle.result(timeout=max(0.0, started + bound + ANSWER_SLACK_SECONDS - time.time()))
            except TimeoutError:
                emit({"op": "call", "kind": call.kind, "call_id": handle.call_id, "t": started, "took": None,
                      "bound": bound, "ok": False, "code": "unanswered", "wrong": None, "checked": call.checked,
                      "batch": batch})
                replace = True
                continue
            wrong = None
            if call.always and edges is not None:
                wrong = check_edge(session, call, result, edges)
            elif result.ok and call.checked and not replace:
                wrong = check(session, call, result, workspace)
            emit({"op": "call", "kind": call.kind, "call_id": handle.call_id, "t": started,
                  "took": time.time() - started, "bound": bound, "timeout": call.timeout, "ok": result.ok,
                  "code": None if result.ok else result.error.code, "wrong": wrong, "checked": call.checked,
                  "message": None if result.ok else result.error.message[:300], "batch": batch})
            restart = restart or (not result.ok and result.error.code == "supervisor_died")
            if not result.ok and result.error.code == "audit_failed":
                time.sleep(0.05)  # as a client would: not a busy loop while the disk is full
        if replace:
            session.close()  # a hung session is replaced, like a client would
            session = _open(peon, workspace, config, env, state, options, edges)
        elif restart:
            session = _restart(peon, session, workspace, config, env, state, options, edges)
    session.close()
    emit({"op": "closed", "t": time.time()})


def _open(peon: Any, workspace: Path, config: dict, env: dict, state: Path, options: argparse.Namespace,
          edges: Edges | None) -> Any:
    until = time.monotonic() + options.recovery
    while True:
        try:
            session = peon.Session(workspace, config, env=env, state_dir=state)
        except peon.PeonError as exc:  # a full disk under the state directory, say: try again
            if time.monotonic() > until:
                emit({"op": "no_recovery", "t": time.time(), "why": f"{exc.code.value}: {exc.message}"})
                raise
            time.sleep(0.5)
            continue
        if edges is not None:
            edges.remember(session.supervisor_pid)
        emit({"op": "ready", "t": time.time(), "supervisor": session.supervisor_pid,
              "cgroup": (session.info.get("containment") or {}).get("cgroup")})
        return session


def _restart(peon: Any, session: Any, workspace: Path, config: dict, env: dict, state: Path,
             options: argparse.Namespace, edges: Edges | None) -> Any:
    try:
        session.restart()
    except peon.PeonError:
        session.close()
        return _open(peon, workspace, config, env, state, options, edges)
    if edges is not None:
        edges.remember(session.supervisor_pid)
    emit({"op": "ready", "t": time.time(), "supervisor": session.supervisor_pid,
          "cgroup": (session.info.get("containment") or {}).get("cgroup")})
    return session


# -- the invariants (pure) ------------------------------------------------------------------------

@dataclass
class Fault:
    slot: int
    kind: str
    t: float
    end: float
    target: str


@dataclass
class Instance:
    """One client process: its session's events, where its state lives, how it ended."""

    slot: int
    containment: str
    tag: str
    state: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    killed: bool = False
    leftovers: list[str] = field(default_factory=list)  # processes alive after it closed or died
    # Every process seen in its session's tree, (pid, start time): Peon's titled processes cannot be
    # found by their environment (a long title overwrites it), so they are remembered while alive.
    seen: set[tuple[int, float]] = field(default_factory=set)
    sandbox: str = "off"  # the session's sandbox.mode

    @property
    def label(self) -> str:
        return self.containment if self.sandbox == "off" else f"{self.containment}, sandboxed"


def violations(instances: Iterable[Instance], faults: Iterable[Fault], audit: Mapping[str, dict[str, Any]],
               end: float, recovery: float) -> list[str]:
    """Every broken invariant, one sentence each. ``audit`` maps a state directory to what its audit
    files hold: ``decided`` (call ids with a decision line) and ``broken`` (lines that are not JSON)."""
    found: list[str] = []
    instances = list(instances)
    ok_calls: dict[int, list[float]] = {}
    for inst in instances:
        logged = audit.get(str(inst.state), {"decided": set(), "broken": []})
        found += [f"slot {inst.slot}: audit line not whole JSON: {line[:80]!r}" for line in logged["broken"]]
        for event in inst.events:
            if event["op"] == "no_recovery":
                found.append(f"slot {inst.slot}: the session could not be reopened: {event['why']}")
            if event["op"] != "call":
                continue
            what = f"slot {inst.slot} ({inst.label}) {event['kind']} {event['call_id']}"
            if event["took"] is None or event["took"] > event["bound"] + ANSWER_SLACK_SECONDS:
                found.append(f"{what}: not answered by its bound of {event['bound']:.1f} s "
                             f"(took {event['took'] if event['took'] is None else round(event['took'], 1)} s)")
            if event["wrong"]:
                found.append(f"{what}: {'ok but wrong' if event['ok'] else 'failed, and wrong after it'}: "
                             f"{event['wrong']}")
            if (event["ok"] or event["code"] in RAN) and event["call_id"] not in logged["decided"]:
                found.append(f"{what}: ran ({event['code'] or 'ok'}) with no decision line in the audit log")
            if event["ok"] and event["checked"]:
                ok_calls.setdefault(inst.slot, []).append(event["t"])
        found += unended_jobs(inst, logged)
        found += [f"slot {inst.slot} ({inst.label}): left alive after its client "
                  f"{'died' if inst.killed else 'closed'}: {pid}" for pid in inst.leftovers]
    for fault in faults:
        if fault.end + recovery > end:
            continue  # too close to the end to judge
        if not any(fault.end <= t <= fault.end + recovery for t in ok_calls.get(fault.slot, [])):
            found.append(f"slot {fault.slot}: no ok call within {recovery:g} s after {fault.kind} ({fault.target})")
    return found


def unended_jobs(inst: Instance, logged: Mapping[str, Any]) -> list[str]:
    """A session that closed with its supervisor never dead audits every job's end: its ``job_ended``
    line, or a ``lost`` line that counts it (a full or immutable log at the job's end delays the line)."""
    closed = any(event["op"] == "closed" for event in inst.events)
    died = any(event["op"] == "call" and event["code"] in ("supervisor_died", "unanswered") for event in inst.events)
    unended = sorted(logged.get("unended", ()))
    if inst.killed or not closed or died or len(unended) <= logged.get("lost", 0):
        return []
    return [f"slot {inst.slot} ({inst.label}): job {job} started with no job_ended line in the audit log"
            for job in unended]


# -- the orchestrator -----------------------------------------------------------------------------

class Slot:
    """One session at a time, replaced when its client dies."""

    def __init__(self, index: int, containment: str, sandbox: str, root: Path, options: argparse.Namespace,
                 until: float):
        self.index, self.containment, self.sandbox = index, containment, sandbox
        self.options, self.until = options, until
        self.root = root / f"slot-{index}"
        self.root.mkdir()
        # Clients' and supervisors' diagnostics, outside the tmpfs that is filled up now and then.
        self.stderr = open(root / f"slot-{index}.stderr", "ab")  # noqa: SIM115 - open as long as the slot
        self.mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(self.root)],
                                      capture_output=True).returncode == 0
        self.instances: list[Instance] = []
        self.process: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None
        self.runs = 0

    @property
    def current(self) -> Instance:
        return self.instances[-1]

    def start(self) -> None:
        self.runs += 1
        run = self.root / f"run-{self.runs}"
        workspace, state = run / "ws", run / "state"
        workspace.mkdir(parents=True)
        inst = Instance(self.index, self.containment, uuid.uuid4().hex, state, sandbox=self.sandbox)
        self.instances.append(inst)
        seed = self.options.seed * 1000 + self.index * 100 + self.runs
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--runner", "--workspace", str(workspace), "--state", str(state),
             "--containment", self.containment, "--sandbox", self.sandbox, "--seed", str(seed),
             "--until", str(self.until),
             "--tag", inst.tag, "--recovery", str(self.options.recovery)],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, env={**os.environ, TAG: inst.tag})
        process = self.process

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                try:
                    inst.events.append(json.loads(line))
                except ValueError:
                    continue

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()

    def supervisor(self) -> int | None:
        ready = [e for e in self.current.events if e["op"] == "ready"]
        return ready[-1]["supervisor"] if ready else None

    def audit_log(self) -> Path:
        return self.current.state / "audit.jsonl"

    def finish(self, killed: bool = False, replace: bool = False, meanwhile: Any = None) -> None:
        """After its client exited (or was killed): what of its session is still alive. ``replace``: a
        new client starts first, as after a crash (its session cleans up what a dead one left)."""
        assert self.process is not None and self.reader is not None
        self.process.wait()
        self.reader.join(10)
        inst = self.current
        inst.killed = killed
        if replace:
            self.start()
        inst.leftovers = wait_gone(inst, 15.0, meanwhile)

    def sample(self) -> None:
        """Remember the processes of the current session's tree (for the leftover check)."""
        import psutil

        supervisor = self.supervisor() if self.instances else None
        if supervisor is None:
            return
        for pid, _ in session_processes(supervisor):
            try:
                self.current.seen.add((pid, psutil.Process(pid).create_time()))
            except psutil.Error:
                continue


def alive_of(inst: Instance) -> list[int]:
    """The processes of ``inst``'s sessions still alive: commands carry its tag in their environment,
    Peon's own processes were seen in its trees."""
    import psutil

    found = set()
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get(TAG) == inst.tag and process.status() != "zombie":
                found.add(process.pid)
        except psutil.Error:
            continue
    for pid, started in list(inst.seen):  # a copy: the sampler adds to it
        try:
            process = psutil.Process(pid)
            if process.create_time() == started and process.status() != "zombie":
                found.add(pid)
        except psutil.Error:
            continue
    return sorted(found)


def wait_gone(inst: Instance, timeout: float, meanwhile: Any = None) -> list[str]:
    """The processes of a session still alive ``timeout`` after its client ended (then killed)."""
    from peon.workers import proctree

    until = time.monotonic() + timeout
    while (alive := alive_of(inst)) and time.monotonic() < until:
        if meanwhile is not None:  # the faults that end meanwhile end on time (a stopped process continued)
            meanwhile()
        time.sleep(0.2)
    left = [f"{pid} {proctree.cmdline(pid)!r} (state {proctree.state(pid)}, "
            f"parent {(proctree.stat_fields(pid) or '??')[1]})" for pid in alive]
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def session_processes(supervisor: int) -> list[tuple[int, str]]:
    from peon.workers import proctree

    return [(pid, proctree.cmdline(pid) or "?") for pid in [supervisor, *proctree.descendants(supervisor)]]


def inject(rng: random.Random, slot: Slot, kind: str, later: list[tuple[float, Any]]) -> Fault | None:
    """Apply one fault to ``slot`` now; what must be undone later goes to ``later`` (time, action)."""
    now = time.time()
    if kind == "signal":
        supervisor = slot.supervisor()
        if supervisor is None:
            return None
        processes = session_processes(supervisor)
        pid, title = rng.choice(processes)
        sig = rng.choice(SIGNALS)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return None
        try:
            signal.pidfd_send_signal(pidfd, sig)
        except OSError:
            os.close(pidfd)
            return None
        end = now
        if sig == signal.SIGSTOP and rng.random() < 0.7:  # continued later, or left stopped for Peon to handle
            end = now + rng.uniform(0.5, 8.0)
            later.append((end, lambda: (_send(pidfd, signal.SIGCONT), os.close(pidfd))))
        else:
            os.close(pidfd)
        return Fault(slot.index, f"signal {signal.Signals(sig).name}", now, end, f"{pid} {title.split(' /')[0]}")
    if kind == "full_disk":
        if not slot.mounted:
            return None
        filler = slot.root / "filler"
        try:
            out = open(filler, "wb")  # noqa: SIM115 - closed below
        except OSError:  # full already: the fault is there
            return None
        with out:
            try:
                while True:
                    out.write(b"\0" * (1 << 20))
                    out.flush()
            except OSError:
                pass
        end = now + rng.uniform(1.0, 6.0)
        later.append((end, lambda: filler.unlink(missing_ok=True)))
        return Fault(slot.index, "full_disk", now, end, str(slot.root))
    if kind == "immutable_log":
        log = slot.audit_log()
        if subprocess.run(["chattr", "+i", str(log)], capture_output=True).returncode != 0:
            return None
        end = now + rng.uniform(1.0, 6.0)
        later.append((end, lambda: subprocess.run(["chattr", "-i", str(log)], capture_output=True)))
        return Fault(slot.index, "immutable_log", now, end, str(log))
    if kind == "client_death":
        assert slot.process is not None
        dead = slot.process.pid
        slot.process.kill()
        slot.finish(killed=True, replace=True, meanwhile=lambda: _run_due(later))
        return Fault(slot.index, "client_death", now, time.time(), f"client {dead}")
    raise ValueError(kind)


def _send(pidfd: int, sig: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except OSError:
        pass


def read_audit(state: Path) -> dict[str, Any]:
    decided: set[str] = set()
    broken: list[str] = []
    jobs: dict[str, set[str]] = {"job_started": set(), "job_ended": set()}
    lost = 0
    if state.is_dir():
        for name in os.listdir(state):
            if not name.startswith("audit.jsonl"):
                continue
            subprocess.run(["chattr", "-i", str(state / name)], capture_output=True)
            for line in (state / name).read_text(errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    broken.append(line)
                    continue
                if entry.get("event") == "decision":
                    decided.add(entry.get("call_id"))
                elif entry.get("event") in jobs:
                    jobs[entry["event"]].add(str(entry.get("job_id")))
                elif entry.get("event") == "lost":
                    lost += int(entry.get("events", {}).get("job_ended", 0))
    return {"decided": decided, "broken": broken, "unended": jobs["job_started"] - jobs["job_ended"], "lost": lost}


def orchestrate(options: argparse.Namespace) -> int:
    import peon
    from peon.workers import cgroup

    rng = random.Random(options.seed)
    modes = {"both": ["cgroup", "process-tree"], "cgroup": ["cgroup"], "process-tree": ["process-tree"]}[
        options.containment]
    start = time.time()
    until = start + options.minutes * 60
    root = Path(tempfile.mkdtemp(prefix="peon-chaos-"))
    sandboxes = {"both": ["off", "auto"], "off": ["off"], "auto": ["auto"]}[options.sandbox]
    slots = [Slot(i, modes[i % len(modes)], sandboxes[i // len(modes) % len(sandboxes)], root, options, until)
             for i in range(options.sessions)]
    faults: list[Fault] = []
    later: list[tuple[float, Any]] = []
    skipped: Counter[str] = Counter()
    keep = False
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.5):
            for slot in slots:
                try:
                    slot.sample()
                except Exception:  # a tree changing under the walk: the next sample sees it
                    continue

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        for slot in slots:
            slot.start()
        sampler.start()
        while time.time() < until - 1:
            pause = min(rng.expovariate(1 / options.fault_every), max(until - 1 - time.time(), 0))
            deadline = time.time() + pause
            while time.time() < deadline:
                _run_due(later)
                _replace_dead_clients(slots, until)
                time.sleep(min(0.1, max(deadline - time.time(), 0)))
            if time.time() >= until - 1:
                break
            kind, slot = rng.choice(options.faults), rng.choice(slots)
            fault = inject(rng, slot, kind, later)
            if fault is None:
                skipped[kind] += 1
            else:
                faults.append(fault)
        for _, action in sorted(later, key=lambda item: item[0]):
            action()
        later.clear()
        for slot in slots:
            assert slot.process is not None
            try:
                slot.process.wait(timeout=max(until - time.time(), 0) + 120)
            except subprocess.TimeoutExpired:
                slot.process.kill()
        sampling.set()
        sampler.join()
        for slot in slots:
            slot.finish()
        # A last session per mode: it removes the cgroups dead supervisors left (cgroup mode).
        with tempfile.TemporaryDirectory() as spare:
            for mode in modes:
                with peon.Session(spare, session_config(mode)) as last:
                    last.call("bash", {"command": "true"})  # its first worker start removes them
        end = time.time()
        audit = {str(inst.state): read_audit(inst.state) for slot in slots for inst in slot.instances}
        by_mode: dict[str, list[str]] = {}
        for mode in modes:
            indexes = {slot.index for slot in slots if slot.containment == mode}
            by_mode[mode] = violations([inst for slot in slots if slot.index in indexes for inst in slot.instances],
                                       [fault for fault in faults if fault.slot in indexes], audit, end,
                                       options.recovery)
        for slot in slots:
            for inst in slot.instances:
                for event in inst.events:
                    path = event.get("cgroup") if event["op"] == "ready" else None
                    if path and Path(path).exists():
                        by_mode[slot.containment].append(f"slot {slot.index}: cgroup {path} left behind")
        found = [line for lines in by_mode.values() for line in lines]
        report(slots, faults, skipped, by_mode, end - start, cgroup.probe().available)
        if found:
            keep = True
            for slot in slots:
                for number, inst in enumerate(slot.instances, 1):
                    with open(root / f"slot-{slot.index}-client-{number}.events", "w") as out:
                        out.writelines(json.dumps(event) + "\n" for event in inst.events)
            with open(root / "faults", "w") as out:
                out.writelines(json.dumps(fault.__dict__) + "\n" for fault in faults)
            print(f"chaos: the clients' events, the faults and the clients' and supervisors' stderr are in {root}")
        return 1 if found else 0
    finally:
        for _, action in later:
            action()
        for slot in slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.kill()
            for inst in slot.instances:
                wait_gone(inst, 0)
            if slot.mounted:
                subprocess.run(["umount", "-l", str(slot.root)], capture_output=True)
        for slot in slots:
            slot.stderr.close()
            if slot.mounted:
                shutil.rmtree(slot.root, ignore_errors=True)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def _replace_dead_clients(slots: list[Slot], until: float) -> None:
    """A client a command of its own killed (with its supervisor) is replaced, as after a client death."""
    for slot in slots:
        if slot.process is not None and slot.process.poll() is not None and time.time() < until - 5:
            slot.finish(killed=True, replace=True)


def _run_due(later: list[tuple[float, Any]]) -> None:
    now = time.time()
    for item in [item for item in later if item[0] <= now]:
        later.remove(item)
        item[1]()


def report(slots: list[Slot], faults: list[Fault], skipped: Counter[str], by_mode: dict[str, list[str]],
           seconds: float, cgroups: bool) -> None:
    from bench.lib.figures import record

    found = [line for lines in by_mode.values() for line in lines]
    calls = [e for slot in slots for inst in slot.instances for e in inst.events if e["op"] == "call"]
    by_kind = Counter(e["kind"] for e in calls)
    outcomes = Counter("ok" if e["ok"] else e["code"] for e in calls)
    modes = Counter(slot.containment + (", sandboxed" if slot.sandbox != "off" else "") for slot in slots)
    print(f"chaos: {len(slots)} sessions ({', '.join(f'{v} {k}' for k, v in sorted(modes.items()))}), "
          f"{seconds / 60:.1f} min, {len(calls)} calls, {len(faults)} injected faults"
          f"{'' if cgroups else ' (cgroup v2 unavailable: every session ran process-tree)'}")
    print("chaos: calls by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())))
    print("chaos: outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    print("chaos: faults: " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(f.kind for f in faults).items())))
    if skipped:
        print("chaos: faults skipped (not possible here or no target at that moment): "
              + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    print(f"chaos: clients: {sum(len(slot.instances) for slot in slots)} "
          f"({sum(inst.killed for slot in slots for inst in slot.instances)} killed)")
    firsts: dict[str, str] = {}
    for event in calls:
        if not event["ok"] and event["code"] not in firsts:
            firsts[event["code"]] = event.get("message") or ""
    for code, message in sorted(firsts.items()):
        print(f"chaos: first {code}: {message}")
    answered = [e for e in calls if e["took"] is not None and "timeout" in e]
    if answered:
        worst = max(answered, key=lambda e: e["took"] - e["timeout"])
        print(f"chaos: slowest answer past its own timeout: {worst['took'] - worst['timeout']:.1f} s "
              f"({worst['kind']}, {worst['code'] or 'ok'}; "
              f"its bound allowed {worst['bound'] - worst['timeout']:.0f} s)")
    for line in found[:50]:
        print(f"chaos: VIOLATION {line}")
    if len(found) > 50:
        print(f"chaos: ... and {len(found) - 50} more violations")
    for mode, lines in sorted(by_mode.items()):
        indexes = {slot.index for slot in slots if slot.containment == mode}
        mode_calls = sum(1 for slot in slots if slot.index in indexes for inst in slot.instances
                         for e in inst.events if e["op"] == "call")
        mode_faults = sum(1 for fault in faults if fault.slot in indexes)
        print(f"chaos: {mode}: {mode_calls} calls, {mode_faults} faults, {len(lines)} violations")
        record(f"chaos.violations.{mode}", len(lines), "violations", calls=mode_calls, faults=mode_faults,
               minutes=round(seconds / 60, 1), sessions=len(indexes))
    print(f"chaos: verdict: {'PASS' if not found else 'FAIL'} ({len(found)} violations)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--containment", choices=["both", "cgroup", "process-tree"], default="both")
    parser.add_argument("--sandbox", choices=["both", "off", "auto"], default="both",
                        help="sessions unsandboxed, sandboxed with the sandbox's edges attacked, or both "
                             "(slots alternate containment first: 4 sessions cover every pair)")
    parser.add_argument("--fault-every", type=float, default=4.0, help="mean seconds between injected faults")
    parser.add_argument("--recovery", type=float, default=60.0, help="seconds a session has to recover")
    parser.add_argument("--faults", type=lambda text: text.split(","), default=list(OUTSIDE_FAULTS),
                        help=f"the outside faults to inject, comma-separated (default: {','.join(OUTSIDE_FAULTS)})")
    parser.add_argument("--runner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workspace", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--until", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--tag", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.runner:
        run_session(options)
        return
    unknown = set(options.faults) - set(OUTSIDE_FAULTS)
    if unknown:
        parser.error(f"--faults: unknown kinds {sorted(unknown)}; known: {', '.join(OUTSIDE_FAULTS)}")
    sys.exit(orchestrate(options))


if __name__ == "__main__":
    main()
