"""The supervisor's side of its forkserver: ``multiprocessing.get_context("forkserver")``.

Promise: :meth:`Forker.start_worker` returns a started worker — a ``multiprocessing.Process`` forked
by the session's forkserver, a pidfd for it, and the supervisor's end of its ``multiprocessing.Pipe``
— or raises :class:`ForkerGone` within its deadline. A forkserver that does not answer in time (it
may have been stopped with ``SIGSTOP`` by a command: it is an ordinary process of the same user) is
killed with everything below it, and the next start launches a new one. The event loop never waits
on the forkserver: every call into ``multiprocessing`` runs on one dedicated thread.

What the standard library does, and what Peon adds (details and figures in docs/architecture.md):

* ``multiprocessing.forkserver.ensure_running`` starts a fresh interpreter (``python -P -c ...``,
  the supervisor's own ``-P``, so nothing is imported from the workspace) that imports the preload modules — here
  :mod:`peon.workers.forkserver`, which arms a parent-death signal, makes it non-dumpable and loads the
  tool modules — and forks a child per ``Process.start()``; the child unpickles the ``Process`` and
  runs :func:`peon.workers.worker.serve`. ``Pipe`` ends and the pinned workspace root travel to it with
  ``SCM_RIGHTS`` (``reduction.DupFd``).
* The forkserver reports each child's pid, then its exit status, on the ``Process.sentinel`` pipe;
  Peon also watches each worker and the forkserver through pidfds, because a stopped forkserver
  reports nothing.
* The standard library would also start a resource-tracker process; Peon's workers share no named
  semaphores or shared memory, so it is pointed at ``/dev/null`` instead of being started (one
  process less per session, and one less that a command could stop).
* Each ``Process`` is removed from ``multiprocessing``'s list of children right after it started:
  from then on the pool alone reads its sentinel, from the event loop (``Process.start`` polls that
  list, from the forker thread).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import forkserver as mp_forkserver
from multiprocessing import process as mp_process
from multiprocessing import resource_tracker, util
from typing import Any, TypeVar
from collections.abc import Callable

from peon.framing import encode_json
from peon.workers import forkserver as worker_forkserver
from peon.workers import proctree
from peon.workers.channel import socket_of
from peon.workers.reaper import REAPER
from peon.workers.worker import InheritedFd, WorkerStart, serve

from .containment import Containment, WorkerSlot

START_TIMEOUT_SECONDS = 10.0  # starting one worker, unless limits.worker_start_seconds says otherwise
# The forkserver gets the session in its environment (read once, shared by every worker it forks)
# when it fits well below the kernel's bound on one environment string (MAX_ARG_STRLEN, 128 KiB);
# a larger session travels with each worker instead.
SESSION_IN_ENV_MAX_BYTES = 96 * 1024
LAUNCH_TIMEOUT_SECONDS = 60.0  # starting the forkserver itself: a fresh interpreter importing the tools
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


# One forkserver per supervisor process (multiprocessing keeps it in a module global), one thread
# that talks to it.
_executor: ThreadPoolExecutor | None = None


def _thread() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="peon-forker")
    return _executor


def _forget_forkserver() -> None:
    """Make ``multiprocessing`` start a new forkserver: the old one is dead and already reaped by the
    supervisor's reaper (``ensure_running`` would otherwise ``waitpid`` a pid that is no child any more)."""
    server: Any = mp_forkserver._forkserver
    if server._forkserver_alive_fd is not None:
        try:
            os.close(server._forkserver_alive_fd)
        except OSError:
            pass
    address = server._forkserver_address
    if isinstance(address, str) and not util.is_abstract_socket_namespace(address):
        try:
            os.unlink(address)
        except OSError:
            pass
    server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None


def _forkserver_alive(pid: int | None) -> bool:
    return pid is not None and proctree.state(pid) not in (None, "Z", "X")


class Forker:
    """The session's forkserver: started on demand, replaced when it died or stopped answering."""

    def __init__(self, session: dict[str, Any], tool_paths: list[str]):
        session = dict(session)
        self.root_fd: int = int(session.pop("root_fd", -1))
        self.start_seconds = float(session.pop("start_seconds", START_TIMEOUT_SECONDS))
        self.workers_cgroup: str | None = session.pop("workers_cgroup", None)
        self.runtime_dir: str | None = session.pop("runtime_dir", None)
        self.workspace = str(session["workspace"])
        self.session_json = encode_json(session)
        self.session_in_env = len(self.session_json) <= SESSION_IN_ENV_MAX_BYTES
        self.tool_paths = tuple(tool_paths)
        self.context = multiprocessing.get_context("forkserver")
        self.pid: int | None = None  # of the current forkserver
        self._pidfd = -1
        self._gone: asyncio.Future[None] | None = None  # resolves when the current forkserver exits
        self.starting = 0  # worker starts in flight: their pids are not known to the pool yet
        self._proven: int | None = None  # the forkserver that forked a worker: it has finished loading
        self._spawning = threading.Lock()  # held while a forkserver is being started and recorded
        self._dead: set[int] = set()  # forkservers seen to exit (their pidfds turned readable)

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
        server: Any = mp_forkserver._forkserver
        with self._spawning:
            pids = {self.pid, server._forkserver_pid}
        return {int(pid) for pid in pids if pid is not None}

    # -- the forker thread ---------------------------------------------------------------------------

    async def _in_thread(self, fn: Callable[[], T], until: float, on_late: Callable[[T], None] | None = None) -> T:
        """Run ``fn`` on the forker thread; past ``until`` (loop time) kill the forkserver — which
        unblocks ``fn`` — and raise :class:`ForkerGone`. What ``fn`` returns after that goes to ``on_late``."""
        loop = asyncio.get_running_loop()
        future = _thread().submit(fn)
        try:
            async with asyncio.timeout_at(until):
                return await asyncio.wrap_future(future)
        except TimeoutError:
            self.kill()
            if on_late is not None:
                future.add_done_callback(
                    lambda done: done.exception() is None and loop.call_soon_threadsafe(on_late, done.result()))
            raise ForkerGone("the forkserver did not answer in time; it was killed and will be replaced") from None

    def _ensure_running(self) -> int:
        """(Forker thread.) Start the forkserver unless it runs; its pid."""
        with self._spawning:
            return self._ensure_running_locked()

    def _ensure_running_locked(self) -> int:
        modules = sorted({path.partition(":")[0] for path in self.tool_paths})
        spec: dict[str, Any] = {"supervisor": os.getpid(), "title": f"peon-forkserver {self.workspace}",
                                "modules": modules, "cgroup": self.workers_cgroup}
        if self.session_in_env:
            spec.update(session=self.session_json.decode(), tools=list(self.tool_paths))
        # Kept in the supervisor's environment: multiprocessing may start a forkserver on its own.
        os.environ[worker_forkserver.ENV] = json.dumps(spec)
        self.context.set_forkserver_preload(["peon.workers.forkserver"])
        tracker: Any = resource_tracker._resource_tracker
        if tracker._fd is None:  # no tracker process: nothing here uses named semaphores or shared memory
            tracker._fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        if self.runtime_dir and os.path.isdir(self.runtime_dir):  # the client's: it removes it, even after a kill
            mp_process.current_process()._config.setdefault("tempdir", self.runtime_dir)  # type: ignore[attr-defined]
        util.get_temp_dir()  # where the forkserver's socket lives
        server: Any = mp_forkserver._forkserver
        if server._forkserver_pid is not None and server._forkserver_pid in self._dead:
            _forget_forkserver()
        try:
            mp_forkserver.ensure_running()
        except ChildProcessError:  # it died and the reaper collected it between the check and here
            _forget_forkserver()
            mp_forkserver.ensure_running()
        pid = server._forkserver_pid
        assert pid is not None
        return int(pid)

    def _start(self, slot: WorkerSlot) -> tuple[int, StartedWorker]:
        """(Forker thread.) Fork one worker (into the forkserver's cgroup); and the forkserver's pid.
        A forkserver found dead on the way (it refuses the connection) is replaced once."""
        for attempt in range(2):
            forkserver_pid = self._ensure_running()
            ours, theirs = self.context.Pipe(duplex=True)
            channel = socket_of(ours)
            try:
                start = WorkerStart(theirs, None if self.session_in_env else self.session_json, self.tool_paths,
                                    forkserver_pid, self.workers_cgroup,
                                    InheritedFd(self.root_fd) if self.root_fd >= 0 else None)
                process = self.context.Process(target=serve, args=(start,), name="peon-worker")
                process.start()
                break
            except (OSError, EOFError) as exc:  # the forkserver died before or while it forked
                channel.close()
                if attempt or _forkserver_alive(forkserver_pid):
                    raise ForkerGone(f"the forkserver could not start a worker: {exc}") from None
                _forget_forkserver()
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
        return forkserver_pid, StartedWorker(process, pid, pidfd, channel, slot)

    # -- the event loop's side -----------------------------------------------------------------------

    async def wait_ready(self) -> None:
        """Start the forkserver now (``multiprocessing`` would on the first ``Process.start``)."""
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
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    def kill(self) -> None:
        """Kill the forkserver and every worker it forked (they are its children)."""
        if self.alive and self.pid is not None:
            print(f"peon-supervisor: killing the forkserver (pid {self.pid}) and its workers", file=sys.stderr)
            proctree.kill_tree(self.pid, include_root=True, timeout=5.0)

    async def close(self) -> None:
        """Stop the forkserver and wait until it is gone; remove its runtime directory."""
        if not self.alive or self.pid is None:
            if self.runtime_dir:
                shutil.rmtree(self.runtime_dir, ignore_errors=True)
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        assert self._gone is not None
        try:
            async with asyncio.timeout(2.0):
                await asyncio.shield(self._gone)
        except TimeoutError:
            self.kill()
        self._unwatch()
        if self.runtime_dir:  # its client removes it too; whoever is last
            shutil.rmtree(self.runtime_dir, ignore_errors=True)


def _discard(late: StartedWorker, containment: Containment) -> None:
    """A worker whose start was given up on (its forkserver was killed): make sure it is dead, free it."""
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
