"""The supervisor's workers: one call at a time per worker, workers kept ready, all owned here.

Promise: :meth:`WorkerPool.run` hands a call to a worker that serves nothing else meanwhile — one
waiting for a call (a standby started before the call arrived, or a worker put back after a clean
call), so the call does not wait for a process start-up — and returns
exactly one outcome: the worker's result, or an error saying how the worker failed — crashed, killed
by the OOM killer, hung past deadline + grace, broke the channel's protocol
(:mod:`peon.workers.messages`), or could not be started in time. The call's time starts when its worker
takes it: the wait for a worker is bounded on its own by ``limits.worker_start_seconds`` (past it the call
is answered ``worker_crashed``, saying why, and never runs), its deadline is moved by the time waited, and
a result says how long it waited (``waited_for_worker_ms``, when it waited at all). It returns by that
deadline + ``limits.worker_grace_seconds`` (+ the cancel grace after a cancel) whatever the worker or the
forkserver do. When it returns an error, the worker and its whole tree are already dead. When it
returns a worker's result, the worker either waits for its next call (it offered to, and
:func:`peon.workers.reuse.serves_again` agrees; at most ``limits.worker_max_calls`` calls, never after
a cancel) or is retired: it exits once its
channel is closed; that, its containment's release and the next standby's start happen right after
the reply, off the call's path. One standby is kept while the session is idle, a second while calls
use workers up. :meth:`WorkerPool.close` kills every worker the pool started and stops the forkserver.

In Erlang/OTP terms the pool supervises *temporary* children: a worker is never restarted, a failed
one is reported and replaced by a fresh standby; a worker whose calls end cleanly is *transient* in
the sense of a prefork server's worker: kept while they do, replaced after its ``worker_max_calls``-th.
A stopped forkserver is replaced as soon as a call served by a waiting worker finds it so. A worker
is a :class:`WorkerHandle`, usable by more than
the call executor: whoever holds one sends it messages and consumes what it sends.

Background jobs (a call with ``stream: "live"``), in cgroup containment, are run by :meth:`WorkerPool.run_job`
in the session's job host (:class:`JobHost`, :mod:`peon.workers.job_host`): a standby that became it on
the first job, running every job at once, each in a cgroup of its own, and retired
:data:`JOB_HOST_LINGER_SECONDS` after the last; the same one outcome per job by its deadline + grace.
A host that fails is killed with every job it runs, each answered with the reason. In process-tree
containment a job takes a worker of its own like any call.

Workers are started by the session's forkserver through ``multiprocessing`` (:mod:`peon.supervisor.forker`);
the supervisor watches each through a pidfd and its ``Process.sentinel``, looks at a standby's state
(stopped, zombie) as a call takes it (:class:`peon.workers.proctree.StateWatch`), and kills trees by process
tree and cgroup; the orphans of a worker that dies are reparented to the supervisor (a subreaper)
and killed here.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import traceback
from collections import deque
from pathlib import Path
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from peon.core.cancel import Deadline
from peon.core.errors import ErrorCode, ToolError, error_reply as _failure  # made up here: no ``op``, not from a worker
from peon.core.framing import encode_json
from peon.workers import cgroup, proctree
from peon.workers.channel import ChannelError, FrameChannel
from peon.workers.messages import (
    CallMessage,
    CancelMessage,
    HOST_MESSAGE,
    WAKE_SIGNAL,
    OutputStreaming,
    ProtocolError,
    WorkerMessage,
    parse_host_message,
    parse_worker_message,
)
from peon.workers.reaper import describe_exitcode
from peon.workers.reuse import serves_again
from peon.workers.runner import CANCEL_GRACE_SECONDS

from peon.supervisor.containment import Containment, sweep_orphans
from peon.supervisor.containment import start_time as containment_start_time
from peon.supervisor.forker import START_TIMEOUT_SECONDS, Forker, ForkerGone, StartedWorker

# Workers kept ready: one while the session is idle; two once calls use workers up (a call of a tool
# that starts processes, or one that fails), so back-to-back calls never wait for a start-up, and
# back to one after BUSY_STANDBY_SECONDS without such a call.
IDLE_STANDBYS = 1
BUSY_STANDBYS = 2
BUSY_STANDBY_SECONDS = 1.0
# A call of a tool that starts processes still running this long after it took its worker has the next
# standby started meanwhile (a quick one may leave its worker for the next call, or have the standby
# started after its reply; started during every call slower than a few ms, standbys fed on the CPU a
# loaded host lacks). A background job holds its worker for its whole life: it has one started at once.
REFILL_DURING_CALL_SECONDS = 1.0
MAX_CALLS_PER_WORKER = 1000  # unless limits.worker_max_calls says otherwise
EXIT_WAIT_SECONDS = 2.0  # how long a worker may take to exit after its result, or after its channel closed
STATUS_WAIT_SECONDS = 1.0  # how long after a worker's exit its status may take to arrive
RELEASE_RETRY_SECONDS = (0.001, 0.005, 0.02, 0.1, 0.5, 1.0, 2.0)  # a cgroup still emptying
# A pool that started or answered no call for this long has a standby whose caches went cold: the
# next call wakes it (bench_read.py: in-process work is 4.8-8.5x slower after 10 ms of sleep).
WAKE_AFTER_IDLE_SECONDS = 0.01
# The job host exits this long after its last job ended: a job started soon after another one finds
# it, and a session with no job running pays for no process.
JOB_HOST_LINGER_SECONDS = 5.0
JOB_HOST_WATCH_SECONDS = 0.5  # how often a job host running jobs is looked at (stopped by someone?)


class WorkerHandle:
    """One worker: its ``multiprocessing.Process``, a pidfd, its ``stat`` file, its cgroup slot and its channel.

    ``exited`` resolves with its exit code (``-N``: killed by signal N) once it has exited, or with
    None when its status cannot be known (its forkserver is gone or stopped)."""

    def __init__(self, started: StartedWorker):
        self.process = started.process
        self.pid = started.pid
        self.pidfd = started.pidfd
        self.slot = started.slot
        self.forkserver: int | None = getattr(started, "forkserver", None)
        self.channel = FrameChannel(started.channel)
        self.call_id: str | None = None
        self.calls = 0  # calls it answered with a result
        try:  # opened now, off the call's path: looking at its state later is one pread
            self.watch: proctree.StateWatch | None = proctree.StateWatch(self.pid)
        except OSError:  # it is gone already: take() discards it
            self.watch = None
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[int | None] = loop.create_future()
        self._sentinel = self.process.sentinel
        loop.add_reader(self._sentinel, self._on_status)
        if self.pidfd >= 0:
            loop.add_reader(self.pidfd, self._on_death)
        self._status_timer: asyncio.TimerHandle | None = None

    def _on_status(self) -> None:
        """The forkserver wrote the exit status (or closed the pipe: it is gone)."""
        asyncio.get_running_loop().remove_reader(self._sentinel)
        code = self.process.exitcode  # the sentinel is readable: this does not block
        self._resolve(None if code == 255 else code)  # 255: what multiprocessing says when it cannot tell

    def _on_death(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.pidfd)
        if not self.exited.done():  # the status normally follows at once; a stopped forkserver never sends it
            self._status_timer = loop.call_later(STATUS_WAIT_SECONDS, self._resolve, None)

    def _resolve(self, code: int | None) -> None:
        if not self.exited.done():
            self.exited.set_result(code)

    async def send(self, message: CallMessage | CancelMessage) -> None:
        await self.channel.send(encode_json(message))

    async def recv(self) -> WorkerMessage | None:
        """The next message of its call, None once it closed its channel; :class:`ProtocolError` for
        anything that is not a well-formed, bounded message of its current call."""
        try:
            payload = await self.channel.recv()
        except ChannelError as exc:
            raise ProtocolError(str(exc)) from None
        if payload is None:
            return None
        return parse_worker_message(payload, self.call_id or "")

    def close(self) -> bool:
        """Release the supervisor's descriptors of this worker (it must have exited); False if
        ``multiprocessing`` does not know its status yet (try again later)."""
        loop = asyncio.get_running_loop()
        self.channel.close()
        if self.watch is not None:
            self.watch.close()
        if self._status_timer is not None:
            self._status_timer.cancel()
        if self.pidfd >= 0:
            loop.remove_reader(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = -1
        if not self.exited.done():  # released unknown: whoever else waits on it goes on (no CancelledError)
            self.exited.set_result(None)
        loop.remove_reader(self._sentinel)
        try:
            self.process.close()
        except ValueError:
            return False  # its forkserver has not reported it yet
        return True


class JobHost:
    """The supervisor's side of the session's job host (:mod:`peon.workers.job_host`): one worker that
    runs every background job of the session, in cgroup containment.

    Its channel is read by a task on the event loop, as a worker's is: each job's ``output`` and
    ``spawned`` go to that job's callback, its ``result`` to its future. The host is trusted only as a
    worker is: a protocol break, its death, a stop (seen within :data:`JOB_HOST_WATCH_SECONDS` while
    it runs jobs) or a job left unanswered past its deadline + grace end it — it is killed with its
    whole tree and every running job's cgroup, and each job it ran ends failed with a stable code and
    the reason (``details.reason``); the next background job starts a new host. It is retired (its
    channel closed: it exits) :data:`JOB_HOST_LINGER_SECONDS` after its last job ended."""

    def __init__(self, pool: WorkerPool, worker: WorkerHandle):
        self.pool = pool
        self.worker = worker
        self.jobs: dict[str, tuple[asyncio.Future[dict[str, Any]], Callable[[WorkerMessage], None]]] = {}
        self.gone = False
        loop = asyncio.get_running_loop()
        self._retire: asyncio.TimerHandle | None = None
        self._reader = loop.create_task(self._read())
        self._watch = loop.create_task(self._watch_state())

    def add(self, job_id: str, on_event: Callable[[WorkerMessage], None]) -> asyncio.Future[dict[str, Any]]:
        if self._retire is not None:
            self._retire.cancel()
            self._retire = None
        result: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.jobs[job_id] = (result, on_event)
        return result

    async def _read(self) -> None:
        try:
            while True:
                try:
                    payload = await self.worker.channel.recv()
                except ChannelError as exc:
                    raise ProtocolError(str(exc)) from None
                if payload is None:
                    await self._died()
                    return
                message = parse_host_message(payload, self.jobs)
                result, on_event = self.jobs[message["id"]]
                if message["op"] == "result":
                    del self.jobs[message["id"]]
                    reply = dict(message)
                    reply.pop("reuse", None)
                    if not result.done():
                        result.set_result(reply)
                    if not self.jobs:
                        self._retire = asyncio.get_running_loop().call_later(JOB_HOST_LINGER_SECONDS, self.retire)
                elif message["op"] in ("output", "spawned"):
                    on_event(message)
        except ProtocolError as exc:
            self.fail(ErrorCode.WORKER_CRASHED,
                      f"the job host broke protocol ({exc}) and was killed with every job it ran",
                      {"reason": "protocol"})
        except Exception as exc:  # a bug here ends the host, never the session
            traceback.print_exc(file=sys.stderr)
            self.fail(ErrorCode.WORKER_CRASHED, f"the job host's channel failed ({type(exc).__name__}: {exc}); "
                      "it was killed with every job it ran", {"reason": "job_host"})

    async def _died(self) -> None:
        if self.gone:  # retired: its channel was closed by us
            return
        try:
            async with asyncio.timeout(EXIT_WAIT_SECONDS):
                code = await asyncio.shield(self.worker.exited)
            how = describe_exitcode(code)
        except TimeoutError:
            how = "closed its channel"
        self.fail(ErrorCode.WORKER_CRASHED,
                  f"the job host (the worker running the session's background jobs) {how}; the job did not "
                  "complete, and the next background job gets a new job host",
                  {"reason": "job_host", "status": how})

    async def _watch_state(self) -> None:
        while True:
            await asyncio.sleep(JOB_HOST_WATCH_SECONDS)
            if self.jobs and self.worker.watch is not None and self.worker.watch.state() in ("T", "t"):
                self.fail(ErrorCode.WORKER_HUNG,
                          "the job host was stopped (by another process) while it ran this job; it was killed "
                          "with every job it ran, and the next background job gets a new job host",
                          {"reason": "job_host_stopped"})
                return

    def fail(self, code: ErrorCode, message: str, details: dict[str, Any]) -> None:
        """Kill the host with its whole tree and every running job's cgroup; every job it ran ends
        with this error."""
        if self.gone:
            return
        self._end()
        pool = self.pool
        pool.containment.kill_tree(self.worker.pid, self.worker.slot)
        ids = list(self.jobs)
        pool.kill_job_cgroups(ids)
        for result, _ in self.jobs.values():
            if not result.done():
                result.set_result(_failure(code, message, details))
        self.jobs.clear()
        pool._spawn_background(pool._finish(self.worker))
        pool._spawn_background(pool.remove_job_cgroups(ids))

    def retire(self) -> None:
        """No job ran for :data:`JOB_HOST_LINGER_SECONDS`: the host exits once its channel is closed."""
        if self.jobs or self.gone:
            return
        self._end()
        self.worker.channel.close()
        self.pool._spawn_background(self.pool._finish(self.worker))

    def _end(self) -> None:
        self.gone = True
        if self.pool.job_host is self:
            self.pool.job_host = None
        if self._retire is not None:
            self._retire.cancel()
        self._watch.cancel()
        if self._reader is not asyncio.current_task():
            self._reader.cancel()


class WorkerPool:
    def __init__(self, spawn_forker: Callable[[], Forker], containment: Containment, grace_seconds: float,
                 max_calls: int = MAX_CALLS_PER_WORKER, idle_standbys: int = IDLE_STANDBYS,
                 busy_standbys: int = BUSY_STANDBYS, on_worker: Callable[[dict[str, Any]], None] | None = None):
        self.spawn_forker = spawn_forker
        # Told of each worker as it starts and once it is gone (pid and start time): whoever outlives the
        # supervisor (its client) can then kill the trees of workers that could not kill their own.
        self.on_worker = on_worker
        self.containment = containment
        self.grace_seconds = grace_seconds
        self.max_calls = max_calls
        self.idle_standbys = idle_standbys
        self.busy_standbys = max(busy_standbys, idle_standbys)
        self.standbys = idle_standbys  # how many are kept ready now
        self.forker: Forker | None = None
        self.live: dict[int, WorkerHandle] = {}  # every worker not yet released
        # Workers ready for a call, the next first: standbys being started or waiting, and workers that
        # served a call and wait for the next (put back in front: their pages are their own already).
        self._ready: deque[asyncio.Future[WorkerHandle]] = deque()
        self._calm: asyncio.TimerHandle | None = None  # brings the standbys back to idle_standbys
        self._background: set[asyncio.Task[Any]] = set()
        self._unclosed: list[WorkerHandle] = []  # exited, but multiprocessing has no status for them yet
        self._first: asyncio.Future[WorkerHandle] | None = None  # the first standby, while the session starts
        self._closing = False
        self._last_activity = 0.0  # loop time a call last took a worker, got its reply, or woke one
        self.job_host: JobHost | None = None  # the worker running every background job (cgroup containment)
        self._host_start: asyncio.Task[JobHost] | None = None

    # -- process start-up -------------------------------------------------------------------------

    async def begin(self) -> None:
        """Launch the forkserver, then start the standbys in the background: the first call waits for
        the first standby (:meth:`wait_started`). Returns once the forkserver's interpreter is started
        (not loaded): it loads its modules on its own, while the supervisor goes on. A launch that
        fails is retried, and reported, by the first call."""
        self.forker = self.spawn_forker()
        try:
            await self.forker.wait_ready()
        except Exception:  # start_worker launches it again, and its call says what fails
            pass
        self._replenish()
        self._first = self._ready[0] if self._ready else None

    @property
    def started(self) -> bool:
        """Whether the first standby :meth:`begin` started is up or failed to start (no need to wait)."""
        return self._first is None or self._first.done()

    async def wait_started(self) -> None:
        """Return once the first standby :meth:`begin` started is up, or failed to start (a call then
        starts a worker itself and reports what fails, :meth:`take`). The forkserver's launch is
        bounded by its own deadline, so this is too."""
        first, self._first = self._first, None
        if first is not None and not first.done():
            await asyncio.wait({first})

    async def _start_one(self) -> WorkerHandle:
        assert self.forker is not None
        try:
            started = await self.forker.start_worker(self.containment)
        except ForkerGone:
            raise
        except Exception as exc:  # a bug or a broken environment: the call says so, the session goes on
            traceback.print_exc(file=sys.stderr)
            raise ForkerGone(f"starting a worker failed: {type(exc).__name__}: {exc}") from None
        handle = WorkerHandle(started)
        self.live[handle.pid] = handle
        self._close_pending()
        self._announce(handle, started=True)
        return handle

    def _announce(self, worker: WorkerHandle, started: bool) -> None:
        if self.on_worker is None:
            return
        if not started:
            self.on_worker({"op": "worker_gone", "pid": worker.pid})
            return
        start_time = containment_start_time(worker.pid)
        if start_time is not None:
            self.on_worker({"op": "worker", "pid": worker.pid, "start_time": start_time})

    def _replenish(self) -> None:
        while len(self._ready) < self.standbys and not self._closing:
            task = asyncio.get_running_loop().create_task(self._start_one())
            task.add_done_callback(_quiet)
            self._ready.append(task)

    def _used_up(self) -> None:
        """A call used a worker up: keep a second standby ready until calls stop doing so."""
        loop = asyncio.get_running_loop()
        self.standbys = self.busy_standbys
        if self._calm is not None:
            self._calm.cancel()
        self._calm = loop.call_later(BUSY_STANDBY_SECONDS, self._back_to_idle)

    def _back_to_idle(self) -> None:
        """No call used a worker up for a while: retire the standbys past ``idle_standbys`` (the newest
        first; one still starting is left to the next call)."""
        self._calm = None
        self.standbys = self.idle_standbys
        for task in reversed(list(self._ready)):
            if len(self._ready) <= self.standbys:
                break
            if task.done() and not task.cancelled() and task.exception() is None:
                self._ready.remove(task)
                self._after_call(task.result())

    def _put_back(self, worker: WorkerHandle) -> None:
        """A worker that served a call and may serve another: the next call takes it."""
        ready = asyncio.get_running_loop().create_future()
        ready.set_result(worker)
        self._ready.appendleft(ready)

    async def take(self, until: float) -> WorkerHandle:
        """A worker that waits for a call (a standby, or one put back after a call, when one is
        ready), started by ``until`` (loop time) or :class:`ForkerGone`. Workers that died or were
        stopped while they waited are discarded."""
        loop = asyncio.get_running_loop()
        fresh_starts = 0
        while True:
            task: asyncio.Future[WorkerHandle]
            if self._ready:
                task = self._ready.popleft()
            elif fresh_starts < 2:
                fresh_starts += 1
                task = loop.create_task(self._start_one())
                task.add_done_callback(_quiet)
            else:
                raise ForkerGone("no worker could be started")
            try:
                async with asyncio.timeout_at(until):
                    worker = await asyncio.shield(task)
            except TimeoutError:
                self._ready.appendleft(task)  # still starting: the next call may have it
                raise ForkerGone("none started in time") from None
            except ForkerGone:
                if loop.time() >= until or fresh_starts >= 2:
                    raise
                continue
            if self.forker is not None and self.forker.stopped():
                # Its forkserver was stopped (by a command): it is replaced now, and its workers die
                # with it — this one must not be handed a call first.
                self.forker.kill(why="it was stopped (by another process) when a call took one of its workers")
                self._replenish()
            state = worker.watch.state() if worker.watch is not None else None
            if worker.exited.done() or state in (None, "Z", "X", "x", "T", "t"):
                # It died, or was stopped, while it waited.
                if state not in (None, "Z", "X", "x"):
                    self.containment.kill_tree(worker.pid, worker.slot)
                self._spawn_background(self._finish(worker))
                continue
            return worker

    def wake(self) -> None:
        """A call is coming (it is still to be admitted, and may be denied): if the pool has been idle,
        signal the next standby to run one warm-up round now, on an idle core, while the supervisor
        admits the call. At most one wake per pause; back-to-back calls send none. It made a 4 KiB
        ``read`` 50 ms apart 0.08-0.29 ms faster."""
        now = asyncio.get_running_loop().time()
        if now - self._last_activity < WAKE_AFTER_IDLE_SECONDS or not self._ready:
            return
        self._last_activity = now
        task = self._ready[0]
        if not task.done() or task.cancelled() or task.exception() is not None:
            return
        worker = task.result()
        if worker.calls:  # between two calls it waits on its channel, not for wakes: its pages are its own
            return
        if worker.pidfd >= 0:
            try:
                signal.pidfd_send_signal(worker.pidfd, WAKE_SIGNAL)
            except OSError:  # it died: take() finds out
                pass

    # -- one call ---------------------------------------------------------------------------------

    async def run(
        self,
        call: dict[str, Any],
        deadline: Deadline,
        cancelled: asyncio.Event,
        on_progress: Callable[[dict[str, Any]], Awaitable[None]],
        on_event: Callable[[WorkerMessage], None] | None = None,
        on_taken: Callable[[], None] | None = None,
        starts_processes: bool = True,
    ) -> dict[str, Any]:
        """Run ``call`` in a worker that serves nothing else meanwhile. With ``call["stream"]`` the worker
        sends its command's output and start (``output``, ``spawned``) to ``on_event``, which may raise
        :class:`ProtocolError`. When the worker offers to serve again (its result's ``reuse``), the
        outcome allows it (:func:`peon.workers.reuse.serves_again`) and the call was not cancelled, the
        worker is put back for the next call, until it has answered ``max_calls``; after any other call
        it is retired (its channel closed) or, when it failed, killed with its tree before this returns.
        ``deadline`` is moved by the time the call waited for its worker; ``on_taken`` is called then.
        ``starts_processes``: a call still running after :data:`REFILL_DURING_CALL_SECONDS` has the
        next standby started meanwhile."""
        if call.get("stream") == "live" and on_event is not None and self.hosts_jobs:
            return await self.run_job(call, deadline, cancelled, on_event)
        loop = asyncio.get_running_loop()
        tool = call["tool"]
        start_seconds = self.forker.start_seconds if self.forker is not None else START_TIMEOUT_SECONDS
        asked = time.monotonic()
        try:
            worker = await self.take(loop.time() + start_seconds)
        except ForkerGone as exc:
            self._used_up()
            loop.call_soon(self._replenish)
            return _failure(ErrorCode.WORKER_CRASHED,
                            f"{tool} did not run: no worker could be started for it within "
                            f"limits.worker_start_seconds ({start_seconds:g} s): {exc}",
                            {"reason": "no_worker", "waited_for_worker_ms": int((time.monotonic() - asked) * 1000)})
        waited = time.monotonic() - asked
        deadline.at += waited  # the call's time starts with its worker
        if on_taken is not None:
            on_taken()
        worker.call_id = str(call["id"])
        self.containment.begin_call(worker.slot)
        self._last_activity = loop.time()
        refill = (loop.call_later(0.0 if call.get("stream") == "live" else REFILL_DURING_CALL_SECONDS, self._refill)
                  if starts_processes else None)
        try:
            reply = await self._converse(worker, call, deadline, cancelled, on_progress, on_event)
        except BaseException:  # cancelled (the session is closing) or a bug: the worker goes too
            self.containment.kill_tree(worker.pid, worker.slot)
            self._spawn_background(self._finish(worker))
            raise
        finally:
            self._last_activity = loop.time()
            if refill is not None:
                refill.cancel()
        if reply.get("op") == "result":  # reported by the worker, which swept its own tree first
            worker.calls += 1
            offered = reply.pop("reuse", None) is True
            if (offered and worker.calls < self.max_calls and not cancelled.is_set() and not self._closing
                    and serves_again(reply)):
                worker.call_id = None
                self._put_back(worker)
                loop.call_soon(self._check_forkserver)
                return reply
            self._used_up()
            loop.call_soon(self._after_call, worker)  # after the reply has gone out
        else:
            self._used_up()
            await self._finish(worker)  # the worker failed: nothing of it may remain when we answer
            loop.call_soon(self._replenish)
        waited_ms = int(waited * 1000)
        if waited_ms and reply.get("ok") and isinstance(reply.get("value"), dict):
            reply["value"] = {**reply["value"], "waited_for_worker_ms": waited_ms}
        return reply

    # -- background jobs ----------------------------------------------------------------------------

    @property
    def hosts_jobs(self) -> bool:
        """Whether background jobs run in the job host: where each can have a cgroup of its own, which
        attributes every process of a job to it (a daemon that left its process group too). In
        process-tree containment an orphan cannot be attributed to one of several jobs, so each job
        keeps a worker of its own there."""
        return self.containment.workers_cgroup is not None

    async def run_job(self, call: dict[str, Any], deadline: Deadline, cancelled: asyncio.Event,
                      on_event: Callable[[WorkerMessage], None]) -> dict[str, Any]:
        """Run the background job ``call`` in the session's job host (started if there is none):
        the same promise as :meth:`run`, one outcome by the deadline + grace (+ the cancel grace)."""
        loop = asyncio.get_running_loop()
        tool, job_id = call["tool"], str(call["id"])
        start_seconds = self.forker.start_seconds if self.forker is not None else START_TIMEOUT_SECONDS
        asked = time.monotonic()
        try:
            host = await self._job_host(loop.time() + start_seconds)
        except ForkerGone as exc:
            return _failure(ErrorCode.WORKER_CRASHED,
                            f"{tool} did not run: no job host could be started for it within "
                            f"limits.worker_start_seconds ({start_seconds:g} s): {exc}", {"reason": "no_worker"})
        deadline.at += time.monotonic() - asked  # the job's time starts with its host
        result = host.add(job_id, on_event)
        try:
            await host.worker.send(_call_message(call, deadline, True))
        except OSError:
            pass  # the host is gone: its reader ends the job
        try:
            async with asyncio.timeout_at(deadline.at + self.grace_seconds) as scope:
                cancel_watch = loop.create_task(self._forward_job_cancel(host, job_id, cancelled, scope))
                try:
                    return await asyncio.shield(result)
                finally:
                    cancel_watch.cancel()
        except TimeoutError:
            if not result.done():
                host.fail(ErrorCode.WORKER_HUNG,
                          f"the job host did not end {tool} job {job_id} within its deadline plus "
                          f"{self.grace_seconds:g} s of grace; it was killed with its whole process tree and "
                          "every job it ran", {"reason": "job_host_hung"})
            return result.result()
        except asyncio.CancelledError:  # the session is closing: the host is killed with the pool
            if not result.done() and not host.gone:  # its result, when it comes, is taken and dropped
                self._spawn_background(self._send_cancel(host, job_id))
            raise

    async def _job_host(self, until: float) -> JobHost:
        while self.job_host is None or self.job_host.gone:
            if self._host_start is None or self._host_start.done():
                self._host_start = asyncio.get_running_loop().create_task(self._start_job_host(until))
            await asyncio.shield(self._host_start)
        return self.job_host

    async def _start_job_host(self, until: float) -> JobHost:
        """A standby becomes the job host (no start-up of its own); the next standby is started."""
        worker = await self.take(until)
        asyncio.get_running_loop().call_soon(self._replenish)
        worker.call_id = "job host"
        try:
            await worker.channel.send(HOST_MESSAGE)
        except OSError:
            pass  # it died as it was taken: its reader says so to the first job
        self.job_host = JobHost(self, worker)
        return self.job_host

    async def _forward_job_cancel(self, host: JobHost, job_id: str, cancelled: asyncio.Event,
                                  scope: asyncio.Timeout) -> None:
        await cancelled.wait()
        await self._send_cancel(host, job_id)
        limit = asyncio.get_running_loop().time() + CANCEL_GRACE_SECONDS + self.grace_seconds
        when = scope.when()
        if when is None or limit < when:
            scope.reschedule(limit)

    @staticmethod
    async def _send_cancel(host: JobHost, job_id: str) -> None:
        try:
            await host.worker.send({"op": "cancel", "id": job_id, "reason": "cancelled by the client"})
        except OSError:
            pass

    def _job_cgroups(self, job_ids: list[str]) -> list[cgroup.Cgroup]:
        workers = self.containment.workers_cgroup
        return [cgroup.Cgroup(cgroup.job_cgroup_path(Path(workers), job_id)) for job_id in job_ids] if workers else []

    def kill_job_cgroups(self, job_ids: list[str]) -> None:
        """``cgroup.kill`` of these jobs' cgroups: what of them left the host's tree dies too."""
        for group in self._job_cgroups(job_ids):
            try:
                group.kill()
            except OSError:
                pass

    async def remove_job_cgroups(self, job_ids: list[str]) -> None:
        for group in self._job_cgroups(job_ids):
            for delay in (0.0, *RELEASE_RETRY_SECONDS):
                if delay:
                    await asyncio.sleep(delay)
                try:
                    if group.remove_now():
                        break
                except OSError:
                    pass
            else:
                print(f"peon-supervisor: the job cgroup {group.path} could not be emptied", file=sys.stderr)

    def _check_forkserver(self) -> None:
        """A forkserver stopped by a command (it is a process of the same user) is replaced now, not at
        the next start, which calls served by waiting workers might put off for long: it is killed with
        its workers (a waiting worker found dead is discarded as a call takes it), and the next start
        launches a new one."""
        forker = self.forker
        if forker is None or forker.pid is None or not forker.alive:  # a start in flight fails with it
            return
        if forker.stopped():  # alive (its pidfd says so): the pid is still its own
            forker.kill(why="it was stopped (by another process) while its workers served calls")
            self._replenish()

    def _refill(self) -> None:
        """A long call holds its worker: the next call (a background job's neighbour) gets a standby."""
        self._used_up()
        self._replenish()

    def _after_call(self, worker: WorkerHandle) -> None:
        worker.channel.close()  # the worker exits when it sees its channel close
        self._spawn_background(self._finish(worker))
        self._replenish()

    async def _converse(self, worker: WorkerHandle, call: dict[str, Any], deadline: Deadline,
                        cancelled: asyncio.Event, on_progress: Callable[[dict[str, Any]], Awaitable[None]],
                        on_event: Callable[[WorkerMessage], None] | None = None) -> dict[str, Any]:
        tool = call["tool"]
        message = _call_message(call, deadline, on_event is not None)
        try:
            async with asyncio.timeout_at(deadline.at + self.grace_seconds) as scope:
                cancel_watch = asyncio.get_running_loop().create_task(self._forward_cancel(worker, cancelled, scope))
                try:
                    await worker.send(message)
                    while True:
                        received = await worker.recv()
                        if received is None:
                            return await self._crashed(worker, tool)
                        if received["op"] == "result":
                            return dict(received)
                        if received["op"] in ("output", "spawned"):
                            if on_event is None:
                                raise ProtocolError(f"the worker sent {received['op']} for a call that streams nothing")
                            on_event(received)
                            continue
                        await on_progress(dict(received))
                finally:
                    cancel_watch.cancel()
        except TimeoutError:
            self.containment.kill_tree(worker.pid, worker.slot)
            return _failure(
                ErrorCode.WORKER_HUNG,
                f"the worker for {tool} did not finish within its deadline plus "
                f"{self.grace_seconds:g} s of grace and was killed with its whole process tree",
            )
        except ProtocolError as exc:
            self.containment.kill_tree(worker.pid, worker.slot)
            return _failure(ErrorCode.WORKER_CRASHED,
                            f"the worker for {tool} broke protocol ({exc}) and was killed with its whole process tree",
                            {"reason": "protocol"})
        except OSError:  # it closed its channel while we were writing the call
            return await self._crashed(worker, tool)

    async def _forward_cancel(self, worker: WorkerHandle, cancelled: asyncio.Event, scope: asyncio.Timeout) -> None:
        await cancelled.wait()
        try:
            await worker.send({"op": "cancel", "reason": "cancelled by the client"})
        except OSError:
            pass
        limit = asyncio.get_running_loop().time() + CANCEL_GRACE_SECONDS + self.grace_seconds
        when = scope.when()
        if when is None or limit < when:
            scope.reschedule(limit)

    async def _crashed(self, worker: WorkerHandle, tool: str) -> dict[str, Any]:
        try:
            async with asyncio.timeout(EXIT_WAIT_SECONDS):
                code = await asyncio.shield(worker.exited)
        except TimeoutError:
            self.containment.kill_tree(worker.pid, worker.slot)
            return _failure(ErrorCode.WORKER_CRASHED, f"the worker for {tool} closed its channel and was killed")
        how = describe_exitcode(code)
        if self.containment.oom_killed(worker.slot):
            return _failure(ErrorCode.WORKER_OOM, f"the worker for {tool} was {how} by the out-of-memory killer")
        hint = " (the out-of-memory killer or another process)" if how == "killed by SIGKILL" else ""
        fate = self.forker.fate(worker.forkserver) if self.forker is not None else None
        if code is None:  # the forkserver reports each worker's status: say what became of it
            how = "exited"
            hint = " (its exit status was not reported)"
        if fate:
            hint = f" ({fate})"
        return _failure(
            ErrorCode.WORKER_CRASHED,
            f"the worker for {tool} {how}{hint} before reporting a result; {tool} did not complete, and the "
            "next call gets a new worker",
            {"status": how, **({"forkserver": fate} if fate else {})},
        )

    # -- clean-up ---------------------------------------------------------------------------------

    def _spawn_background(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _finish(self, worker: WorkerHandle) -> None:
        """Wait (bounded) for the worker to exit, kill whatever is left of its tree, release it."""
        try:
            try:
                async with asyncio.timeout(EXIT_WAIT_SECONDS):
                    await asyncio.shield(worker.exited)
            except TimeoutError:
                self.containment.kill_tree(worker.pid, worker.slot)
                try:
                    async with asyncio.timeout(EXIT_WAIT_SECONDS):
                        await asyncio.shield(worker.exited)
                except TimeoutError:
                    print(f"peon-supervisor: worker {worker.pid} did not exit after SIGKILL", file=sys.stderr)
            self._sweep_strays()
            await self._release(worker)
        except Exception:
            traceback.print_exc(file=sys.stderr)
        finally:
            if self.live.pop(worker.pid, None) is not None:
                self._announce(worker, started=False)
            if not worker.close():
                self._unclosed.append(worker)  # released at the next start, or in a moment
                asyncio.get_running_loop().call_later(STATUS_WAIT_SECONDS, self._close_pending)

    async def _release(self, worker: WorkerHandle) -> None:
        for delay in (0.0, *RELEASE_RETRY_SECONDS):
            if delay:
                await asyncio.sleep(delay)
            if self.containment.release(worker.slot):
                return
            self._sweep_strays()
        print(f"peon-supervisor: the cgroup of worker {worker.pid} could not be emptied", file=sys.stderr)

    def _sweep_strays(self) -> None:
        """Kill what no worker should have left: orphans reparented to the supervisor, and children
        of the forkserver that are not workers of this pool (none should exist: only the supervisor
        can ask it to fork)."""
        known = self.forker.known_pids() if self.forker is not None else set()
        sweep_orphans(known)
        forker = self.forker
        forkserver = forker.pid if forker is not None and forker.alive else None
        # A worker being started is the forkserver's child too.
        if forker is not None and forkserver and not forker.starting:
            for pid in proctree.children(forkserver):
                if pid not in self.live and proctree.state(pid) not in (None, "Z", "X"):
                    print(f"peon-supervisor: killing process {pid}, forked by the forkserver for no worker",
                          file=sys.stderr)
                    proctree.kill_tree(pid, include_root=True, timeout=5.0)

    def _close_pending(self) -> None:
        self._unclosed = [worker for worker in self._unclosed if not worker.close()]

    async def close(self) -> None:
        """Kill every worker and everything below them, stop the forkserver, wait until all are gone."""
        self._closing = True
        if self._calm is not None:
            self._calm.cancel()
        if self.job_host is not None:  # killed below with every worker; its jobs were answered already
            self.job_host._end()
        while self._ready:
            task = self._ready.popleft()
            try:
                await task
            except (ForkerGone, ToolError, Exception):
                pass
        for worker in list(self.live.values()):
            self.containment.kill_tree(worker.pid, worker.slot)
        for worker in list(self.live.values()):
            await self._finish(worker)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self.forker is not None:
            await self.forker.close()
        self._close_pending()
        sweep_orphans(set())


def _quiet(task: asyncio.Task[Any]) -> None:
    """Standby starts that fail are reported to the call that takes them; nothing to log here."""
    if not task.cancelled():
        task.exception()


def _call_message(call: dict[str, Any], deadline: Deadline, streams: bool) -> CallMessage:
    message: CallMessage = {"op": "call", "id": str(call["id"]), "tool": call["tool"], "args": call["args"],
                            "deadline": deadline.at, "approved": dict(call.get("approved") or {}),
                            "progress": bool(call.get("progress")),
                            "stream": _streaming(call.get("stream")) if streams else None}
    if call.get("trace"):
        message["trace"] = dict(call["trace"])  # the caller's trace context, for the call's commands
    return message


def _streaming(value: Any) -> OutputStreaming | None:
    """The call's output streaming mode, read from the supervisor's own call record."""
    return "live" if value == "live" else "end" if value == "end" else None
