"""The session's jobs: every call of a tool that keeps its output (``bash``, the agents), and the
background jobs among them — supervised children with a lifetime, owned here.

Promises:

* every such call is a job with a session-unique id (``job-1``, ``job-2``...); what its command writes
  goes, in order, into the output store (:class:`peon.core.output.store.OutputStore`, bounded by
  ``jobs.output_buffer_bytes`` per job and ``jobs.session_output_bytes`` per session, the oldest
  evicted first; a job's output past :data:`peon.core.output.store.SPILL_BYTES` is kept in an unnamed
  file in the session's state directory, not in this process's memory); an ``output`` message whose
  offset is not the next byte is a protocol error (the worker is killed);
* a background job runs through the pool (:meth:`peon.supervisor.pool.WorkerPool.run`: in the session's
  job host, each job in a cgroup of its own, in cgroup containment; in a worker of its own otherwise),
  in a task of its own: the serial call executor never waits on it. At most ``jobs.max_running`` run
  at once (a call beyond is ``job_limit_reached``); each is killed at its deadline
  (``jobs.max_lifetime_seconds`` unless its ``timeout_seconds`` is shorter);
* :meth:`JobTable.stop` cancels through the pool's own cancel path (``cancel`` naming the job: TERM to
  its group, 2 s, KILL, every other process of the job), and :meth:`JobTable.close` does so for every
  running job and returns when they have all been answered; the pool's close kills whatever is left. A
  supervisor that dies takes its jobs along: the job host (or their workers) get the parent-death
  signal through the forkserver and the session's cgroup is killed;
* a job that ended without its command's result (its host or worker failed) keeps the error that
  says why (``error`` in ``job_list``);
* at most :data:`MAX_JOB_RECORDS` job records are kept; past that, the oldest ended job is forgotten
  (its output too). A record holds its job's state and output ring, not its call's result: what the
  supervisor holds of a session's output stays within the store's bounds however many calls it makes.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from peon.core.errors import ErrorCode, ToolError
from peon.core.jobs import JobInfo, JobState
from peon.core.output.store import OutputRing, OutputStore, Page, open_spill_file
from peon.workers.messages import OutputMessage, ProtocolError, WorkerMessage
from peon.workers.runner import CANCEL_GRACE_SECONDS

MAX_JOB_RECORDS = 1024
STOP_MARGIN_SECONDS = 5.0  # past the cancel grace and the worker grace, how long stop waits for the pool


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class JobRecord:
    """What a session keeps of a job once it has ended: what ``job_list`` and ``job_output`` read, and
    nothing to wait on. A session keeps up to :data:`MAX_JOB_RECORDS`; a running :class:`Job`'s four
    asyncio events made a record about 5 KiB (1024 records: +5 MiB of supervisor RSS), this is about
    0.55 KiB with its ring (compacted once the job has ended: no deque, :meth:`OutputRing.compact`)."""

    id: str
    call_id: str
    tool: str
    command: str | None
    background: bool
    ring: OutputRing
    started_at: float = field(default_factory=time.time)
    state: JobState = "running"
    exit_code: int | None = None
    signal: str | None = None
    timed_out: bool = False
    ended_at: float | None = None
    error: dict[str, Any] | None = None  # why it ended without its command's result (its host failed...)

    def record(self) -> JobRecord:
        """This job's record, without what only running needed."""
        return JobRecord(*(getattr(self, f.name) for f in fields(JobRecord)))


@dataclass
class Job(JobRecord):
    """A job while it runs (and for whoever still holds it after)."""

    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    spawned: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    # The result, held only while a background call waits to answer with it (a job record outlives
    # its call: holding every result would keep up to MAX_JOB_RECORDS outputs beside the store's).
    reply: dict[str, Any] | None = None
    awaiting_reply: bool = False
    task: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class JobTable:
    """Implements :class:`peon.core.jobs.JobsAccess` for the job tools."""

    def __init__(self, jobs_config: Any, grace_seconds: float, spill_dir: Path | None = None):
        spill = (lambda: open_spill_file(spill_dir)) if spill_dir is not None else None
        self.store = OutputStore(int(jobs_config.output_buffer_bytes), int(jobs_config.session_output_bytes), spill)
        self.max_running = int(jobs_config.max_running)
        self.clean_output = bool(jobs_config.clean_output)
        self.grace_seconds = grace_seconds
        self.jobs: OrderedDict[str, Job | JobRecord] = OrderedDict()
        self._counter = 0

    # -- the supervisor's side ----------------------------------------------------------------------

    def running_background(self) -> int:
        return sum(1 for job in self.jobs.values() if job.background and job.state == "running")

    def check_capacity(self) -> None:
        running = self.running_background()
        if running >= self.max_running:
            raise ToolError(ErrorCode.JOB_LIMIT_REACHED,
                            f"the session already runs {running} background jobs; jobs.max_running is "
                            f"{self.max_running} (stop one with job_stop, or wait for one to end)",
                            {"limit": "jobs.max_running", "value": self.max_running})

    def new(self, call_id: str, tool: str, command: str | None, background: bool) -> Job:
        self._counter += 1
        job_id = f"job-{self._counter}"
        job = Job(job_id, call_id, tool, command, background, self.store.open(job_id))
        self.jobs[job_id] = job
        self._forget_old()
        return job

    def _forget_old(self) -> None:
        while len(self.jobs) > MAX_JOB_RECORDS:
            oldest = next((job for job in self.jobs.values() if job.state != "running"), None)
            if oldest is None:
                return
            del self.jobs[oldest.id]
            self.store.forget(oldest.id)

    def on_event(self, job: Job) -> Callable[[WorkerMessage], None]:
        """The pool's callback for the job's ``output`` and ``spawned`` messages."""

        def handle(message: WorkerMessage) -> None:
            if message["op"] == "spawned":
                job.spawned.set()
                return
            output: OutputMessage = message  # type: ignore[assignment]
            if job.ring.total == 0 and output["offset"] > 0 and not job.background:
                # a foreground call's worker sends only the newest bytes the store would keep
                job.ring.skip_to(output["offset"])
            if output["offset"] != job.ring.total:
                raise ProtocolError(f"an output message starts at byte {output['offset']}, not at byte "
                                    f"{job.ring.total} where the job's output continues")
            self.store.append(job.id, output["data"])
            job.notify()

        return handle

    def finish(self, job: Job, reply: dict[str, Any]) -> None:
        job.reply = reply if job.awaiting_reply else None
        value = reply.get("value") if reply.get("ok") else None
        if isinstance(value, dict):
            job.exit_code, job.signal = value.get("exit_code"), value.get("signal")
            job.timed_out = bool(value.get("timed_out"))
            killed = job.timed_out or bool(value.get("cancelled")) or value.get("limit_exceeded") is not None
            job.state = "killed" if killed else "exited"
        else:
            job.state = "killed"
            error = reply.get("error")
            job.error = dict(error) if isinstance(error, dict) else None
        job.ended_at = time.time()
        job.ring.compact()  # nothing more is appended: its chunks in a tuple, not a deque
        job.ended.set()
        job.notify()
        if job.id in self.jobs:  # those who hold the job go on with it; the table keeps its record
            self.jobs[job.id] = job.record()

    async def close(self) -> None:
        """Cancel every running job and wait until each has been answered."""
        running = [job for job in self.jobs.values()
                   if isinstance(job, Job) and job.task is not None and not job.task.done()]
        for job in running:
            job.cancelled.set()
        if running:
            await asyncio.wait([job.task for job in running if job.task is not None],
                               timeout=CANCEL_GRACE_SECONDS + self.grace_seconds + STOP_MARGIN_SECONDS)

    def start_background(self, job: Job, run: Callable[[], Awaitable[dict[str, Any]]],
                         ended: Callable[[Job], None]) -> None:
        async def supervise() -> None:
            try:
                reply = await run()
            except asyncio.CancelledError:
                reply = {"ok": False, "error": ToolError(ErrorCode.SESSION_CLOSED,
                                                         "the session closed while the job ran").to_dict()}
            except Exception as exc:  # a bug here must end one job, not the session
                reply = {"ok": False, "error": ToolError(ErrorCode.TOOL_FAILED,
                                                         f"internal error while running the job: {exc}").to_dict()}
            self.finish(job, reply)
            ended(job)

        job.task = asyncio.get_running_loop().create_task(supervise())

    # -- JobsAccess ---------------------------------------------------------------------------------

    def _job(self, job_id: str) -> Job | JobRecord:
        job = self.jobs.get(job_id)
        if job is None:
            raise ToolError(ErrorCode.UNKNOWN_JOB, f"this session has no job {job_id!r} (job_list lists its jobs)",
                            {"job_id": job_id})
        return job

    def info(self, job_id: str) -> JobInfo:
        job = self._job(job_id)
        return JobInfo(job.id, job.tool, job.command, job.background, job.state, job.exit_code, job.signal,
                       job.timed_out, _iso(job.started_at) or "", _iso(job.ended_at), job.ring.total,
                       job.ring.retained, job.ring.start, job.error)

    def list(self) -> list[JobInfo]:
        return [self.info(job_id) for job_id in self.jobs]

    def read(self, job_id: str, offset: int, limit: int) -> Page:
        return self.store.read(self._job(job_id).id, offset, limit)

    async def wait(self, job_id: str, offset: int, seconds: float) -> None:
        job = self._job(job_id)
        deadline = asyncio.get_running_loop().time() + seconds
        while isinstance(job, Job) and job.state == "running" and job.ring.total <= offset:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            try:
                async with asyncio.timeout(remaining):
                    await job._changed.wait()
            except TimeoutError:
                return

    async def stop(self, job_id: str) -> JobInfo:
        job = self._job(job_id)
        if isinstance(job, Job) and job.state == "running" and job.task is not None:
            job.cancelled.set()
            await asyncio.wait([job.task], timeout=CANCEL_GRACE_SECONDS + self.grace_seconds + STOP_MARGIN_SECONDS)
        return self.info(job_id)
