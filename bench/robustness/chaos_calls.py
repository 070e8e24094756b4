"""The chaos runner's call mix: what each client calls, and how an ``ok`` answer is checked.

Promise: :func:`next_call` draws one call — a checked one (a read of a known file, a write then its
read, ``bash`` with known output, a timeout, a background job and its output, a terminal job running
``bash -i`` that a line is typed into with ``job_write``, its output and screen read, then stopped)
or an attack from inside
(a command that stops or kills its worker, stops the forkserver, kills the supervisor, stops its worker
and kills its supervisor and its client, stops the idle job host, a job that writes itself into a
sibling job's cgroup, a fork loop, a memory hog) — and :func:`check` says why an ``ok`` answer is wrong,
or None. A wrong answer is one the session must never give, whatever fault is injected meanwhile: a
fault may make a call fail, never make it succeed wrongly. This module owns the mix and the checks;
the invariants over the recorded events and the faults from outside are ``chaos.py``'s.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KNOWN_FILES = {f"known-{k}.txt": f"known file {k}\n" * (k + 1) for k in range(5)}
# The command's parent is its worker, the worker's the forkserver, the forkserver's the supervisor, the
# supervisor's the client (a process title may hold spaces: the parent pid is the second field after ")").
PPID = "ppid() { sed 's/.*) //' /proc/$1/stat | cut -d' ' -f2; }; "
# A job that writes itself into every sibling job's cgroup, again and again (cgroup containment: jobs'
# cgroups are siblings below the session's; nothing is tried outside a session's cgroup).
CROSS_CGROUP_JOB = ("c=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup); echo $$ > escaper-{n}.pid; "
                    "case ${{c%/*}} in */peon-*) ;; *) exec sleep 300;; esac; "
                    "for i in $(seq 100); do for d in ${{c%/*}}/*/; do d=${{d%/}}; "
                    "[ $d = $c ] || [ ${{d##*/}} = workers ] || echo $$ > $d/cgroup.procs 2>/dev/null; done; "
                    "sleep 0.05; done; sleep 300")
# Stop the session's job host (the forkserver's child titled "peon-worker jobs"), idle between jobs.
STOP_JOB_HOST = (PPID + "F=$(ppid $PPID); for p in $(cat /proc/$F/task/*/children); do "
                 "tr '\\0' ' ' < /proc/$p/cmdline | grep -q '^peon-worker jobs' && kill -STOP $p; done; true")
ESCAPE_SECONDS = 10.0  # how long after its job_stop a job's process may still be seen


@dataclass
class Call:
    kind: str
    tool: str
    args: dict[str, Any]
    timeout: float  # the call's own timeout (what its bound adds to the start bound)
    expect: str | None = None  # the exact output of a clean run (exit 0, no signal)
    checked: bool = True  # False: a fault call, only its bound is checked
    pid_file: str | None = None  # where the command writes its pid (in the workspace), or its payload's marker
    always: bool = False  # checked whatever the answer (an attack whose failure must still leave nothing)


def next_call(rng: random.Random, n: int) -> Call:
    roll = rng.random()
    if roll < 0.22:
        name = rng.choice(sorted(KNOWN_FILES))
        return Call("read", "read", {"path": name}, 30.0, KNOWN_FILES[name])
    if roll < 0.38:
        return Call("write", "write", {"path": f"w-{n}.txt", "content": f"written {n}\n", "mode": "create"}, 30.0,
                    f"written {n}\n")
    if roll < 0.64:
        return Call("bash", "bash", {"command": f"echo chaos-{n}", "timeout_seconds": 10}, 10.0, f"chaos-{n}\n")
    if roll < 0.72:
        return Call("timeout", "bash", {"command": "sleep 5", "timeout_seconds": 0.3}, 0.3)
    if roll < 0.82:
        return Call("job", "bash", {"command": f"printf job-{n}; sleep 0.2", "background": True,
                                    "timeout_seconds": 10}, 10.0, f"job-{n}")
    if roll < 0.85:  # checked: the job host is stopped after this job, and the next job must still run
        return Call("stopped_job_host", "bash", {"command": f"printf job-{n}", "background": True,
                                                 "timeout_seconds": 10}, 10.0, f"job-{n}")
    if roll < 0.88:  # checked: its process, wherever it wrote itself, ends with its job_stop
        return Call("cross_cgroup_job", "bash", {"command": CROSS_CGROUP_JOB.format(n=n), "background": True,
                                                 "timeout_seconds": 30}, 30.0, pid_file=f"escaper-{n}.pid")
    if roll < 0.91:  # checked: what is typed runs in the job's shell, and the job ends with its job_stop
        return Call("terminal_job", "bash", {"command": "exec bash --norc -i", "background": True, "tty": True,
                                             "timeout_seconds": 20}, 20.0, f"typed-{n}")
    attacks = {
        "stop_worker": "kill -STOP $PPID; sleep 5",
        "kill_worker": "kill -KILL $PPID; sleep 5",
        "stop_forkserver": PPID + "kill -STOP $(ppid $PPID); sleep 1",
        "kill_supervisor": PPID + "kill -KILL $(ppid $(ppid $PPID)); sleep 5",
        # The worker cannot act on its parent's death while stopped: the command must not outlive it.
        "stop_worker_kill_supervisor": PPID + "kill -STOP $PPID; kill -KILL $(ppid $(ppid $PPID)); sleep 300",
        # No client is left to kill what it was told of: the session's own processes must end it all.
        "stop_worker_kill_supervisor_and_client": (PPID + "W=$PPID; S=$(ppid $(ppid $W)); C=$(ppid $S); "
                                                   "kill -STOP $W; kill -KILL $S $C; sleep 300"),
        "stop_job_host": STOP_JOB_HOST,
        "fork_loop": f"exec {sys.executable} forkloop.py 150",
        "memory_hog": (f"exec {sys.executable} -c 'import time\nb=[]\nfor _ in range(40):\n"
                       f"    b.append(bytearray(16 << 20)); time.sleep(0.02)\ntime.sleep(5)'"),
    }
    kind = rng.choice(sorted(attacks))
    return Call(kind, "bash", {"command": attacks[kind], "timeout_seconds": 3}, 3.0, checked=False)


def check(session: Any, call: Call, result: Any, workspace: Path) -> str | None:
    """Why an ``ok`` answer is wrong, or None. A command killed by an injected fault is not wrong."""
    value = result.value or {}
    if call.kind == "read":
        return None if value.get("content") == call.expect else f"read {value.get('content')!r}"
    if call.kind == "write":
        back = session.call("read", {"path": call.args["path"]})
        if back.ok and back.value.get("content") != call.expect:
            return f"wrote {call.expect!r}, read back {back.value.get('content')!r}"
        return None
    if call.kind == "timeout":
        return None if value.get("timed_out") or value.get("signal") else f"not timed out: {value}"
    if call.kind == "job":
        return check_job(session, call, value)
    if call.kind == "stopped_job_host":
        return check_job(session, call, value) or check_stopped_host(session)
    if call.kind == "cross_cgroup_job":
        return check_escape(session, value, workspace / str(call.pid_file))
    if call.kind == "terminal_job":
        return check_terminal(session, call, value)
    if value.get("exit_code") == 0 and not value.get("timed_out"):
        return None if value.get("output") == call.expect else f"output {value.get('output')!r}"
    return None


def check_job(session: Any, call: Call, value: Mapping[str, Any]) -> str | None:
    job_id = value.get("job_id")
    for _ in range(3):
        out = session.call("job_output", {"job_id": job_id, "wait_seconds": 5})
        if not out.ok:
            return None  # the job went with a fault (its answer is checked by its own bound)
        if out.value["state"] != "running":
            if out.value["state"] == "exited" and out.value.get("exit_code") == 0:
                return None if out.value["output"] == call.expect else f"job output {out.value['output']!r}"
            return None
    return None


def check_terminal(session: Any, call: Call, value: Mapping[str, Any]) -> str | None:
    """A line typed into the job's shell runs there (the shell prints ``typed-<n>``, which the echo of
    what was typed does not show); the job ends with its ``job_stop``. A fault may take the job or the
    calls (they then fail), never make the shell print another call's line."""
    job_id = value.get("job_id")
    wrong = _typed_line(session, call, job_id)
    stop = session.call("job_stop", {"job_id": job_id})
    if stop.ok and stop.value["state"] == "running":
        return f"a terminal job still runs after its job_stop: {stop.value}"
    return wrong


def _typed_line(session: Any, call: Call, job_id: Any) -> str | None:
    suffix = str(call.expect).removeprefix("typed")
    typed = session.call("job_write", {"job_id": job_id, "text": f"printf 'typ%s\\n' ed{suffix}\n",
                                       "wait_seconds": 3})
    if not typed.ok:
        return None
    text, offset = typed.value["output"], typed.value["next_offset"]
    for _ in range(3):
        if f"{call.expect}\n" in text:
            break
        out = session.call("job_output", {"job_id": job_id, "offset": offset, "wait_seconds": 3})
        if not out.ok or out.value["state"] != "running":
            return None
        text, offset = text + out.value["output"], out.value["next_offset"]
    others = [line for line in text.split("\n") if line.startswith("typed-") and line != call.expect]
    if others:
        return f"a terminal job's shell printed {others[:3]!r}, typed was {call.expect!r}"
    screen = session.call("job_output", {"job_id": job_id, "screen": True})
    if screen.ok and len(screen.value["screen"]["lines"]) != 24:
        return f"a terminal job's screen has {len(screen.value['screen']['lines'])} rows, not 24"
    return None


def check_stopped_host(session: Any) -> str | None:
    """The job host is stopped while idle: the next job gets a new host, and never fails as if the
    stopped one had run it."""
    stop = session.call("bash", {"command": STOP_JOB_HOST, "timeout_seconds": 5})
    if not stop.ok:
        return None  # a fault took the call: nothing was stopped by it
    after = session.call("bash", {"command": "printf after-stop", "background": True, "timeout_seconds": 10})
    if not after.ok and after.error.code == "worker_hung" and "stopped while it ran" in after.error.message:
        return f"a job sent to a stopped idle job host failed as if it had run: {after.error.message[:200]}"
    return None


def check_escape(session: Any, value: Mapping[str, Any], pid_file: Path) -> str | None:
    """A sibling job runs while the job writes itself into its cgroup; after the job's ``job_stop`` no
    process of it is alive, wherever it went."""
    from peon.workers import proctree

    sibling = session.call("bash", {"command": "sleep 20", "background": True, "timeout_seconds": 30})
    try:
        time.sleep(1.0)  # time to write itself into the sibling's cgroup
        stop = session.call("job_stop", {"job_id": value.get("job_id")})
        if not stop.ok:
            return None  # a fault took the job (its answer is checked by its own bound)
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            return None  # it never ran its first line
        until = time.monotonic() + ESCAPE_SECONDS
        while proctree.state(pid) not in (None, "Z") and time.monotonic() < until:
            time.sleep(0.1)
        if proctree.state(pid) not in (None, "Z"):
            return f"a job's process {pid} outlived its job_stop by {ESCAPE_SECONDS:g} s ({proctree.cmdline(pid)!r})"
        return None
    finally:
        if sibling.ok:
            session.call("job_stop", {"job_id": sibling.value.get("job_id")})
