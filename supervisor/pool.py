"""The supervisor's standby workers: started ahead of the calls, taken, put back, refilled, woken,
retired and closed — all owned here.

Promise: :meth:`WorkerPool.run` hands a call to a worker that serves nothing else meanwhile — one
waiting for a call (a standby started before the call arrived, or a worker put back after a clean
call), so the call does not wait for a process start-up — and returns exactly one outcome
(:func:`peon.supervisor.conversation.converse`: the worker's result, or an error saying how the worker
failed), or says that no worker could be started in time. The call's time starts when its worker
takes it: the wait for a worker is bounded on its own by ``limits.worker_start_seconds`` (past it the call
is answered ``worker_crashed``, saying why, and never runs), its deadline is moved by the time waited, and
a result says how long it waited (``waited_for_worker_ms``, when it waited at all). When it returns an
error, the worker and its whole tree are already dead. When it returns a worker's result, the worker
either waits for its next call (it offered to, and :func:`peon.workers.reuse.serves_again` agrees; at
most ``limits.worker_max_calls`` calls, never after a cancel) or is retired: it exits once its
channel is closed; that, its containment's release and the next standby's start happen right after
the reply, off the call's path. Calls may run at once, each in a worker of its own: a call takes the first
worker ready (a standby, or one another call put back), else the first one still starting, else starts
one. One standby is kept while the session is idle, a second while calls use workers up
or run side by side; the workers put back after calls that ran at once are kept (at most ``max_ready``
wait at a time: a further one is retired) until no call took or returned a worker for
:data:`BUSY_STANDBY_SECONDS`, then retired down to the idle standby. :meth:`WorkerPool.close` kills
every worker the pool started and stops the forkserver.

:meth:`WorkerPool.run_job` is the one entry point of a background job, which its caller asks for by
name: in cgroup containment it runs in the session's job host (:class:`~peon.supervisor.job_host.JobHostLink`:
a standby that became it on the first job, running every job at once, each in a cgroup of its own),
with the same one outcome by its deadline + grace; in process-tree containment a job takes a worker of
its own like any call.

In Erlang/OTP terms the pool supervises *temporary* children: a worker is never restarted, a failed
one is reported and replaced by a fresh standby; a worker whose calls end cleanly is *transient* in
the sense of a prefork server's worker: kept while they do, replaced after its ``worker_max_calls``-th.
A stopped forkserver is replaced as soon as a call served by a waiting worker finds it so.

Workers are started by the session's forkserver through ``multiprocessing`` (:mod:`peon.supervisor.forker`);
the supervisor watches each through a pidfd and its ``Process.sentinel``
(:class:`~peon.supervisor.worker_handle.WorkerHandle`), looks at a standby's state (stopped, zombie) as a
call takes it (:class:`peon.workers.proctree.StateWatch`), and kills trees by process tree and cgroup;
the orphans of a worker that dies are reparented to the supervisor (a subreaper) and killed here.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from peon.core.cancel import Deadline
from peon.core.errors import ErrorCode, ToolError, error_reply as _failure  # made up here: no ``op``, not from a worker
from peon.workers import proctree
from peon.workers.messages import HOST_MESSAGE, WAKE_SIGNAL, WorkerMessage
from peon.workers.reuse import serves_again

from peon.supervisor.containment import Containment, retry_release, sweep_orphans
from peon.supervisor.containment import start_time as containment_start_time
from peon.supervisor.conversation import converse
from peon.supervisor.forker import START_TIMEOUT_SECONDS, Forker, ForkerGone
from peon.supervisor.job_host import JobHostLink
from peon.supervisor.tasks import HeldTasks
from peon.supervisor.worker_handle import STATUS_WAIT_SECONDS, WorkerHandle

# Workers kept ready: one while the session is idle; two once calls use workers up (a call of a tool
# that starts processes, or one that fails) or run side by side, so back-to-back calls never wait for a
# start-up, and back to one after BUSY_STANDBY_SECONDS without such a call. Workers put back after calls
# that ran at once wait too, until BUSY_STANDBY_SECONDS pass without a call taking or returning one.
IDLE_STANDBYS = 1
BUSY_STANDBYS = 2
BUSY_STANDBY_SECONDS = 1.0
MAX_READY = 16  # workers waiting at once, unless the session says otherwise (limits.max_parallel_calls + 2)
# A call of a tool that starts processes still running this long after it took its worker has the next
# standby started meanwhile (a quick one may leave its worker for the next call, or have the standby
# started after its reply; started during every call slower than a few ms, standbys fed on the CPU a
# loaded host lacks). A background job holds its worker for its whole life: it has one started at once.
REFILL_DURING_CALL_SECONDS = 1.0
MAX_CALLS_PER_WORKER = 1000  # unless limits.worker_max_calls says otherwise
# A pool that started or answered no call for this long has a standby whose caches went cold: the
# next call wakes it (bench_read.py: in-process work is 4.8-8.5x slower after 10 ms of sleep).
WAKE_AFTER_IDLE_SECONDS = 0.01


class WorkerPool:
    def __init__(self, spawn_forker: Callable[[], Forker], containment: Containment, grace_seconds: float,
                 max_calls: int = MAX_CALLS_PER_WORKER, idle_standbys: int = IDLE_STANDBYS,
                 busy_standbys: int = BUSY_STANDBYS, on_worker: Callable[[dict[str, Any]], None] | None = None,
                 max_ready: int = MAX_READY):
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
        self.max_ready = max(max_ready, self.busy_standbys)  # workers put back beyond it are retired
        self.in_flight = 0  # workers serving a call now
        self.forker: Forker | None = None
        self.live: dict[int, WorkerHandle] = {}  # every worker not yet released
        # Workers ready for a call, the next first: standbys being started or waiting, and workers that
        # served a call and wait for the next (put back in front: their pages are their own already).
        self._ready: deque[asyncio.Future[WorkerHandle]] = deque()
        self._calm: asyncio.TimerHandle | None = None  # brings the standbys back to idle_standbys
        self._background = HeldTasks()
        self._unclosed: list[WorkerHandle] = []  # exited, but multiprocessing has no status for them yet
        self._first: asyncio.Future[WorkerHandle] | None = None  # the first standby, while the session starts
        self._closing = False
        self._last_activity = 0.0  # loop time a call last took a worker, got its reply, or woke one
        self.job_host: JobHostLink | None = None  # the worker running every background job (cgroup containment)
        self._host_start: asyncio.Task[JobHostLink] | None = None

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

    @property
    def start_seconds(self) -> float:
        """How long a call may wait for its worker (``limits.worker_start_seconds``)."""
        return self.forker.start_seconds if self.forker is not None else START_TIMEOUT_SECONDS

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
        self.standbys = self.busy_standbys
        self._arm_calm()

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

    def _put_back(self, worker: WorkerHandle) -> bool:
        """A worker that served a call and may serve another: the next call takes it (False: enough
        wait already, it is not kept). Past the idle standby, the extras are retired once calls pause."""
        if len(self._ready) >= self.max_ready:
            return False
        ready = asyncio.get_running_loop().create_future()
        ready.set_result(worker)
        self._ready.appendleft(ready)
        if len(self._ready) > self.idle_standbys:
            self._arm_calm()
        return True

    def _arm_calm(self) -> None:
        """Back to :attr:`idle_standbys` ready workers after :data:`BUSY_STANDBY_SECONDS` of no such activity."""
        if self._calm is not None:
            self._calm.cancel()
        self._calm = asyncio.get_running_loop().call_later(BUSY_STANDBY_SECONDS, self._back_to_idle)

    def _next_ready(self) -> asyncio.Future[WorkerHandle]:
        """The first worker ready to take a call, else the first one still starting (the next call's)."""
        for index, task in enumerate(self._ready):
            if task.done() and not task.cancelled() and task.exception() is None:
                del self._ready[index]
                return task
        return self._ready.popleft()

    async def take(self, until: float) -> WorkerHandle:
        """A worker that waits for a call (a standby, or one put back after a call, when one is
        ready), started by ``until`` (loop time) or :class:`ForkerGone`. Workers that died or were
        stopped while they waited are discarded."""
        loop = asyncio.get_running_loop()
        fresh_starts = 0
        while True:
            task: asyncio.Future[WorkerHandle]
            if self._ready:
                task = self._next_ready()
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
                self._background.start(self.reap(worker))
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
        task = next((ready for ready in self._ready
                     if ready.done() and not ready.cancelled() and ready.exception() is None), None)
        if task is None:
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
        refill_after = REFILL_DURING_CALL_SECONDS if starts_processes else None
        return await self._serve(call, deadline, cancelled, on_progress, on_event, on_taken, refill_after)

    async def run_job(self, call: dict[str, Any], deadline: Deadline, cancelled: asyncio.Event,
                      on_event: Callable[[WorkerMessage], None]) -> dict[str, Any]:
        """Run the background job ``call`` (its id is the job's; ``stream: "live"``): in the session's
        job host (started if there is none) where :attr:`hosts_jobs`, else in a worker of its own, the
        next standby started at once since the job holds its worker for its whole life. The same
        promise as :meth:`run`: one outcome by the deadline + grace (+ the cancel grace)."""
        if self.hosts_jobs:
            return await self._run_hosted(call, deadline, cancelled, on_event)
        return await self._serve(call, deadline, cancelled, _no_progress, on_event, None, refill_after=0.0, job=True)

    async def _serve(self, call: dict[str, Any], deadline: Deadline, cancelled: asyncio.Event,
                     on_progress: Callable[[dict[str, Any]], Awaitable[None]],
                     on_event: Callable[[WorkerMessage], None] | None, on_taken: Callable[[], None] | None,
                     refill_after: float | None, job: bool = False) -> dict[str, Any]:
        """One call in one worker, taken and then served again, retired or killed (see :meth:`run`);
        the next standby is started ``refill_after`` seconds into the call (None: not during it). A
        background ``job`` is not counted among the calls in flight (it has its standby already)."""
        loop = asyncio.get_running_loop()
        tool = call["tool"]
        start_seconds = self.start_seconds
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
        calls = 0 if job else 1
        self.in_flight += calls
        if self.in_flight > 1 and calls:  # calls side by side: the next one finds a worker waiting too
            self._used_up()
            if len(self._ready) < self.standbys:
                loop.call_soon(self._replenish)
        refill = loop.call_later(refill_after, self._refill) if refill_after is not None else None
        try:
            reply = await converse(worker, call, deadline, cancelled, on_progress, on_event,
                                   containment=self.containment, grace_seconds=self.grace_seconds,
                                   fate=self._forkserver_fate)
        except BaseException:  # cancelled (the session is closing) or a bug: the worker goes too
            self.containment.kill_tree(worker.pid, worker.slot)
            self._background.start(self.reap(worker))
            raise
        finally:
            self.in_flight -= calls
            self._last_activity = loop.time()
            if refill is not None:
                refill.cancel()
        if reply.get("op") == "result":  # reported by the worker, which swept its own tree first
            worker.calls += 1
            offered = reply.pop("reuse", None) is True
            if (offered and worker.calls < self.max_calls and not cancelled.is_set() and not self._closing
                    and serves_again(reply) and self._put_back(worker)):
                worker.call_id = None
                loop.call_soon(self._check_forkserver)
                return reply
            self._used_up()
            loop.call_soon(self._after_call, worker)  # after the reply has gone out
        else:
            self._used_up()
            await self.reap(worker)  # the worker failed: nothing of it may remain when we answer
            loop.call_soon(self._replenish)
        waited_ms = int(waited * 1000)
        if waited_ms and reply.get("ok") and isinstance(reply.get("value"), dict):
            reply["value"] = {**reply["value"], "waited_for_worker_ms": waited_ms}
        return reply

    def _forkserver_fate(self, forkserver: int | None) -> str | None:
        return self.forker.fate(forkserver) if self.forker is not None else None

    # -- background jobs ----------------------------------------------------------------------------

    @property
    def hosts_jobs(self) -> bool:
        """Whether background jobs run in the job host: where each can have a cgroup of its own, which
        attributes every process of a job to it (a daemon that left its process group too). In
        process-tree containment an orphan cannot be attributed to one of several jobs, so each job
        keeps a worker of its own there."""
        return self.containment.forkserver_cgroup is not None

    async def _run_hosted(self, call: dict[str, Any], deadline: Deadline, cancelled: asyncio.Event,
                          on_event: Callable[[WorkerMessage], None]) -> dict[str, Any]:
        start_seconds = self.start_seconds
        asked = time.monotonic()
        try:
            host = await self._job_host(asyncio.get_running_loop().time() + start_seconds)
        except ForkerGone as exc:
            return _failure(ErrorCode.WORKER_CRASHED,
                            f"{call['tool']} did not run: no job host could be started for it within "
                            f"limits.worker_start_seconds ({start_seconds:g} s): {exc}", {"reason": "no_worker"})
        deadline.at += time.monotonic() - asked  # the job's time starts with its host
        return await host.run(call, deadline, cancelled, on_event)

    async def _job_host(self, until: float) -> JobHostLink:
        """The session's job host, fit for a job: one found stopped or gone as a job comes (an idle host
        stopped by a command, say) is ended and replaced, as a stopped standby is before it takes a call."""
        while True:
            host = self.job_host
            if host is not None and not host.gone:
                why = host.unfit()
                if why is None:
                    return host
                print(f"peon-supervisor: the job host (pid {host.worker.pid}) {why} before a job was given to it; "
                      "it is killed and replaced", file=sys.stderr)
                host.end_unfit(why)
                continue
            if self._host_start is None or self._host_start.done():
                self._host_start = asyncio.get_running_loop().create_task(self._start_job_host(until))
            await asyncio.shield(self._host_start)

    async def _start_job_host(self, until: float) -> JobHostLink:
        """A standby becomes the job host (no start-up of its own); the next standby is started."""
        worker = await self.take(until)
        asyncio.get_running_loop().call_soon(self._replenish)
        worker.call_id = "job host"
        try:
            await worker.channel.send(HOST_MESSAGE)
        except OSError:
            pass  # it died as it was taken: its reader says so to the first job
        self.job_host = JobHostLink(worker, self.containment, self.grace_seconds, self.reap, self._background,
                                    self._host_ended)
        return self.job_host

    def _host_ended(self, host: JobHostLink) -> None:
        if self.job_host is host:
            self.job_host = None

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
        self._background.start(self.reap(worker))
        self._replenish()

    # -- clean-up ---------------------------------------------------------------------------------

    async def reap(self, worker: WorkerHandle) -> None:
        """Wait (bounded) for the worker to exit, kill whatever is left of its tree, release it."""
        try:
            try:
                await worker.wait_exit()
            except TimeoutError:
                self.containment.kill_tree(worker.pid, worker.slot)
                try:
                    await worker.wait_exit()
                except TimeoutError:
                    print(f"peon-supervisor: worker {worker.pid} did not exit after SIGKILL", file=sys.stderr)
            self._sweep_strays()
            if not await retry_release(lambda: self.containment.release(worker.slot), self._sweep_strays):
                print(f"peon-supervisor: the cgroup of worker {worker.pid} could not be emptied", file=sys.stderr)
        except Exception:
            traceback.print_exc(file=sys.stderr)
        finally:
            if self.live.pop(worker.pid, None) is not None:
                self._announce(worker, started=False)
            if not worker.close():
                self._unclosed.append(worker)  # released at the next start, or in a moment
                asyncio.get_running_loop().call_later(STATUS_WAIT_SECONDS, self._close_pending)

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
            self.job_host.end()
        while self._ready:
            task = self._ready.popleft()
            try:
                await task
            except (ForkerGone, ToolError, Exception):
                pass
        for worker in list(self.live.values()):
            self.containment.kill_tree(worker.pid, worker.slot)
        for worker in list(self.live.values()):
            await self.reap(worker)
        await self._background.wait_all()
        if self.forker is not None:
            await self.forker.close()
        self._close_pending()
        sweep_orphans(set())


def _quiet(task: asyncio.Task[Any]) -> None:
    """Standby starts that fail are reported to the call that takes them; nothing to log here."""
    if not task.cancelled():
        task.exception()


async def _no_progress(message: dict[str, Any]) -> None:
    """A background job sends no progress (its output is streamed instead)."""
