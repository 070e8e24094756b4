"""What a worker process was when it started, compared before it offers to serve another call.

Promise: :func:`changes` names every difference between the worker's process attributes now and as
:func:`record` found them at its start — every resource limit (``getrlimit`` of each ``RLIMIT_*``), the
nice value, scheduling policy, real-time priority and CPU affinity of each of its threads, its I/O
priority, ``oom_score_adj``, timer slack, umask, blocked, ignored and caught signals and the Python
handler of each signal, capabilities, ``no_new_privs``, seccomp mode, dumpability and cgroup — and a
worker with any difference is not reused (:func:`peon.workers.call.serve_call`): the next call gets a
fresh worker with the limits and priority the session started it with. Reading fails closed: a value
that cannot be read now but could at the start is a difference.

Why: a process of the same user (a command of another call with the sandbox off, or of this one) can
lower a worker's limits (``prlimit --pid``), renice it, re-pin it or move it to another cgroup, and a
tool's own code could change its umask or a signal handler; every later command of a reused worker
would inherit that. (Inside the sandbox, the seccomp filter refuses those changes to any process but
the command's own: :mod:`peon.workers.sandbox.syscall_filter`.)

Runs in a worker: :func:`record` as it prepares (or lazily before its first call), :func:`changes`
before each offer. About a hundred microseconds: a few reads of ``/proc/self`` (one per thread) and some
system calls.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import signal
from collections.abc import Mapping
from typing import Any

# getsignal without the enum wrapping of the signal module: a tenth of the cost
import _signal  # type: ignore[import-not-found]

LIMITS = tuple(sorted((name, getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")))
SIGNALS = tuple(sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}))
_SYS_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(platform.machine())
_IOPRIO_WHO_PROCESS = 1
_PR_GET_DUMPABLE, _PR_GET_SECCOMP, _PR_GET_TIMERSLACK, _PR_GET_NO_NEW_PRIVS = 3, 21, 30, 39
_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

State = dict[str, Any]
_start: State | None = None
_UNREADABLE = "unreadable"


def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # a file object would cost as much again as the read
    try:
        return os.read(fd, 1 << 16).decode("ascii", "replace")
    finally:
        os.close(fd)


def _threads() -> dict[str, tuple[str, ...]]:
    """Each thread's nice value, real-time priority, scheduling policy, blocked, ignored and caught signals
    (``/proc/self/task/<tid>/stat``) and CPU affinity. A thread ends or starts between two readings: only the
    threads present in both are compared (a new thread inherits its creator's settings, which are compared)."""
    out: dict[str, tuple[str, ...]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = _read(f"/proc/self/task/{tid}/stat").rpartition(")")[2].split()
            cpus = tuple(sorted(os.sched_getaffinity(int(tid))))
        except OSError:
            continue  # ended meanwhile
        # After the command name, field N of proc(5) (1-based) is fields[N - 3]: nice 19, blocked 32,
        # sigignore 33, sigcatch 34, rt_priority 40, policy 41.
        out[tid] = (*(fields[n - 3] for n in (19, 32, 33, 34, 40, 41)), str(cpus))
    return out


def _umask() -> int:
    mask = os.umask(0o022)  # read by setting it back at once: only the worker's own thread runs here
    os.umask(mask)
    return mask


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _capabilities() -> tuple[int, ...]:
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) < 0:
        raise OSError(ctypes.get_errno(), "capget")
    return tuple(value for half in data for value in (half.effective, half.permitted, half.inheritable))


def _ioprio() -> int | None:
    if _SYS_IOPRIO_GET is None:
        return None
    return int(_libc.syscall(ctypes.c_long(_SYS_IOPRIO_GET), ctypes.c_int(_IOPRIO_WHO_PROCESS), ctypes.c_int(0)))


def current() -> State:
    """The worker's process attributes now (see the module's promise); an attribute that cannot be read is
    recorded as unreadable."""
    state: State = {}

    def take(name: str, read: Any) -> None:
        try:
            state[name] = read()
        except (OSError, ValueError):
            state[name] = _UNREADABLE

    for name, number in LIMITS:
        take(name, lambda number=number: resource.getrlimit(number))
    take("nice", lambda: os.getpriority(os.PRIO_PROCESS, 0))
    take("policy", lambda: os.sched_getscheduler(0))
    take("rt_priority", lambda: os.sched_getparam(0).sched_priority)
    take("threads", _threads)
    take("ioprio", _ioprio)
    take("oom_score_adj", lambda: _read("/proc/self/oom_score_adj").strip())
    for name, option in (("timer_slack", _PR_GET_TIMERSLACK), ("dumpable", _PR_GET_DUMPABLE),
                         ("seccomp", _PR_GET_SECCOMP), ("no_new_privs", _PR_GET_NO_NEW_PRIVS)):
        take(name, lambda option=option: _libc.prctl(option, 0, 0, 0, 0))
    take("cgroup", lambda: _read("/proc/self/cgroup"))
    take("umask", _umask)
    take("capabilities", _capabilities)
    take("handlers", lambda: tuple(map(_signal.getsignal, SIGNALS)))
    return state


def record() -> None:
    """Remember the worker's attributes as they are now: its start."""
    global _start
    _start = current()


def record_once() -> None:
    """:func:`record`, unless the worker already did (it records as it prepares; a call served in a process
    that never prepared as a worker records at its first call)."""
    if _start is None:
        record()


def changes(now: Mapping[str, Any] | None = None) -> list[str]:
    """Every attribute that differs from the worker's start, as ``name: start -> now`` (empty: none, and the
    worker may be reused). Nothing recorded: the worker cannot know, so that is a difference."""
    if _start is None:
        return ["nothing was recorded at the worker's start"]
    now = current() if now is None else now
    out: list[str] = []
    for name, before in _start.items():
        after = now.get(name, _UNREADABLE)
        if name == "threads" and isinstance(before, dict) and isinstance(after, dict):
            before = {tid: value for tid, value in before.items() if tid in after}
            after = {tid: value for tid, value in after.items() if tid in before}
        elif name == "handlers" and isinstance(before, tuple) and isinstance(after, tuple):
            if len(before) == len(after) and all(a is b for a, b in zip(before, after, strict=True)):
                continue
            out.append(f"{name}: a signal handler changed")
            continue
        if after != before:
            out.append(f"{name}: {before!r} -> {after!r}")
    return out
