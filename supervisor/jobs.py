"""The session's jobs: every call of a tool that keeps its output (``bash``, the agents), and the
background jobs among them — supervised children with a lifetime, whose whole life is owned here.

Promises:

* a job is created, started, fed its output, stopped, ended and audited here and nowhere else; the
  calls ask :class:`JobTable` (:meth:`~JobTable.run_foreground`, :meth:`~JobTable.start_background`,
  and the job tools through :class:`peon.core.jobs.JobsAccess`), and the pool runs what it is given;
* every such call is a job with a session-unique id (``job-1``, ``job-2``...); what its command writes
  goes, in order, into the output store (:class:`peon.core.output.store.OutputStore`, bounded by
  ``jobs.output_buffer_bytes`` per job and ``jobs.session_output_bytes`` per session, the oldest
  evicted first; a job's output past :data:`peon.core.output.store.SPILL_BYTES` is kept in an unnamed
  file in the session's state directory, not in this process's memory); an ``output`` message whose
  offset is not the next byte is a protocol error (the worker is killed);
* a foreground job runs through the pool's call entry point (:meth:`peon.supervisor.pool.WorkerPool.run`)
  and ends with its call, answered with its ``job_id``; a background job runs through the pool's job
  entry point (:meth:`~peon.supervisor.pool.WorkerPool.run_job`: in the session's job host, each job in
  a cgroup of its own, in cgroup containment; in a worker of its own otherwise), in a task of its own:
  its call is answered once its command has started (``yield_seconds`` later at most, or at its end if
  that comes first), and no call waits on the job after that. At most ``jobs.max_running`` run at
  once (a call beyond is ``job_limit_reached``, checked before anyone is asked to approve it); each is
  killed at its deadline (``jobs.max_lifetime_seconds`` unless its ``timeout_seconds`` is shorter);
* with auto-yield (``limits.yield_after_seconds``, :meth:`JobTable.run_yielding`) a foreground job still
  running that long after its worker took it, while a background job may start, is answered with its
  output so far and becomes a background job in place — same worker, same deadline — audited from then
  on like one; until then it is its call's;
* a background job whose command started gets a ``job_started`` audit line as it starts and a
  ``job_ended`` line when it ends, in that order, through the audit callable the table was given (the
  session's audit log keeps either line when it cannot take it then, and writes it once it can:
  :data:`peon.supervisor.approval.audit.KEPT_EVENTS`);
* :meth:`JobTable.stop` cancels through the pool's own cancel path (``cancel`` naming the job: TERM to
  its group, 2 s, KILL, every other process of the job), and :meth:`JobTable.close` does so for every
  running job and returns when they have all been answered; the pool's close kills whatever is left. A
  supervisor that dies takes its jobs along: the job host (or their workers) get the parent-death
  signal through the forkserver and the session's cgroup is killed;
* a job that ended without its command's result (its host or worker failed) keeps the error that
  says why (``error`` in ``job_list``);
* a background job that takes input (``tty`` or ``stdin: "pipe"``) is written to through
  :meth:`JobTable.write` — its input side is :mod:`peon.supervisor.job_io`'s — and its writes go to the
  worker or job host that runs it in order, beside the call (the call record's ``inbox``);
* at most :data:`MAX_JOB_RECORDS` job records are kept; past that, the oldest ended job is forgotten
  (its output too). A record holds its job's state and output ring, not its call's result: what the
  supervisor holds of a session's output stays within the store's bounds however many calls it makes.

In OTP terms a background job is a ``temporary`` child: never restarted, its end recorded, not propagated.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peon.core.cancel import Deadline
from peon.core.errors import ErrorCode, ToolError, error_reply
from peon.core.jobs import InputState, JobInfo, JobState
from peon.core.output.store import OutputRing, OutputStore, Page, open_spill_file
from peon.core.output.terminal import clean_terminal_text
from peon.core.output.truncation import HeadTail
from peon.workers.messages import OutputMessage, ProtocolError, WorkerMessage
from peon.workers.runner import CANCEL_GRACE_SECONDS

from peon.supervisor import job_io
from peon.supervisor.tasks import first

if TYPE_CHECKING:
    from peon.supervisor.pool import WorkerPool

MAX_JOB_RECORDS = 1024
STOP_MARGIN_SECONDS = 5.0  # past the cancel grace and the worker grace, how long stop waits for the pool
YIELD_RETRY_SECONDS = 1.0  # a call due to yield while jobs.max_running run looks again this often

# Writes a job's audit line: the event (``job_started``, ``job_ended``) and the job's facts
# (:meth:`peon.core.jobs.JobInfo.to_dict` plus ``call_id``).
JobAudit = Callable[[str, dict[str, Any]], object]


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
    screen_size: tuple[int, int] | None = None  # a terminal job's (rows, cols)

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
    io: job_io.JobIO | None = None  # its input side, when it takes input
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class JobTable:
    """The session's jobs, and the one owner of each job's life; implements
    :class:`peon.core.jobs.JobsAccess` for the job tools.

    ``pool`` runs the jobs (none: the table only records, as a test's does); ``audit`` writes a
    background job's audit lines (:data:`JobAudit`); ``output_limit`` bounds the output a background
    call's answer carries while its job runs (``limits.max_output_bytes``)."""

    def __init__(self, jobs_config: Any, grace_seconds: float, spill_dir: Path | None = None, *,
                 pool: WorkerPool | None = None, audit: JobAudit | None = None, output_limit: int = 65536):
        spill = (lambda: open_spill_file(spill_dir)) if spill_dir is not None else None
        self.store = OutputStore(int(jobs_config.output_buffer_bytes), int(jobs_config.session_output_bytes), spill)
        self.max_running = int(jobs_config.max_running)
        self.clean_output = bool(jobs_config.clean_output)
        self.grace_seconds = grace_seconds
        self.pool = pool
        self.audit = audit
        self.output_limit = output_limit
        self.jobs: OrderedDict[str, Job | JobRecord] = OrderedDict()
        # Told of a background job's end before its job_ended line, which carries what it returns
        # (the job's checkpointed changes: peon.supervisor.checkpointing).
        self.on_background_end: Callable[[str], Awaitable[dict[str, Any] | None]] | None = None
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

    def _running_pool(self) -> WorkerPool:
        assert self.pool is not None, "this job table was given no pool to run jobs in"
        return self.pool

    async def run_foreground(self, call: dict[str, Any], deadline: Deadline, cancelled: asyncio.Event,
                             on_progress: Callable[[dict[str, Any]], Awaitable[None]],
                             on_taken: Callable[[], None]) -> dict[str, Any]:
        """Run ``call`` (the supervisor's record of a call of a tool that keeps its output) as a job of its
        own in a worker, its output sent to the store at the command's end; the call's reply, with the
        job's ``job_id`` and ``output_retained_bytes`` when it has a value. The job ends with the call,
        also when the call is torn down."""
        job = self.new(str(call["id"]), call["tool"], command_of(call["args"]), background=False)
        reply: dict[str, Any] = error_reply(ErrorCode.TOOL_FAILED, f"{call['tool']} did not complete")
        try:
            reply = await self._running_pool().run({**call, "stream": "end"}, deadline, cancelled, on_progress,
                                                   self.on_event(job), on_taken, starts_processes=True)
        finally:
            if not job.ended.is_set():
                self.finish(job, reply)  # also when the call is torn down: the job is not left running
        if reply.get("ok") and isinstance(reply.get("value"), dict):
            reply = {**reply, "value": {**reply["value"], "job_id": job.id,
                                        "output_retained_bytes": job.ring.retained}}
        return reply

    async def start_background(self, call: dict[str, Any], deadline: Deadline,
                               cancelled: asyncio.Event) -> dict[str, Any]:
        """Start ``call`` as a background job and answer it once its command has started (after
        ``yield_seconds`` more, or at its end if that comes first), with its ``job_id``; the job goes on
        in a task of its own. ``cancelled`` is the call's cancel: while the call waits, it stops the job."""
        args = call["args"]
        job = self.new(str(call["id"]), call["tool"], command_of(args), background=True)
        job.awaiting_reply = True  # until this call is answered: a job that ends by then answers it
        job.io = job_io.job_io_for(call)
        job.screen_size = (job.io.rows, job.io.cols) if job.io is not None and job.io.kind == "tty" else None
        message = {**call, "id": job.id, "progress": False, "stream": "live",
                   "inbox": job.io.inbox if job.io is not None else None}
        job.task = asyncio.get_running_loop().create_task(self._supervise(job, message, deadline))
        try:
            await first(job.spawned.wait(), job.ended.wait(), cancelled.wait())
            if cancelled.is_set() and not job.ended.is_set():
                await self.stop(job.id)
            wait = float(args.get("yield_seconds") or 0.0)
            if wait > 0 and not job.ended.is_set():
                await first(job.ended.wait(), cancelled.wait(), asyncio.sleep(min(wait, deadline.remaining())))
        finally:
            reply, job.reply, job.awaiting_reply = job.reply, None, False
        if job.ended.is_set() and reply is not None:
            if not reply.get("ok"):
                return {k: v for k, v in reply.items() if k in ("ok", "error")}
            value = reply.get("value") or {}
            return {"ok": True, "value": {**value, "job_id": job.id, "background": True, "state": job.state,
                                          "output_retained_bytes": job.ring.retained}}
        return {"ok": True, "value": self._running_value(job, float(deadline.at - time.monotonic()))}

    async def run_yielding(self, call: dict[str, Any], deadline: Deadline, cancelled: asyncio.Event,
                           on_progress: Callable[[dict[str, Any]], Awaitable[None]], on_taken: Callable[[], None],
                           after: float) -> dict[str, Any]:
        """:meth:`run_foreground` with auto-yield (``limits.yield_after_seconds``): a command still running
        ``after`` seconds after its worker took it, while a background job may start (``jobs.max_running``),
        is answered with its output so far and its ``job_id`` (``yielded``), and goes on as a background
        job under the same deadline, in the same worker — ``job_output`` collects it, ``job_stop`` and the
        session's close end it, its ``job_started`` and ``job_ended`` lines are audited. Its output is
        streamed as it comes (its worker then serves no other call). Until it yields it is the call's:
        the call's cancel stops it, its progress goes to ``on_progress``, and one that ends first is
        answered as :meth:`run_foreground` answers."""
        job = self.new(str(call["id"]), call["tool"], command_of(call["args"]), background=False)
        job.awaiting_reply = True  # until the call is answered: a job that ends by then answers it
        taken, yielded = asyncio.Event(), False

        def take() -> None:
            taken.set()
            on_taken()

        async def progress(message: dict[str, Any]) -> None:
            if not yielded:  # the call is answered: nobody waits for its progress
                await on_progress(message)

        async def run() -> None:
            reply = error_reply(ErrorCode.TOOL_FAILED, f"{call['tool']} did not complete")
            try:
                reply = await self._running_pool().run({**call, "stream": "live"}, deadline, job.cancelled, progress,
                                                       self.on_event(job), take, starts_processes=True)
            except asyncio.CancelledError:
                reply = error_reply(ErrorCode.SESSION_CLOSED, "the session closed while the job ran")
            except Exception as exc:  # a bug here must end one job, not the session
                reply = error_reply(ErrorCode.TOOL_FAILED, f"internal error while running the job: {exc}")
            finally:
                self.finish(job, reply)
                if yielded:
                    self._audit("job_ended", job)

        job.task = asyncio.get_running_loop().create_task(run())
        try:
            await first(taken.wait(), job.ended.wait(), cancelled.wait())
            if taken.is_set() and not job.ended.is_set():
                await first(job.ended.wait(), cancelled.wait(), asyncio.sleep(after))
            while not job.ended.is_set() and not cancelled.is_set() and self.running_background() >= self.max_running:
                await first(job.ended.wait(), cancelled.wait(), asyncio.sleep(YIELD_RETRY_SECONDS))
            if not job.ended.is_set() and not cancelled.is_set():
                yielded, job.background = True, True
                self._audit("job_started", job)
                return {"ok": True, "value": {**self._running_value(job, float(deadline.at - time.monotonic())),
                                              "yielded": True}}
            if not job.ended.is_set():  # the call was cancelled: so is its job, answered at its end
                job.cancelled.set()
            await job.ended.wait()
        finally:
            if not yielded and not job.ended.is_set():  # the call is torn down: its job is not left running
                job.cancelled.set()
            reply, job.reply, job.awaiting_reply = job.reply, None, False
        reply = reply or error_reply(ErrorCode.TOOL_FAILED, f"{call['tool']} did not complete")
        if reply.get("ok") and isinstance(reply.get("value"), dict):
            reply = {**reply, "value": {**reply["value"], "job_id": job.id, "output_retained_bytes": job.ring.retained}}
        return reply

    async def _supervise(self, job: Job, message: dict[str, Any], deadline: Deadline) -> None:
        """A background job's whole run, through the pool's job entry point; its end recorded and audited."""
        try:
            reply = await self._running_pool().run_job(message, deadline, job.cancelled, self.on_event(job))
        except asyncio.CancelledError:
            reply = {"ok": False, "error": ToolError(ErrorCode.SESSION_CLOSED,
                                                     "the session closed while the job ran").to_dict()}
        except Exception as exc:  # a bug here must end one job, not the session
            reply = {"ok": False, "error": ToolError(ErrorCode.TOOL_FAILED,
                                                     f"internal error while running the job: {exc}").to_dict()}
        self.finish(job, reply)
        changes = await self.on_background_end(job.id) if self.on_background_end is not None else None
        if job.spawned.is_set():
            self._audit("job_ended", job, changes)

    def _running_value(self, job: Job, remaining: float) -> dict[str, Any]:
        """A background call's answer while its job runs: the output so far, within ``output_limit``."""
        capture = HeadTail(self.output_limit)
        capture.feed(job.ring.read(job.ring.start, job.ring.retained).data)
        text = capture.render(clean_terminal_text if self.clean_output else None)
        return {"job_id": job.id, "background": True, "state": job.state, "exit_code": None, "signal": None,
                "timed_out": False, "cancelled": False, "output": text.text, "output_bytes": job.ring.total,
                "output_kept_bytes": text.kept_bytes, "truncated": text.truncated or job.ring.start > 0,
                "output_invalid_utf8": text.invalid_utf8, "output_retained_bytes": job.ring.retained,
                "duration_ms": int((time.time() - job.started_at) * 1000), "limit_exceeded": None,
                "timeout_seconds": round(max(remaining, 0.0), 3)}

    def _audit(self, event: str, job: Job, changes: dict[str, Any] | None = None) -> None:
        if self.audit is not None:
            self.audit(event, {**_describe(job).to_dict(), "call_id": job.call_id,
                               **({"changes": changes} if changes is not None else {})})

    def on_event(self, job: Job) -> Callable[[WorkerMessage], None]:
        """The pool's callback for the job's ``output`` and ``spawned`` messages."""

        def handle(message: WorkerMessage) -> None:
            if message["op"] == "input_closed":
                if job.io is not None:
                    job.io.open = False
                return
            if message["op"] == "spawned":
                if job.background and not job.spawned.is_set():
                    self._audit("job_started", job)
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

    # -- JobsAccess ---------------------------------------------------------------------------------

    def _job(self, job_id: str) -> Job | JobRecord:
        job = self.jobs.get(job_id)
        if job is None:
            raise ToolError(ErrorCode.UNKNOWN_JOB, f"this session has no job {job_id!r} (job_list lists its jobs)",
                            {"job_id": job_id})
        return job

    def info(self, job_id: str) -> JobInfo:
        return _describe(self._job(job_id))

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

    def input_state(self, job_id: str) -> InputState:
        job = self._job(job_id)
        io = job.io if isinstance(job, Job) else None
        return job_io.input_state(job.id, job.command, job.state == "running", io)

    def write(self, job_id: str, data: bytes, *, eof: bool, version: int, line: str | None, carry: str) -> None:
        job = self._job(job_id)
        io = job.io if isinstance(job, Job) else None
        job_io.input_state(job.id, job.command, job.state == "running", io)  # still open, still running
        assert io is not None
        job_io.send(job.id, io, data, eof=eof, version=version, line=line, carry=carry)

    async def screen(self, job_id: str) -> dict[str, Any] | None:
        job = self._job(job_id)
        io = job.io if isinstance(job, Job) and job.state == "running" else None
        if job.screen_size is None:
            return None
        return await job_io.render_screen(self.store, job.id, io, job.screen_size)


def _describe(job: Job | JobRecord) -> JobInfo:
    return JobInfo(job.id, job.tool, job.command, job.background, job.state, job.exit_code, job.signal,
                   job.timed_out, _iso(job.started_at) or "", _iso(job.ended_at), job.ring.total,
                   job.ring.retained, job.ring.start, job.error)


def command_of(args: Any) -> str | None:
    """The command line a job runs, as its input gave it (None for a tool without one)."""
    command = args.get("command") if isinstance(args, dict) else None
    return command if isinstance(command, str) else None
