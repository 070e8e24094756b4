"""The supervisor's link to the session's job host: the one worker that runs every background job of
the session, in cgroup containment (:mod:`peon.workers.job_host` is the host's own side).

Promise: :meth:`JobHostLink.run` gives one job to the host and returns exactly one outcome for it by its
deadline + the worker grace (+ the cancel grace once a cancel was forwarded), whatever the host does:
the job's ``result``, or an error saying why the host failed. The supervisor owns the host and decides
its fate; the host may crash, and is trusted only as a worker is. Its channel is read by a task of
the link: each job's ``output``, ``spawned`` and ``input_closed`` go to that job's callback, its input
goes to the host as it is written, its ``result`` to its run.
A protocol break, the host's death, a stop (seen within :data:`JOB_HOST_WATCH_SECONDS` while it runs
jobs) or a job left unanswered past its deadline + grace end it (:meth:`JobHostLink.fail`): it is killed
with its whole tree and every running job's cgroup, and each job it ran ends failed with a stable code
and the reason (``details.reason`` ``protocol``, ``job_host``, ``job_host_stopped``,
``job_host_hung``); the next background job gets a new host. A job is never handed to a host that is
stopped or gone (:meth:`JobHostLink.unfit`, looked at as the job is given): such a host is ended as
above, and the job goes to a new one, as a stopped standby is replaced before it takes a call. It is
retired (its channel closed: it exits) :data:`JOB_HOST_LINGER_SECONDS` after its last job ended. In
OTP terms it is a ``temporary`` child that supervises its jobs: never restarted, and its failure is
each job's, never the session's.
"""

from __future__ import annotations

import asyncio
import sys
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from peon.core.cancel import Deadline
from peon.core.errors import ErrorCode, error_reply as _failure  # made up here: no ``op``, not from a worker
from peon.workers import cgroup
from peon.workers.channel import ChannelError
from peon.workers.messages import CancelMessage, ProtocolError, WorkerMessage, parse_host_message
from peon.workers.reaper import describe_exitcode

from peon.supervisor.containment import Containment, retry_release
from peon.supervisor.conversation import CANCEL_REASON, call_message, forward_cancel, forward_input, send_quietly
from peon.supervisor.tasks import HeldTasks
from peon.supervisor.worker_handle import WorkerHandle

# The job host exits this long after its last job ended: a job started soon after another one finds
# it, and a session with no job running pays for no process.
JOB_HOST_LINGER_SECONDS = 5.0
JOB_HOST_WATCH_SECONDS = 0.5  # how often a job host running jobs is looked at (stopped by someone?)


@dataclass(eq=False)
class JobHostLink:
    """The supervisor's handle on the job host: its worker, the jobs it runs, and the reading of its channel.

    ``reap`` waits (bounded) for a worker to exit, kills what is left of its tree and releases it;
    ``background`` holds the clean-ups that go on after the link let the host go; ``on_end`` is told
    once the link no longer stands for the session's job host."""

    worker: WorkerHandle
    containment: Containment
    grace_seconds: float
    reap: Callable[[WorkerHandle], Coroutine[Any, Any, None]]
    background: HeldTasks
    on_end: Callable[[JobHostLink], None]
    jobs: dict[str, tuple[asyncio.Future[dict[str, Any]], Callable[[WorkerMessage], None]]] = field(
        default_factory=dict, init=False)
    gone: bool = field(default=False, init=False)
    _retire: asyncio.TimerHandle | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read())
        self._watch = loop.create_task(self._watch_state())

    async def run(self, call: dict[str, Any], deadline: Deadline, cancelled: asyncio.Event,
                  on_event: Callable[[WorkerMessage], None]) -> dict[str, Any]:
        """Run the background job ``call`` (its id is the job's) in the host: one outcome by the
        deadline + grace (+ the cancel grace after ``cancelled``)."""
        loop = asyncio.get_running_loop()
        tool, job_id = call["tool"], str(call["id"])
        result = self._add(job_id, on_event)
        try:
            await self.worker.send(call_message(call, deadline, True))
        except OSError:
            pass  # the host is gone: its reader ends the job
        cancel: CancelMessage = {"op": "cancel", "id": job_id, "reason": CANCEL_REASON}
        try:
            async with asyncio.timeout_at(deadline.at + self.grace_seconds) as scope:
                cancel_watch = loop.create_task(forward_cancel(self.worker, cancel, cancelled, scope,
                                                               self.grace_seconds))
                inputs = forward_input(self.worker, call.get("inbox"))
                try:
                    return await asyncio.shield(result)
                finally:
                    cancel_watch.cancel()
                    if inputs is not None:
                        inputs.cancel()
        except TimeoutError:
            if not result.done():
                self.fail(ErrorCode.WORKER_HUNG,
                          f"the job host did not end {tool} job {job_id} within its deadline plus "
                          f"{self.grace_seconds:g} s of grace; it was killed with its whole process tree and "
                          "every job it ran", {"reason": "job_host_hung"})
            return result.result()
        except asyncio.CancelledError:  # the session is closing: the host is killed with the pool
            if not result.done() and not self.gone:  # its result, when it comes, is taken and dropped
                self.background.start(send_quietly(self.worker, cancel))
            raise

    def _add(self, job_id: str, on_event: Callable[[WorkerMessage], None]) -> asyncio.Future[dict[str, Any]]:
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
                elif message["op"] in ("output", "spawned", "input_closed"):
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
            how = describe_exitcode(await self.worker.wait_exit())
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

    def unfit(self) -> str | None:
        """Why no job may be handed to the host now — stopped (by another process) or gone — or None.
        One ``pread`` of its ``stat`` file."""
        state = self.worker.watch.state() if self.worker.watch is not None else None
        if self.worker.exited.done() or state in (None, "Z", "X", "x"):
            return "exited"
        if state in ("T", "t"):
            return "stopped"
        return None

    def end_unfit(self, why: str) -> None:
        """The host was found ``why`` (:meth:`unfit`) as a job was to be given to it: it is killed with
        its whole tree like a failed host, and whatever jobs it still ran end with the reason; the job
        that was to be given goes to a new host (it never reached this one)."""
        if why == "stopped":
            self.fail(ErrorCode.WORKER_HUNG,
                      "the job host was stopped (by another process) while it ran this job; it was killed "
                      "with every job it ran, and the next background job gets a new job host",
                      {"reason": "job_host_stopped"})
        else:
            self.fail(ErrorCode.WORKER_CRASHED,
                      "the job host (the worker running the session's background jobs) exited; the job did "
                      "not complete, and the next background job gets a new job host", {"reason": "job_host"})

    def fail(self, code: ErrorCode, message: str, details: dict[str, Any]) -> None:
        """Kill the host with its whole tree and every running job's cgroup; every job it ran ends
        with this error."""
        if self.gone:
            return
        self.end()
        self.containment.kill_tree(self.worker.pid, self.worker.slot)
        ids = list(self.jobs)
        self._kill_job_cgroups(ids)
        for result, _ in self.jobs.values():
            if not result.done():
                result.set_result(_failure(code, message, details))
        self.jobs.clear()
        self.background.start(self.reap(self.worker))
        self.background.start(self._remove_job_cgroups(ids))

    def retire(self) -> None:
        """No job ran for :data:`JOB_HOST_LINGER_SECONDS`: the host exits once its channel is closed."""
        if self.jobs or self.gone:
            return
        self.end()
        self.worker.channel.close()
        self.background.start(self.reap(self.worker))

    def end(self) -> None:
        """It stands for the session's job host no more: its channel is not read and its state not
        watched any longer. Retiring or killing its worker is left to the caller."""
        self.gone = True
        self.on_end(self)
        if self._retire is not None:
            self._retire.cancel()
        self._watch.cancel()
        if self._reader is not asyncio.current_task():
            self._reader.cancel()

    # -- the jobs' cgroups ---------------------------------------------------------------------------

    def _job_cgroups(self, job_ids: list[str]) -> list[cgroup.Cgroup]:
        beside = self.containment.forkserver_cgroup  # a job's cgroup is beside the workers' and the forkserver's
        return [cgroup.Cgroup(cgroup.job_cgroup_path(Path(beside), job_id)) for job_id in job_ids] if beside else []

    def _kill_job_cgroups(self, job_ids: list[str]) -> None:
        """``cgroup.kill`` of these jobs' cgroups: what of them left the host's tree dies too."""
        for group in self._job_cgroups(job_ids):
            try:
                group.kill()
            except OSError:
                pass

    async def _remove_job_cgroups(self, job_ids: list[str]) -> None:
        for group in self._job_cgroups(job_ids):
            if not await retry_release(partial(_removed, group)):
                print(f"peon-supervisor: the job cgroup {group.path} could not be emptied", file=sys.stderr)


def _removed(group: cgroup.Cgroup) -> bool:
    """Whether ``group`` is gone now (an error counts as not yet)."""
    try:
        return group.remove_now()
    except OSError:
        return False
