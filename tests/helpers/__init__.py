"""What the tests share that is not a fixture: session options, process checks, waiting on events, and
the guard that proves no process outlives its test.

Every session a test opens runs with a unique ``PEON_TEST_TAG`` in its environment, which every
process it starts inherits; :class:`Leftovers` finds them by that tag (``/proc/*/environ``). Waiting is
always on something observable (:func:`wait_for` polls a predicate with a generous deadline), never a
fixed sleep.

What several test modules of one subject share lives in a module of its own here: ``agents`` (the fake coding
agents), ``cli`` (the ``peon`` command as a subprocess), ``files``, ``fuzz`` (strategies), ``mcp`` (``peon mcp``
as a subprocess), ``processes``, ``rule_spellings``, ``sandbox``, ``serve``, ``skills`` and ``tree`` (Peon's
modules as the source tree holds them). A test module never imports another test module.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from peon.workers import cgroup

CGROUP_SUPPORT = cgroup.probe()
# Tests of the runtime run with every risk allowed; approval tests pass their own [approval] table.
ALLOW_ALL = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow", "delegate": "allow"}}
CONTAINMENTS = ["process-tree", "cgroup"]


def tagged_pids(tag: str) -> list[int]:
    """Every process (but this one) whose environment carries ``PEON_TEST_TAG=<tag>``."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get("PEON_TEST_TAG") == tag:
                found.append(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def is_zombie(pid: int) -> bool:
    """Gone, or dead and not yet reaped."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


def living(pids) -> list[int]:
    return [p for p in pids if not is_zombie(p)]


def pids_in(path: Path) -> list[int]:
    """The pids a command wrote to ``path`` (none while it does not exist or is half written)."""
    try:
        return [int(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []


def running_command(pids, argv: list[str]) -> int | None:
    """The first of ``pids`` alive and running exactly ``argv`` (as ``/proc/PID/cmdline`` says)."""
    for pid in living(pids):
        try:
            if psutil.Process(pid).cmdline() == argv:
                return pid
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return None


def written(path: Path) -> bool:
    """True once a command has written a whole line to ``path`` (not merely created it): a pid file
    read between its creation and its write would be empty."""
    try:
        return path.read_text().endswith("\n")
    except FileNotFoundError:
        return False


def stderr_until(capfd, text: str, timeout: float = 10.0) -> str:
    """What was written to this process's stderr (fd 2) until ``text`` appears in it, or ``timeout`` passes: the
    supervisor's diagnostics arrive through its own drain thread, so a test waits for its line, never samples."""
    seen: list[str] = []
    wait_for(lambda: seen.append(capfd.readouterr().err) or text in "".join(seen), timeout)
    return "".join(seen)


def job_output_until(session, job_id: str, needle: str, timeout: float = 20.0) -> str:
    """Everything a job wrote until ``needle`` appears, or it ended (job_output with wait_seconds, no sleeps)."""
    text, offset, left = "", 0, timeout
    while needle not in text and left > 0:
        r = session.call("job_output", {"job_id": job_id, "offset": offset, "wait_seconds": 2})
        assert r.ok, r.error
        text += r.value["output"]
        offset = r.value["next_offset"]
        if r.value["state"] != "running":
            break
        left -= 2
    return text


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02):
    """``predicate()``'s first true value, polled until ``timeout`` (a hang guard, not a speed claim);
    its last value when time runs out, so the caller's assert shows what was seen."""
    until = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= until:
            return value
        time.sleep(interval)


class Leftovers:
    def __init__(self, home: Path) -> None:
        self.tag = uuid.uuid4().hex
        self.home = home

    def env(self, extra: dict | None = None) -> dict:
        """This process's environment, tagged, with a clean HOME: `bash -l` must not run the
        developer's login profile (slow, and a profile killed mid-way can leave locks behind)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PEON_TEST_TAG", "XDG_"))}
        env["HOME"] = str(self.home)
        env["PEON_TEST_TAG"] = self.tag
        env.update(extra or {})
        return env

    def alive(self) -> list[int]:
        return living(tagged_pids(self.tag))

    def kill_all(self) -> list[int]:
        survivors = self.alive()
        for _ in range(5):
            for pid in self.alive():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not self.alive():
                break
            time.sleep(0.05)
        return survivors


def expect_ok(session, tool: str, args) -> dict:
    result = session.call(tool, args)
    assert result.ok, result.error
    return result.value


def expect_error(session, tool: str, args, code: str):
    result = session.call(tool, args)
    assert not result.ok, result.value
    assert result.error.code == code, result.error
    return result.error


class Recorder:
    """An approver that records requests and answers from a script, then ``otherwise``; a scripted
    answer may be a function of the request."""

    def __init__(self, *answers: Any, otherwise: Any = "allow_once") -> None:
        self.answers = list(answers)
        self.otherwise = otherwise
        self.requests: list[dict] = []

    def __call__(self, request: dict) -> Any:
        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else self.otherwise
        return answer(request) if callable(answer) else answer


def jsonl_entries(path) -> list[dict]:
    """The entries of a JSON-lines file (an audit log), which must end with a whole line."""
    with open(path, "rb") as f:
        data = f.read()
    assert data == b"" or data.endswith(b"\n"), data[-80:]
    return [json.loads(line) for line in data.splitlines()]
