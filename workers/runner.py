"""The process runner shared by ``bash`` and the agent adapters.

Promise: when :func:`run_process` returns, no process it started is alive — not the group leader, not
a member of its process group, not a daemon that escaped with ``setsid``, a double fork, ``nohup`` or
``disown`` (the worker is a child subreaper, so every orphan is reparented to it and stays findable).
In order:

* the child starts in a new session and process group, stdin ``/dev/null``, stdout and stderr one pipe,
  and it inherits no other descriptor: every descriptor of the worker is close-on-exec, which
  :func:`audit_descriptors` checks (and enforces) right before each spawn;
* ``ProcessSpec.stdin_data`` is written to the command's stdin (a pipe), which is then closed;
  ``stdin="pipe"`` keeps that pipe open and writes what the task's input queue
  (:data:`peon.workers.job_input.INPUT`) receives; ``stdin="tty"`` starts the command on a pseudo-terminal
  of its own (``rows`` x ``cols``) as stdin, stdout and stderr — its own session, the terminal its
  controlling terminal (``setsid --ctty``: nothing is opened by path, so the OS sandbox's rules apply
  unchanged) — whose output is read like the pipe's and whose input is the queue's. Either way the input
  is written without blocking and dropped once the command no longer reads it;
* with ``ProcessSpec.sandbox`` set, the OS sandbox (:mod:`peon.workers.sandbox`) starts the child inside
  itself, or raises and nothing is started; everything below holds for what it started;
* on **cancellation** the group gets ``SIGTERM`` (and ``SIGCONT``, so stopped members see it), up to
  :data:`CANCEL_GRACE_SECONDS` to exit, then ``SIGKILL`` for every remaining member;
* at the **deadline** the group gets ``SIGKILL`` at once, and so does every other process group that
  was below the worker :data:`PRE_LIST_SECONDS` before it (listed then, while nothing was exiting);
* when the leader has exited, every remaining descendant of the worker is killed (a process-tree
  sweep, which also finds a descendant that moved itself out of the worker's cgroup);
* the output pipe is drained for at most :data:`DRAIN_GRACE_SECONDS` after that, then closed whoever
  still holds it;
* output is kept within ``max_output_bytes`` (head and tail, see :mod:`peon.core.output.truncation`) however much
  is written, and every byte is counted; the ``output`` text has escape sequences and carriage-return
  rewrites cleaned (:mod:`peon.core.output.terminal`) when ``jobs.clean_output`` is on; the session's
  secrets are redacted in what is kept, not in the bytes dropped (:mod:`peon.core.redaction`), also what
  a cut between head and tail may have left of one, and the result says what was (``redacted``);
* with ``ctx.output`` set, every byte read is also handed to it in order (the supervisor's output
  store); when it is backed up the pipe is not read until it drains, so the command blocks instead of
  memory growing; ``ctx.output.spawned()`` is called once the command has started;
* progress reports carry the newest output lines (``jobs.progress_lines``, cleaned, shortened and
  redacted: a line still being written is never shown with the start of a secret);
* when the call's processes exceed a resource limit (:mod:`peon.workers.limits`) the group gets ``SIGKILL``
  at once and the result names the limit.

A worker runs one call at a time and may serve another only after a call whose every command ended
by itself with nothing left below the worker (:func:`commands_ended_clean`), so "every descendant of
the worker" is exactly what this call started. The runner is meant to run one process at a time per
worker. What "the call's processes" are is a :class:`ProcessScope`, read from :data:`SCOPE`: for a
worker, everything below it (:class:`WorkerScope`); for a background job in the job host
(:mod:`peon.workers.job_host`), which runs several at once, the members of the job's own cgroup.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fcntl
import os
import signal
import struct
import sys
import termios
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from peon.core.errors import ErrorCode, ToolError
from peon.core.tool import ToolContext
from peon.core.output.terminal import clean_terminal_text, newest_lines
from peon.core.output.truncation import BoundedText, HeadTail
from peon.core.redaction.cuts import redact_cut
from peon.core.redaction.redactor import Redactor, summary
from peon.core.redaction.session import redactor_for

from peon.workers import proctree
from peon.workers.job_input import INPUT, JobInput, terminal_keeps_its_keys
from peon.workers.limits import CgroupProbe, ResourceLimits, TreeProbe, probe_for, watch as watch_limits
from peon.workers.reaper import REAPER, wait_children_gone

CANCEL_GRACE_SECONDS = 2.0
DRAIN_GRACE_SECONDS = 0.1
# This long before the deadline the runner lists the process groups below the worker, so that at the
# deadline it kills them all at once rather than listing the tree while the first group killed is
# exiting: the exiting processes take the CPU from the lister and every escaped group waits for the
# listing to reach it (docs/architecture.md, "Deadline to clean").
PRE_LIST_SECONDS = 0.05
PAUSED_DRAIN_SECONDS = 1.0
PROGRESS_INTERVAL_SECONDS = 0.5
READ_CHUNK = 1 << 20
FIRST_READ_CHUNK = 64 << 10
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
# Starts a terminal job's command in a new session with its terminal (stdin) as controlling terminal.
SETSID = "/usr/bin/setsid"
StdinMode = Literal["null", "pipe", "tty"]
CommandsEnded = Literal["none", "clean", "unclean"]
# How this call's commands ended (peon.workers.reuse): "none" started, every one "clean" (it exited
# by itself, within its deadline and limits, uncancelled, leaving no descendant), or one did not.
_ENDED: CommandsEnded = "none"


def begin_call() -> None:
    """A new call starts in this worker: no command of it has run yet."""
    global _ENDED
    _ENDED = "none"


def commands_ended_clean() -> bool:
    """Whether the call ran commands and every one ended clean (see :data:`_ENDED`)."""
    return _ENDED == "clean"


def _record_end(clean: bool) -> None:
    global _ENDED
    _ENDED = "unclean" if not clean or _ENDED == "unclean" else "clean"


@dataclass(frozen=True)
class ProcessSpec:
    argv: Sequence[str]  # argv[0] is an absolute path; nothing is looked up or passed to a shell
    cwd: str
    env: Mapping[str, str]
    # What to execute when it is not argv[0]: e.g. "/proc/self/fd/N" of a binary the caller opened and
    # checked, so the file executed is the inode that was checked (an agent's pinned executable).
    executable: str | None = None
    # The OS sandbox (workers/sandbox/confine.py): when set, it starts the command inside itself; it may raise
    # ToolError (nothing started). Everything below applies to what it started like to any command.
    sandbox: Any = None
    # A directory descriptor to start in instead of ``cwd`` (``fchdir``): resolved and checked by the tool.
    cwd_fd: int | None = None
    # What the command reads: /dev/null, a pipe fed from the task's input queue, or a terminal of its own.
    stdin: StdinMode = "null"
    stdin_data: bytes | None = None  # written to a stdin pipe, which is then closed
    rows: int = 24  # a terminal's size
    cols: int = 80


@dataclass(frozen=True)
class ProcessOutcome:
    exit_code: int | None
    signal: str | None
    timed_out: bool
    cancelled: bool
    output: BoundedText
    duration_ms: int
    limit_exceeded: str | None = None
    redacted: dict[str, Any] | None = None  # what was redacted in ``output`` (peon.core.redaction.redactor.summary)

    def to_value(self) -> dict:
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "output": self.output.text,
            "output_bytes": self.output.total_bytes,
            "output_kept_bytes": self.output.kept_bytes,
            "truncated": self.output.truncated,
            "output_invalid_utf8": self.output.invalid_utf8,
            "duration_ms": self.duration_ms,
            "limit_exceeded": self.limit_exceeded,
            **({"redacted": self.redacted} if self.redacted else {}),
        }


PROCESS_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "exit_code": {"type": ["integer", "null"], "description": "Exit status; null when killed by a signal."},
        "signal": {"type": ["string", "null"], "description": "Name of the signal that ended the process."},
        "timed_out": {"type": "boolean"},
        "cancelled": {"type": "boolean"},
        "output": {"type": "string", "description": "Combined stdout/stderr, head and tail when truncated."},
        "output_bytes": {"type": "integer", "description": "Every byte the process wrote."},
        "output_kept_bytes": {"type": "integer", "description": "Bytes of output present in `output`."},
        "truncated": {"type": "boolean"},
        "output_invalid_utf8": {
            "type": "boolean",
            "description": "Some output bytes were not UTF-8 and appear as U+FFFD.",
        },
        "duration_ms": {"type": "integer"},
        "limit_exceeded": {
            "type": ["string", "null"], "enum": ["memory", "processes", None],
            "description": "The per-call resource limit the call hit; its processes were killed.",
        },
        "timeout_seconds": {"type": "number", "description": "The timeout that applied to this call."},
        "yielded": {"type": "boolean", "description": "Still running after limits.yield_after_seconds: this is "
                                                      "its output so far, and it runs on as the job job_id."},
    },
    "required": ["exit_code", "signal", "timed_out", "cancelled", "output", "output_bytes", "truncated", "duration_ms"],
}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def audit_descriptors(report: bool = True) -> list[int]:
    """Make every descriptor of this process above 2 close-on-exec; return those that were not (each
    would have reached the command). Peon opens everything close-on-exec, so this finds none unless
    a tool (or a library it uses) left one inheritable."""
    leaked = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2:
            continue
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFD)
            if not flags & fcntl.FD_CLOEXEC:
                fcntl.fcntl(fd, fcntl.F_SETFD, flags | fcntl.FD_CLOEXEC)
                leaked.append(fd)
        except OSError:
            continue  # the directory listing's own descriptor, closed by now
    if leaked and report:
        print(f"peon-worker: descriptors {leaked} were inheritable; made close-on-exec before spawning",
              file=sys.stderr)
    return leaked


class WorkerScope:
    """The call's processes are everything below this worker (a child subreaper serving one call)."""

    def groups(self, until: float) -> set[int]:
        """The process groups of the call's processes, listed by ``until`` at the latest."""
        return proctree.groups_below(os.getpid(), until=until)

    def left_behind(self, leader: int) -> bool:
        """Whether a process of the call other than ``leader`` is alive (orphans are reparented here)."""
        return bool(set(proctree.children(os.getpid())) - {leader})

    def kill_all(self) -> None:
        """Kill every process of the call and wait (bounded) until none is alive, reaping what it can."""
        _kill_descendants()

    async def wait_gone(self) -> None:
        if proctree.children(os.getpid()):
            await _wait_descendants_gone()

    def probe(self, limits: ResourceLimits) -> TreeProbe | CgroupProbe:
        return probe_for(limits, os.getpid())

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """Around the start of a command: where it is born (a worker's commands: in its own cgroup)."""
        yield


class ProcessScope(Protocol):
    """What the runner needs to know of "the call's processes" (:class:`WorkerScope`'s methods)."""

    def groups(self, until: float) -> set[int]: ...
    def left_behind(self, leader: int) -> bool: ...
    def kill_all(self) -> None: ...
    async def wait_gone(self) -> None: ...
    def probe(self, limits: ResourceLimits) -> TreeProbe | CgroupProbe: ...
    def spawning(self) -> contextlib.AbstractContextManager[None]: ...


# The scope of the call or job the current task serves (a task copies it when it is created).
WORKER_SCOPE = WorkerScope()
SCOPE: contextvars.ContextVar[ProcessScope] = contextvars.ContextVar("peon_process_scope",
                                                                     default=WORKER_SCOPE)


def _spawn(spec: ProcessSpec, write_fd: int, stdin_fd: int | None = None) -> int:
    with SCOPE.get().spawning():
        return _spawn_here(spec, write_fd, stdin_fd)


def _spawn_here(spec: ProcessSpec, write_fd: int, stdin_fd: int | None) -> int:
    audit_descriptors()
    if spec.cwd_fd is not None:
        os.fchdir(spec.cwd_fd)
    elif os.getcwd() != spec.cwd:
        os.chdir(spec.cwd)  # a worker is dedicated to one call, so its cwd is the call's
    if spec.sandbox is not None:  # the OS sandbox starts the command (maybe wrapped) inside itself
        # Not audited again: a sandbox may deliberately pass one descriptor on (bwrap, a pinned binary).
        return spec.sandbox.spawn(
            lambda argv, executable: _posix_spawn(replace(spec, argv=argv, executable=executable), write_fd,
                                                  stdin_fd),
            spec.argv, spec.executable)
    return _posix_spawn(spec, write_fd, stdin_fd)


def _posix_spawn(spec: ProcessSpec, write_fd: int, stdin_fd: int | None = None) -> int:
    executable, argv = spec.executable or spec.argv[0], list(spec.argv)
    stdin_action = ((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0) if stdin_fd is None
                    else (os.POSIX_SPAWN_DUP2, stdin_fd, 0))
    if spec.stdin == "tty":
        if not os.access(SETSID, os.X_OK):
            raise ToolError(ErrorCode.IO_ERROR, f"a terminal job is started through {SETSID} (util-linux), which "
                                                "this machine lacks; nothing was started", {"executable": SETSID})
        # setsid(1) makes its own session (it is not a group leader: no fork) and takes the terminal on
        # stdin as the session's controlling terminal, then runs the command as the same process.
        executable, argv = SETSID, [SETSID, "--ctty", executable, *argv[1:]]
    return os.posix_spawn(
        executable,
        argv,
        dict(spec.env),
        file_actions=[
            stdin_action,
            (os.POSIX_SPAWN_DUP2, write_fd, 1),
            (os.POSIX_SPAWN_DUP2, write_fd, 2),
        ],
        setsid=spec.stdin != "tty",
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),  # Python ignores these; the child must not inherit that
        setsigmask=(),
    )


async def run_process(spec: ProcessSpec, ctx: ToolContext) -> ProcessOutcome:
    loop = asyncio.get_running_loop()
    read_fd, write_fd, input_fd, child_stdin = _open_streams(spec)
    started = time.monotonic()
    try:
        pid = _spawn(spec, write_fd, child_stdin)
    except OSError as exc:
        _close(read_fd, input_fd)
        raise ToolError(
            ErrorCode.IO_ERROR, f"cannot start {spec.argv[0]}: {exc.strerror}", {"executable": spec.argv[0]}
        ) from None
    except ToolError:  # the sandbox refused to start it
        _close(read_fd, input_fd)
        raise
    finally:
        _close(write_fd, child_stdin if child_stdin != write_fd else -1)
    feeding = _feed(spec, input_fd) if input_fd >= 0 else None
    exited = REAPER.watch(pid)
    pidfd = _watch_exit(pid)
    sink = ctx.output
    if sink is not None:
        sink.spawned()

    capture = HeadTail(ctx.limits.max_output_bytes)
    eof = loop.create_future()
    # A small buffer first (most commands print little, and a fresh worker pays a page fault per page
    # it touches); the full READ_CHUNK once a read fills it, for a flood.
    buffer = bytearray(FIRST_READ_CHUNK)
    reading = True  # False while the output sink is backed up, and once the pipe is closed

    def resume() -> None:
        nonlocal reading
        if not reading and not eof.done() and read_fd >= 0:
            reading = True
            loop.add_reader(read_fd, on_readable)

    def on_readable() -> None:
        nonlocal buffer, reading
        try:
            n = os.readv(read_fd, [buffer])
        except BlockingIOError:
            return
        except OSError:
            n = 0
        if n == 0:
            loop.remove_reader(read_fd)
            if not eof.done():
                eof.set_result(None)
            return
        capture.feed(memoryview(buffer)[:n])
        if sink is not None and not sink.push(memoryview(buffer)[:n]):  # copied or written before it returns
            reading = False
            loop.remove_reader(read_fd)
            sink.when_drained(resume)
        if n == len(buffer) < READ_CHUNK:
            buffer = bytearray(READ_CHUNK)

    loop.add_reader(read_fd, on_readable)
    redactor = redactor_for(ctx.session)
    progress = (asyncio.create_task(_report_progress(ctx, capture, started, redactor)) if ctx.wants_progress
                else None)
    cancel_wait = asyncio.create_task(ctx.cancel.wait())
    limits = ctx.session.config.limits
    scope = SCOPE.get()
    probe = scope.probe(ResourceLimits(limits.memory_max_bytes, limits.max_processes))
    # The watchdog stops sampling when the tree is listed ahead of the deadline: see peon.workers.limits.
    limit_hit = asyncio.create_task(watch_limits(probe, until=ctx.deadline.at - PRE_LIST_SECONDS))
    timed_out = cancelled = False
    exceeded: str | None = None
    try:
        first: set[asyncio.Future[Any]] = {exited, cancel_wait, limit_hit}
        listed_groups: set[int] = set()
        ahead = ctx.deadline.remaining() - PRE_LIST_SECONDS
        if ahead > 0:
            done, _ = await asyncio.wait(first, timeout=ahead, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                listed_groups = scope.groups(until=ctx.deadline.at)
        await asyncio.wait(first, timeout=ctx.deadline.remaining(),
                           return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():
            if limit_hit.done():
                exceeded = limit_hit.result()
            elif cancel_wait.done():
                cancelled = True
                proctree.signal_group(pid, signal.SIGTERM)
                proctree.signal_group(pid, signal.SIGCONT)
                grace_end = min(time.monotonic() + CANCEL_GRACE_SECONDS, ctx.deadline.at)
                while _group_alive(pid) and time.monotonic() < grace_end:
                    await asyncio.sleep(0.01)
                    REAPER.reap()
                timed_out = ctx.deadline.expired and _group_alive(pid)
            else:
                timed_out = True
            proctree.signal_group(pid, signal.SIGKILL)
            if timed_out and not cancelled:
                # Then every group listed just before, without listing again. Not someone else's group
                # by now: a pid number returns only after pid_max others were allocated.
                for group in listed_groups:
                    proctree.signal_group(group, signal.SIGKILL)
        # The leader is gone or dying: nothing else this call started may outlive it.
        if exceeded is None and limit_hit.done():
            exceeded = limit_hit.result()
        elif exceeded is None and not (timed_out or cancelled):
            exceeded = probe.kernel_verdict()  # e.g. a fork refused at pids.max made the command give up
        # Orphans were reparented to the worker before the leader's exit was reported.
        left_behind = not exited.done() or scope.left_behind(pid)
        _record_end(not (left_behind or timed_out or cancelled or exceeded))
        scope.kill_all()  # returns when none of the call's processes is alive, having reaped what it could
        status = exited.result() if exited.done() else await asyncio.wait_for(exited, timeout=10.0)
        await scope.wait_gone()
        if not eof.done():
            try:  # a backed-up output sink resumes reading once the supervisor has taken its queue
                await asyncio.wait_for(asyncio.shield(eof), DRAIN_GRACE_SECONDS if reading else PAUSED_DRAIN_SECONDS)
            except TimeoutError:
                pass
    finally:
        if feeding is not None:  # before the terminal is closed: it writes there
            feeding.cancel()
            await asyncio.wait([feeding])
        if pidfd >= 0:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        loop.remove_reader(read_fd)
        os.close(read_fd)
        read_fd = -1
        cancel_wait.cancel()
        limit_hit.cancel()
        if progress is not None:
            progress.cancel()
        if not exited.done():  # unwinding after an unexpected error: still leave nothing behind
            _record_end(False)
            scope.kill_all()
    duration_ms = int((time.monotonic() - started) * 1000)
    if os.WIFSIGNALED(status):
        exit_code, sig = None, proctree.signal_name(os.WTERMSIG(status))
    else:
        exit_code, sig = os.WEXITSTATUS(status), None
    clean = clean_terminal_text if ctx.session.config.jobs.clean_output else None
    counts: Counter[str] = Counter()
    redact = (None if redactor is None else
              lambda data, before, after: redact_cut(redactor, data, counts, cut_before=before, cut_after=after))
    output = capture.render(clean, redact)
    return ProcessOutcome(exit_code, sig, timed_out, cancelled, output, duration_ms, exceeded,
                          summary(counts) if counts else None)


def _open_streams(spec: ProcessSpec) -> tuple[int, int, int, int | None]:
    """The descriptors of a command: the end its output is read from and the end it writes to, the end
    its input is written to (-1: none) and its stdin (None: ``/dev/null``). Every one close-on-exec;
    the ends the runner keeps are non-blocking."""
    if spec.stdin == "tty":
        master, slave = os.openpty()  # neither inheritable (PEP 446); the child gets the slave by dup2
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", spec.rows, spec.cols, 0, 0))
        os.set_blocking(master, False)
        return master, slave, master, slave
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(read_fd, False)  # only our end: the child's stdout must stay blocking
    try:
        fcntl.fcntl(read_fd, _F_SETPIPE_SZ, READ_CHUNK)
    except OSError:
        pass  # a smaller pipe only means more reads
    if spec.stdin == "null" and spec.stdin_data is None:
        return read_fd, write_fd, -1, None
    child_stdin, input_fd = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(input_fd, False)
    return read_fd, write_fd, input_fd, child_stdin


def _feed(spec: ProcessSpec, input_fd: int) -> asyncio.Task[None]:
    """The task writing the command's input: its data, or the task's input queue (see the promise). It
    owns a pipe's end, closed when the input ends (the command reads end of file) or the task does."""
    if spec.stdin_data is not None:
        queue = JobInput(len(spec.stdin_data), spec.stdin_data, eof=True)
    else:
        queue = INPUT.get() or JobInput(eof=True)  # no queue: an input that has ended
    tty = spec.stdin == "tty"
    return asyncio.get_running_loop().create_task(
        queue.pump(input_fd, close_at_eof=not tty, fit=terminal_keeps_its_keys if tty else None))


def _close(*fds: int | None) -> None:
    for fd in fds:
        if fd is not None and fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


def _watch_exit(pid: int) -> int:
    """A pidfd for ``pid``, readable once it has exited: then the reaper collects its status (no
    ``SIGCHLD`` handler needed, so a worker that runs no process installs none)."""
    loop = asyncio.get_running_loop()
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:  # already gone: collect it now
        loop.call_soon(REAPER.reap)
        return -1

    def on_exit() -> None:
        loop.remove_reader(pidfd)
        REAPER.reap()

    loop.add_reader(pidfd, on_exit)
    return pidfd


def _kill_descendants() -> None:
    """Kill everything below this worker and wait (bounded) until none of it is alive."""
    proctree.kill_tree(os.getpid(), reap=REAPER.reap)


async def _wait_descendants_gone(timeout: float = 10.0) -> None:
    if not await wait_children_gone(REAPER, timeout=timeout):
        # Something survived SIGKILL (e.g. stuck in the kernel); kill again and report upward.
        _kill_descendants()
        raise ToolError(ErrorCode.TOOL_FAILED, f"some processes of this call could not be killed within {timeout:g} s")


async def _report_progress(ctx: ToolContext, capture: HeadTail, started: float, redactor: Redactor | None) -> None:
    count, width = ctx.session.config.jobs.progress_lines, ctx.session.config.jobs.progress_line_bytes
    while True:
        await asyncio.sleep(PROGRESS_INTERVAL_SECONDS)
        newest = capture.newest(count * width * 2)
        if redactor is not None:  # cut from what came before, and still being written
            newest = redact_cut(redactor, newest, Counter(), cut_before=capture.total > len(newest), cut_after=True)
        lines = newest_lines(newest, count, width)
        ctx.report_progress(elapsed_ms=int((time.monotonic() - started) * 1000), output_bytes=capture.total,
                            lines=lines)
