"""The supervisor's side of its forkserver, reached over a channel it inherited.

Promise: :meth:`Forker.start_worker` returns a started worker — a ``multiprocessing.Process`` forked
by the session's forkserver, a pidfd for it, and the supervisor's end of its ``multiprocessing.Pipe``
— or raises :class:`ForkerGone` within its deadline. A forkserver seen stopped (``SIGSTOP`` by a
command: it is an ordinary process of the same user) while a start waits on it is killed with
everything below it within :data:`STOPPED_CHECK_SECONDS` and the start goes on with a new one; one
that does not answer in time is killed the same way. A forkserver is killed at most once. The event
loop never waits on the forkserver: every request to it runs on one dedicated thread.

The channel (see :mod:`peon.workers.forkserver` for the other end): the standard library's forkserver
listens on a unix socket with a path (``listener-*`` in a temporary directory) that any process of the
user — a command too, sandboxed or not — could connect to, making it fork and unpickle its code, or
replace, receiving the next worker's descriptors and answering its calls. Peon's forkserver has no
such socket: :class:`ChannelForkServer` (a ``multiprocessing.forkserver.ForkServer``) starts it with one
end of a ``socketpair`` passed as an inherited descriptor (``util.spawnv_passfds``), sends each request's
descriptors over it (``SCM_RIGHTS``), and accepts an answer only with the kernel's credentials of the
forkserver it started (``SCM_CREDENTIALS``; ``SO_PEERCRED`` of a socket pair names its creator on both
ends, so it is the forkserver's check that its channel came from its supervisor, and this side's
check is the credentials on each answer). Nothing of the session has a name in the file system or
the abstract namespace, and there is no runtime directory.

What stays the standard library's (details and figures in docs/architecture.md):

* the ``Process`` / ``Popen`` / sentinel protocol: each worker is a ``multiprocessing.Process`` whose
  ``Popen`` (:class:`ChannelPopen`, ``popen_forkserver.Popen`` with only its request changed) writes the
  pickled process to a pipe and reads its pid, later its exit status, from ``Process.sentinel``; the
  forked child runs ``multiprocessing.forkserver._serve_one``; ``Pipe`` ends and the pinned workspace
  root travel with ``SCM_RIGHTS`` (``reduction.DupFd``);
* the forkserver is a fresh interpreter (``python -P -c ...``, the supervisor's own ``-P``, so nothing
  is imported from the workspace) that imports :mod:`peon.workers.forkserver`, which arms a parent-death
  signal, makes it non-dumpable and loads the tool modules.

Peon also watches each worker and the forkserver through pidfds, because a stopped forkserver reports
nothing. The standard library would start a resource-tracker process; Peon's workers share no named
semaphores or shared memory, so it is pointed at ``/dev/null`` instead of being started. Each
``Process`` is removed from ``multiprocessing``'s list of children right after it started: from then on
the pool alone reads its sentinel, from the event loop (``Process.start`` polls that list, from the
forker thread).
"""

from __future__ import annotations

import array
import asyncio
import copyreg
import io
import json
import multiprocessing
import os
import select
import signal
import socket
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import context as mp_context
from multiprocessing import forkserver as mp_forkserver
from multiprocessing import popen_forkserver
from multiprocessing import process as mp_process
from multiprocessing import reduction, resource_tracker, spawn, util
from typing import Any, TypeVar
from collections.abc import Callable, Sequence

from peon.core.framing import encode_json
from peon.workers import forkserver as worker_forkserver
from peon.workers import proctree
from peon.workers.channel import socket_of
from peon.workers.reaper import REAPER
from peon.workers.worker import InheritedFd, WorkerStart, serve

from peon.supervisor.containment import Containment, WorkerSlot

START_TIMEOUT_SECONDS = 10.0  # starting one worker, unless limits.worker_start_seconds says otherwise
# The forkserver gets the session in its environment (read once, shared by every worker it forks)
# when it fits well below the kernel's bound on one environment string (MAX_ARG_STRLEN, 128 KiB);
# a larger session travels with each worker instead.
SESSION_IN_ENV_MAX_BYTES = 96 * 1024
LAUNCH_TIMEOUT_SECONDS = 60.0  # starting the forkserver itself: a fresh interpreter importing the tools
# While a start waits on the forkserver, how often its state is looked at: a stopped one is replaced
# within this (one pread of its stat file per look).
STOPPED_CHECK_SECONDS = 0.05
STOPPED_STATES = ("T", "t")
# Signals that stop a process with their default action: one pending counts as stopped (the stop takes
# effect only once the process is next scheduled, which a loaded machine may delay).
STOPPING_SIGNALS = (signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
T = TypeVar("T")


class ForkerGone(Exception):
    pass


@dataclass
class StartedWorker:
    process: multiprocessing.process.BaseProcess
    pid: int
    pidfd: int
    channel: socket.socket
    slot: WorkerSlot
    forkserver: int | None = None  # the forkserver that forked it


class ChannelForkServer(mp_forkserver.ForkServer):
    """The session's forkserver as ``multiprocessing`` sees it, reached over an inherited socket pair
    instead of a named socket. One per supervisor process (:data:`SERVER`), used from the forker thread.

    ``is_gone`` says whether a forkserver pid has exited (the supervisor's reaper collects every child,
    so ``waitpid`` cannot tell)."""

    def __init__(self) -> None:
        super().__init__()
        self._channel: socket.socket | None = None
        self._pid: int | None = None
        self._alive_w: int | None = None  # held here and by each worker: the forkserver exits once all closed it
        self._launching = threading.Lock()
        self._requests = threading.Lock()  # one request (and its answer) at a time
        self.is_gone: Callable[[int], bool] = lambda pid: proctree.state(pid) in (None, "Z", "X")

    @property
    def pid(self) -> int | None:
        return self._pid

    def forget(self) -> None:
        """Drop the current forkserver (gone, or being killed): the next start launches a new one."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
        alive_w, self._alive_w, self._pid = self._alive_w, None, None
        if alive_w is not None:
            os.close(alive_w)

    def ensure_running(self) -> None:
        """Launch the forkserver unless it runs: ``python -P -c 'from peon.workers.forkserver import main;
        main(CHANNEL, ALIVE)'`` with its end of a new socket pair and the alive pipe's read end inherited."""
        with self._launching:
            if self.pid is not None and not self.is_gone(self.pid):
                return
            self.forget()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            alive_r, alive_w = os.pipe()
            try:
                ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # the kernel names each answer's sender
                exe = spawn.get_executable()
                cmd = f"from peon.workers.forkserver import main; main({theirs.fileno()}, {alive_r})"
                args = [exe, *util._args_from_interpreter_flags(), "-c", cmd]  # type: ignore[attr-defined]
                pid = util.spawnv_passfds(exe, args, [theirs.fileno(), alive_r])  # type: ignore[arg-type]
            except BaseException:
                ours.close()
                os.close(alive_w)
                raise
            finally:
                theirs.close()
                os.close(alive_r)
            self._channel = ours
            self._alive_w = alive_w
            self._pid = pid

    def connect_to_new_process(self, fds: Sequence[int]) -> tuple[int, int]:
        """What ``popen_forkserver.Popen`` asks for (its status pipe's read end, the data pipe's write
        end); :meth:`fork` does it and also says which pid the forkserver reported."""
        status_r, data_w, _ = self.fork(fds)
        return status_r, data_w

    def fork(self, fds: Sequence[int]) -> tuple[int, int, int]:
        """Ask the forkserver to fork a child that gets ``fds``: (the status pipe's read end, the data
        pipe's write end, the child's pid as the forkserver answered it). ``OSError``/``EOFError`` when
        the forkserver is gone or answers anything but a pid with its own credentials."""
        self.ensure_running()
        channel, forkserver, alive_w = self._channel, self._pid, self._alive_w
        if channel is None or forkserver is None or alive_w is None:
            raise EOFError("the forkserver is gone")
        if len(fds) + 4 > worker_forkserver.MAX_FDS:
            raise ValueError("too many descriptors for one worker")
        parent_r, child_w = os.pipe()
        child_r, parent_w = os.pipe()
        try:
            tracker = resource_tracker.getfd()  # /dev/null: see Forker._ensure_running_locked
            assert tracker is not None
            allfds = [child_r, child_w, alive_w, tracker, *fds]
            with self._requests:
                channel.sendmsg([worker_forkserver.REQUEST],
                               [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", allfds))])
                pid = self._answer(channel, forkserver)
        except BaseException:
            os.close(parent_r)
            os.close(parent_w)
            raise
        finally:
            os.close(child_r)
            os.close(child_w)
        return parent_r, parent_w, pid

    @staticmethod
    def _answer(channel: socket.socket, forkserver: int) -> int:
        size = worker_forkserver.PID.size
        data, ancillary, flags, _ = channel.recvmsg(size, socket.CMSG_SPACE(worker_forkserver.CREDENTIALS.size))
        if not data:
            raise EOFError("the forkserver closed its channel")
        sender = next((worker_forkserver.CREDENTIALS.unpack_from(payload) for level, kind, payload in ancillary
                       if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS), None)
        if sender is None or sender[0] != forkserver or sender[1] != os.getuid():
            raise OSError(f"an answer on the forkserver's channel came from {sender and sender[0]}, "
                          f"not from the forkserver (pid {forkserver})")
        if len(data) != size or flags & socket.MSG_TRUNC:
            raise OSError(f"the forkserver answered {len(data)} bytes, not a pid")
        (pid,) = worker_forkserver.PID.unpack(data)
        if pid == worker_forkserver.FORK_FAILED:
            raise OSError("the forkserver could not fork (the process or memory limit?); see its stderr")
        if pid <= 0:
            raise OSError("the forkserver refused the request")
        return int(pid)


SERVER = ChannelForkServer()


class ChannelPopen(popen_forkserver.Popen):
    """``popen_forkserver.Popen`` whose request goes to :data:`SERVER`; the pid the forkserver writes to
    the status pipe must be the one it answered on the channel."""

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        buf = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            mp_context.set_spawning_popen(None)
        self.sentinel, w, answered = SERVER.fork(self._fds)  # type: ignore[attr-defined]
        _parent_w = os.dup(w)  # the standard library's: the child sees its parent's end through it
        self.finalizer = util.Finalize(self, util.close_fds,  # type: ignore[attr-defined]
                                       (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = mp_forkserver.read_signed(self.sentinel)
        if self.pid != answered:
            raise OSError(f"the forkserver reported pid {self.pid} on the status pipe and {answered} on its channel")


class WorkerProcess(mp_context.ForkServerProcess):
    """A worker's ``multiprocessing.Process``, started through :class:`ChannelPopen`. It travels to the
    worker as the standard library's ``ForkServerProcess``: a worker never imports the supervisor."""

    @staticmethod
    def _Popen(process_obj: Any) -> ChannelPopen:
        return ChannelPopen(process_obj)

    def __reduce__(self) -> tuple[Any, ...]:
        return copyreg._reconstructor, (mp_context.ForkServerProcess, object, None), self.__dict__  # type: ignore[attr-defined]


# One forkserver per supervisor process, one thread that talks to it.
_executor: ThreadPoolExecutor | None = None


def _thread() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="peon-forker")
    return _executor


def _forkserver_alive(pid: int | None) -> bool:
    return pid is not None and proctree.state(pid) not in (None, "Z", "X")


class Forker:
    """The session's forkserver: started on demand, replaced when it died, stopped or stopped answering."""

    def __init__(self, session: dict[str, Any], tool_paths: list[str]):
        session = dict(session)
        self.root_fd: int = int(session.pop("root_fd", -1))
        self.start_seconds = float(session.pop("start_seconds", START_TIMEOUT_SECONDS))
        self.forkserver_cgroup: str | None = session.pop("forkserver_cgroup", None)
        session.pop("runtime_dir", None)  # no forkserver socket, so no directory for it
        self.workspace = str(session["workspace"])
        self.session_json = encode_json(session)
        self.session_in_env = len(self.session_json) <= SESSION_IN_ENV_MAX_BYTES
        self.tool_paths = tuple(tool_paths)
        self.context = multiprocessing.get_context("forkserver")
        self.pid: int | None = None  # of the current forkserver
        self._pidfd = -1
        self._status_fd = -1  # the current forkserver's /proc status, opened once (one pread per look)
        self._gone: asyncio.Future[None] | None = None  # resolves when the current forkserver exits
        self.starting = 0  # worker starts in flight: their pids are not known to the pool yet
        self._proven: int | None = None  # the forkserver that forked a worker: it has finished loading
        self._spawning = threading.Lock()  # held while a forkserver is being started and recorded
        self._dead: set[int] = set()  # forkservers seen to exit (their pidfds turned readable)
        self._killed: dict[int, str] = {}  # forkservers killed here, and why: never signalled again (pids are reused)
        self.replaced_stopped = 0  # forkservers found stopped and replaced
        SERVER.is_gone = lambda pid: pid in self._dead or pid in self._killed or not _forkserver_alive(pid)

    @classmethod
    def spawn(cls, session: dict[str, Any], tool_paths: list[str]) -> Forker:
        """A forker for this session; its forkserver starts with :meth:`wait_ready` or the first worker."""
        return cls(session, tool_paths)

    @property
    def alive(self) -> bool:
        return self._pidfd >= 0

    def known_pids(self) -> set[int]:
        """The forkserver's pid (and that of one being started right now): children of the supervisor
        that are no orphans."""
        with self._spawning:
            pids = {self.pid, SERVER.pid}
        return {int(pid) for pid in pids if pid is not None}

    def stopped(self) -> bool:
        """Whether the current forkserver is stopped (``SIGSTOP``, ``SIGTSTP``, traced), or has a stop
        signal pending: it forks nothing and reports no exit until it is replaced."""
        pid = SERVER.pid
        if pid is None or pid in self._killed:
            return False
        try:
            if pid == self.pid and self._status_fd >= 0:
                data = os.pread(self._status_fd, 4096, 0)
            else:
                with open(f"/proc/{pid}/status", "rb") as f:
                    data = f.read(4096)
        except OSError:
            return False
        return stopped_by_status(data)

    # -- the forker thread ---------------------------------------------------------------------------

    async def _in_thread(self, fn: Callable[[], T], until: float, on_late: Callable[[T], None] | None = None) -> T:
        """Run ``fn`` on the forker thread. While it waits, a forkserver seen stopped is killed (which
        unblocks ``fn``; a start then goes on with a new forkserver). Past ``until`` (loop time) the
        forkserver is killed and :class:`ForkerGone` raised; what ``fn`` returns after that goes to
        ``on_late``."""
        loop = asyncio.get_running_loop()
        future = _thread().submit(fn)
        waiting = asyncio.wrap_future(future)
        try:
            async with asyncio.timeout_at(until):
                while True:
                    done, _ = await asyncio.wait({waiting}, timeout=STOPPED_CHECK_SECONDS)
                    if done:
                        return waiting.result()
                    if future.running() and self.stopped():
                        self.replaced_stopped += 1
                        self.kill(why="it was stopped (by another process) while a worker start waited on it")
        except TimeoutError:
            self.kill(why="it did not answer a worker start in time")
            raise ForkerGone("the forkserver did not answer in time; it was killed and will be replaced") from None
        finally:
            if not future.done():  # given up on (timed out, or the caller was cancelled)
                waiting.cancel()  # still queued behind another start: it never runs
                if on_late is not None:
                    future.add_done_callback(lambda done: _hand_late(loop, done, on_late))

    def _ensure_running(self) -> int:
        """(Forker thread.) Start the forkserver unless it runs; its pid."""
        with self._spawning:
            return self._ensure_running_locked()

    def _ensure_running_locked(self) -> int:
        modules = sorted({path.partition(":")[0] for path in self.tool_paths})
        spec: dict[str, Any] = {"supervisor": os.getpid(), "title": f"peon-forkserver {self.workspace}",
                                "modules": modules, "cgroup": self.forkserver_cgroup}
        if self.session_in_env:
            spec.update(session=self.session_json.decode(), tools=list(self.tool_paths))
        # Read (and removed) by the forkserver as it imports peon.workers.forkserver.
        os.environ[worker_forkserver.ENV] = json.dumps(spec)
        tracker: Any = resource_tracker._resource_tracker
        if tracker._fd is None:  # no tracker process: nothing here uses named semaphores or shared memory
            tracker._fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        SERVER.ensure_running()
        pid = SERVER.pid
        assert pid is not None
        return pid

    def _start(self, slot: WorkerSlot) -> tuple[int, StartedWorker]:
        """(Forker thread.) Fork one worker (into the forkserver's cgroup, which it leaves for ``slot``'s
        first thing); and the forkserver's pid.
        A forkserver found dead on the way (it closed its channel: it died or was killed) is replaced once."""
        for attempt in range(2):
            forkserver_pid = self._ensure_running()
            ours, theirs = self.context.Pipe(duplex=True)
            channel = socket_of(ours)
            try:
                start = WorkerStart(theirs, None if self.session_in_env else self.session_json, self.tool_paths,
                                    forkserver_pid, str(slot.cgroup) if slot.cgroup is not None else None,
                                    InheritedFd(self.root_fd) if self.root_fd >= 0 else None)
                process = WorkerProcess(target=serve, args=(start,), name="peon-worker")
                process.start()
                break
            except (OSError, EOFError) as exc:  # the forkserver died before or while it forked
                channel.close()
                if attempt or not SERVER.is_gone(forkserver_pid):
                    raise ForkerGone(f"the forkserver could not start a worker: {exc}") from None
                SERVER.forget()
            except BaseException:
                channel.close()
                raise
            finally:
                theirs.close()
        mp_process._children.discard(process)  # type: ignore[attr-defined]  # the pool alone reads its sentinel
        pid = process.pid
        assert pid is not None
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # it died at once; the sentinel will say how
            pidfd = -1
        return forkserver_pid, StartedWorker(process, pid, pidfd, channel, slot, forkserver_pid)

    # -- the event loop's side -----------------------------------------------------------------------

    async def wait_ready(self) -> None:
        """Start the forkserver now (the first worker start would otherwise)."""
        loop = asyncio.get_running_loop()
        self._watch(await self._in_thread(self._ensure_running, loop.time() + LAUNCH_TIMEOUT_SECONDS))

    async def start_worker(self, containment: Containment, until: float | None = None) -> StartedWorker:
        """A new worker, started by ``until`` (loop time; by default ``limits.worker_start_seconds``
        from now), or :class:`ForkerGone`."""
        if not self.alive:
            await self.wait_ready()
        if until is None:  # a new forkserver first loads the worker and tool modules: that takes longer
            proven = self._proven == self.pid
            seconds = self.start_seconds if proven else max(self.start_seconds, LAUNCH_TIMEOUT_SECONDS)
            until = asyncio.get_running_loop().time() + seconds

        def start() -> tuple[int, StartedWorker]:
            slot = containment.prepare()
            try:
                return self._start(slot)
            except BaseException:
                containment.release(slot)
                raise

        self.starting += 1
        try:
            forkserver_pid, worker = await self._in_thread(start, until,
                                                          on_late=lambda late: _discard(late[1], containment))
        finally:
            self.starting -= 1
        self._watch(forkserver_pid)
        self._proven = forkserver_pid
        return worker

    def _watch(self, pid: int) -> None:
        """Watch the forkserver ``pid`` through a pidfd (a new one when it was replaced)."""
        if pid == self.pid and self._pidfd >= 0:
            return
        self._unwatch()
        self.pid = pid
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        try:
            self._status_fd = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._status_fd = -1
        loop = asyncio.get_running_loop()
        self._gone = loop.create_future()
        loop.add_reader(self._pidfd, self._unwatch)

    def _unwatch(self) -> None:
        if self._pidfd >= 0 and self.pid is not None:
            self._dead.add(self.pid)
        if self._pidfd >= 0:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
            REAPER.reap()
        if self._status_fd >= 0:
            os.close(self._status_fd)
            self._status_fd = -1
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    def kill(self, why: str = "") -> None:
        """Kill the current forkserver and every worker it forked (they are its children), once: a
        forkserver already killed, or seen to exit, is never signalled again (its pid may be reused)."""
        pid = SERVER.pid
        if pid is None or pid in self._killed or pid in self._dead:
            return
        if pid == self.pid and self._pidfd >= 0 and _exited(self._pidfd):  # gone, maybe reaped: not ours to signal
            self._dead.add(pid)
            return
        self._killed[pid] = why or "the session was closing"
        reason = f": {why}" if why else ""
        print(f"peon-supervisor: killing the forkserver (pid {pid}) and its workers{reason}", file=sys.stderr)
        proctree.kill_tree(pid, include_root=True, timeout=5.0)

    def fate(self, pid: int | None) -> str | None:
        """What became of the forkserver ``pid``, for a worker whose exit status it did not report."""
        if pid is None:
            return None
        if pid in self._killed:
            return f"the supervisor killed its forkserver (pid {pid}) and every worker with it, as {self._killed[pid]}"
        if pid in self._dead or not _forkserver_alive(pid):
            return (f"its forkserver (pid {pid}) ended — not by Peon's hand, so another process killed it — "
                    "and a worker ends with its forkserver")
        if proctree.state(pid) in STOPPED_STATES:
            return f"its forkserver (pid {pid}) is stopped (SIGSTOP, by another process) and reports nothing"
        return None

    async def close(self) -> None:
        """Stop the forkserver and wait until it is gone."""
        if not self.alive or self.pid is None:
            return
        if self.pid not in self._killed:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        assert self._gone is not None
        try:
            async with asyncio.timeout(2.0):
                await asyncio.shield(self._gone)
        except TimeoutError:
            self.kill(why="it did not exit on SIGTERM when the session closed")
        self._unwatch()


def _hand_late(loop: asyncio.AbstractEventLoop, done: Future[T], on_late: Callable[[T], None]) -> None:
    """A start given up on finished after all: hand what it made to ``on_late`` (on the loop). One that
    never ran (cancelled while queued) or failed made nothing."""
    if done.cancelled() or done.exception() is not None:
        return
    try:
        loop.call_soon_threadsafe(on_late, done.result())
    except RuntimeError:  # the loop is closed: the session is over, its processes with it
        pass


_STOPPING_MASK = sum(1 << (sig - 1) for sig in STOPPING_SIGNALS)


def stopped_by_status(status: bytes) -> bool:
    """Whether a ``/proc/<pid>/status`` text says the process is stopped or has a stop signal pending
    (sans I/O). Read after every call a reused worker serves: only the three lines it needs are looked
    up (``bytes.find``), not every line split and compared (12 µs of CPU a call, now 3)."""
    text = b"\n" + status
    if _status_value(text, b"\nState:")[:1].decode("ascii", "replace") in STOPPED_STATES:
        return True
    pending = 0
    for key in (b"\nSigPnd:", b"\nShdPnd:"):
        try:
            pending |= int(_status_value(text, key), 16)
        except ValueError:
            pass
    return bool(pending & _STOPPING_MASK)


def _status_value(text: bytes, key: bytes) -> bytes:
    """The value on the last line of ``text`` that starts with ``key`` (``b""`` when there is none): the
    last, as a line-by-line reading would keep, so that nothing before the kernel's own line (the
    process's name, which a process of the same user can set) can stand for it."""
    at = text.rfind(key)
    if at < 0:
        return b""
    at += len(key)
    end = text.find(b"\n", at)
    return text[at:end if end >= 0 else len(text)].strip()


def _exited(pidfd: int) -> bool:
    """Whether the process of ``pidfd`` has exited (its pidfd is readable then)."""
    return bool(select.select([pidfd], [], [], 0)[0])


def _discard(late: StartedWorker, containment: Containment) -> None:
    """A worker whose start was given up on (its forkserver was killed): make sure it is dead, free it.
    One already gone is not signalled (its pid may be reused)."""
    if late.pidfd >= 0 and not _exited(late.pidfd):
        containment.kill_tree(late.pid, late.slot)
    late.channel.close()
    if late.pidfd >= 0:
        os.close(late.pidfd)
    try:
        late.process.join(0)
        late.process.close()
    except ValueError:
        pass
    containment.release(late.slot)
