"""The job host: one worker that runs every background job of a session at once (cgroup containment).

Promise:

* it is a worker like any other — forked by the session's forkserver, a child subreaper, not
  dumpable, parent-death signal, only its own descriptors — which a standby becomes when its first
  message is :data:`~peon.workers.messages.HOST_MESSAGE`; titled ``peon-worker jobs``;
* for each ``call`` (a background job: the same validated call a worker gets, its job id as ``id``)
  it runs the tool as a worker does (:func:`peon.workers.call.execute`: same process runner, same
  spawn path, same sandbox plan) in a task of its own, and sends the job's ``spawned``, ``output``
  (live) and one ``result``, each tagged with the job's id; a ``cancel`` naming a job cancels that
  job only (TERM to its group, the grace, KILL); an ``input`` naming a job goes to that job's input
  queue only (:func:`peon.workers.call.take_input`; ``input_closed`` once it cannot take it);
* each job's command is born in a cgroup of its own, ``job-<n>`` beside the workers' in the session's
  cgroup, with the limits a worker's call has (``memory.max``, ``pids.max``): the host moves itself
  into that cgroup around the ``posix_spawn`` and back (a child is created in its parent's cgroup, so
  no process of the job is ever outside it: no race). "The job's processes" are that cgroup's
  members (:class:`JobScope`): its deadline, cancel, limits and final kill (``cgroup.kill``) reach
  them and nothing of another job — a daemon that ``setsid``\\s and double-forks included; the
  cgroup is removed once empty;
* below the host nothing lives outside a running job's cgroup: a process that moved itself out of
  its job's cgroup (a root command can) is killed when a job ends;
* a process is a job's by evidence, not by the cgroup it is found in (a root command, or one of the
  user owning a delegated subtree, can write itself into any job's cgroup): it is the job's when it
  descends from the job's command (ancestry up to the host, each ancestor named by pid and start
  time), is in that command's session (the command started one: its number cannot be reused while
  a member lives), or was seen in the job's cgroup by an earlier check; otherwise it is the job's
  whose cgroup holds it, unless it started before that job's command. A process found in the cgroup
  of a job it is not of belongs to neither and is killed (:meth:`Host.check`: as each job starts and
  ends, and every :data:`CHECK_SECONDS` while jobs run), and a job's end kills its processes
  wherever they are before its result is sent;
* the end of its channel (the supervisor retires the host or died) or a message that is not the
  supervisor's ends the host, and every job's processes are killed before it exits.

The supervisor's side is :class:`peon.supervisor.job_host.JobHostLink`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from setproctitle import setproctitle

from peon.core.cancel import CancelToken
from peon.core.errors import ErrorCode
from peon.core.redaction.session import redactor_for
from peon.core.tool import SessionView, Tool

from peon.workers import cgroup, limits, proctree, runner
from peon.workers.call import OutputStream, call_context, encode_result, error_result, execute, take_input
from peon.workers.channel import FrameChannel
from peon.workers.exit_codes import EXIT_INTERNAL_ERROR, EXIT_NOT_STARTED
from peon.workers.job_input import INPUT, JobInput
from peon.workers.limits import CgroupProbe, ResourceLimits, TreeProbe
from peon.workers.messages import CallMessage
from peon.workers.reaper import REAPER

# What a job id looks like (the supervisor's JobTable names them); it names the job's cgroup too.
JOB_ID = re.compile(r"^job-[0-9]{1,12}$")
KILL_WAIT_SECONDS = 10.0  # after cgroup.kill, how long the job's cgroup may take to empty
CHECK_SECONDS = 0.5  # while jobs run, how often the host looks for a process in a cgroup not its job's
REMOVE_RETRY_SECONDS = (0.001, 0.005, 0.02, 0.1, 0.5, 1.0, 2.0)


class _MembersProbe(TreeProbe):
    """The watchdog's sample of a job where the kernel does not enforce a limit: its cgroup's members."""

    def __init__(self, limits: ResourceLimits, scope: JobScope):
        super().__init__(limits, os.getpid())
        self.scope = scope

    def pids(self) -> list[int]:
        return self.scope.members()


@dataclass
class RunningJob:
    """A job the host runs: its cancel, its cgroup once made, and the commands it started — each by pid
    and start time (clock ticks after boot), the evidence of which processes are the job's."""

    token: CancelToken
    input: JobInput
    group: cgroup.Cgroup | None = None
    input_closed_told: bool = False
    leaders: set[tuple[int, int]] = field(default_factory=set)

    @property
    def started(self) -> int | None:
        """When its first command started (clock ticks after boot); None before it started one."""
        return min((start for _, start in self.leaders), default=None)


@dataclass
class JobScope:
    """A job's processes: the members of its cgroup (:class:`peon.workers.runner.ProcessScope`)."""

    group: cgroup.Cgroup
    home: cgroup.Cgroup  # the host's own cgroup, where it returns after each spawn
    job: RunningJob | None = None  # told of each command it starts

    def members(self) -> list[int]:
        alive = []
        for pid in self.group.all_pids():
            fields = proctree.stat_fields(pid)
            if fields is not None and fields[0] not in "ZX":
                alive.append(pid)
        return alive

    def groups(self, until: float) -> set[int]:
        own = os.getpgid(0)
        found = set()
        for pid in self.members():
            if time.monotonic() >= until:
                break
            fields = proctree.stat_fields(pid)
            if fields is not None and fields[2] > 1 and fields[2] != own:
                found.add(fields[2])
        return found

    def left_behind(self, leader: int) -> bool:
        return bool(set(self.members()) - {leader})

    def kill_all(self) -> None:
        """``cgroup.kill`` (atomic against forks), then wait (bounded) until the cgroup is empty,
        reaping the members that were the host's children (the leader, orphans)."""
        until = time.monotonic() + KILL_WAIT_SECONDS
        delay = 0.0001
        while True:
            REAPER.reap()
            if not self.group.populated():
                return
            self.group.kill()
            if time.monotonic() >= until:
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.004)

    async def wait_gone(self) -> None:
        if self.group.populated():
            self.kill_all()
            if self.group.populated():
                from peon.core.errors import ToolError

                raise ToolError(ErrorCode.TOOL_FAILED,
                                f"some processes of this job could not be killed within {KILL_WAIT_SECONDS:g} s")

    def probe(self, limits: ResourceLimits) -> TreeProbe | CgroupProbe:
        probe = CgroupProbe(limits, self.group.path, os.getpid())
        probe.fallback = _MembersProbe(limits, self)
        return probe

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """The command is born in the job's cgroup: the host is in it while it starts the command, and
        records it (the new child of the host born in the job's cgroup) as the job's command."""
        before = set(proctree.children(os.getpid()))
        self.group.add(0)
        try:
            yield
            if self.job is not None:
                self._record_command(before)
        finally:
            try:
                self.home.add(0)
            except OSError as exc:  # it would be killed with this job, and account for it: fail closed
                print(f"peon-worker jobs: cannot return to {self.home.path} ({exc}); exiting", file=sys.stderr)
                _kill_everything()
                os._exit(EXIT_INTERNAL_ERROR)


    def _record_command(self, before: set[int]) -> None:
        """The child the spawn made: not a child before it, and in the job's cgroup, where the host is
        now (an orphan of another job reparented to the host meanwhile is in its own job's)."""
        assert self.job is not None
        own = cgroup.process_cgroup(os.getpid())
        for pid in set(proctree.children(os.getpid())) - before:
            found = proctree.process_stat(pid)
            if found is not None and own is not None and cgroup.process_cgroup(pid) == own:
                self.job.leaders.add((pid, found.start))


def _make_job_cgroup(home: cgroup.Cgroup, job_id: str, limits: ResourceLimits) -> cgroup.Cgroup:
    group = cgroup.Cgroup.create(cgroup.job_cgroup_path(home.path, job_id))
    try:
        if (group.path / "memory.max").exists():
            group.write("memory.max", str(limits.memory_bytes))
            group.write("memory.swap.max", "0", missing_ok=True)
        if (group.path / "pids.max").exists():
            group.write("pids.max", str(limits.processes))
    except BaseException:
        os.rmdir(group.path)
        raise
    return group


async def _remove(group: cgroup.Cgroup) -> None:
    for delay in (0.0, *REMOVE_RETRY_SECONDS):
        if delay:
            await asyncio.sleep(delay)
        try:
            if group.remove_now():
                return
        except OSError:
            pass
    print(f"peon-worker jobs: the cgroup {group.path} could not be removed", file=sys.stderr)


def _kill_everything() -> None:
    proctree.kill_tree(os.getpid(), reap=REAPER.reap, timeout=5.0)


class Host:
    """The jobs this host runs, by id, and what each has been seen to own."""

    def __init__(self, channel: FrameChannel, session: SessionView, tools: dict[str, Tool], home: cgroup.Cgroup):
        self.channel = channel
        self.session = session
        self.tools = tools
        self.home = home
        self.running: dict[str, RunningJob] = {}
        # (pid, start ticks) -> the job each living process below the host was last seen to be of.
        self.seen: dict[tuple[int, int], str] = {}
        limits = session.config.limits
        self.limits = ResourceLimits(int(limits.memory_max_bytes), int(limits.max_processes))

    def start(self, message: CallMessage) -> asyncio.Task[None] | None:
        job_id = message.get("id")
        if not isinstance(job_id, str) or not JOB_ID.match(job_id) or job_id in self.running:
            return None  # not the supervisor's: the host ends
        token = CancelToken()
        self.running[job_id] = RunningJob(token, JobInput(int(self.session.config.jobs.max_queued_input_bytes)))
        return asyncio.get_running_loop().create_task(self._run(message, job_id, token))

    def cancel(self, job_id: object, reason: str) -> None:
        entry = self.running.get(job_id) if isinstance(job_id, str) else None
        if entry is not None:  # a job already ended: a cancel that crossed its result
            entry.token.cancel(reason)

    async def write(self, message: dict[str, Any]) -> None:
        """An ``input`` message: to the job it names (one that has ended takes none), ``input_closed``
        once it cannot take it."""
        job_id = message.get("id")
        entry = self.running.get(job_id) if isinstance(job_id, str) else None
        if entry is None or take_input(entry.input, message) or entry.input_closed_told:
            return  # a job that has ended: an input that crossed its result
        entry.input_closed_told = True
        await self.channel.send(json.dumps({"op": "input_closed", "id": job_id}).encode())

    async def _run(self, message: CallMessage, job_id: str, token: CancelToken) -> None:
        tool_name = str(message.get("tool"))
        ctx = call_context(message, self.session, token, self.channel)
        output = OutputStream(self.channel, job_id, None, redactor=redactor_for(self.session))
        ctx.output = output
        tool = self.tools.get(tool_name)
        job = self.running[job_id]
        try:
            if tool is None:
                reply = error_result(job_id, ErrorCode.UNKNOWN_TOOL, f"this worker has no tool named {tool_name!r}")
            else:
                try:
                    job.group = _make_job_cgroup(self.home, job_id, self.limits)
                except OSError as exc:
                    reply = error_result(job_id, ErrorCode.TOOL_FAILED,
                                         f"the job's cgroup could not be made ({exc.strerror}); nothing was started")
                else:
                    self.check()  # what runs now is seen where it is, before a new cgroup may receive it
                    scope = JobScope(job.group, self.home, job)
                    runner.SCOPE.set(scope)  # this task's (and the tool's) context only
                    INPUT.set(job.input)
                    reply = await execute(tool, message["args"], ctx)
                    if scope.members():  # whatever the tool did, nothing of the job outlives it
                        scope.kill_all()
                        if scope.members():
                            reply = error_result(job_id, ErrorCode.TOOL_FAILED,
                                                 f"some processes {tool_name} started could not be killed")
                    self.check(ending=job_id)  # the job's processes found in another job's cgroup
            await output.flush()  # every output message precedes the result
            await self.channel.send(encode_result(reply, tool_name, job_id))
        except OSError:
            pass  # the channel is gone: the host ends, and kills everything
        finally:
            del self.running[job_id]
            self.sweep_strays()
            if job.group is not None:
                await _remove(job.group)
            if not self.running:
                setproctitle("peon-worker jobs")

    def check(self, ending: str | None = None) -> None:
        """Kill each process below the host found in the cgroup of a job it is not of (the module's
        rules of evidence), and each one of the job ``ending`` (whose own cgroup was killed) wherever
        it is; remember which job each other process is of. A process outside every job's cgroup is
        left to :meth:`sweep_strays`, when a job ends."""
        me = os.getpid()
        home = cgroup.process_cgroup(me)
        if home is None or not self.running:
            self.seen.clear()
            return
        parent = home.rpartition("/")[0]
        cgroups = {job_id: f"{parent}/{job_id}" for job_id in self.running if job_id != ending}
        leaders = {leader: job_id for job_id, job in self.running.items() for leader in job.leaders}
        sessions = {pid: job_id for (pid, _), job_id in leaders.items()}
        below = proctree.descendants(me)
        stats = {pid: proctree.process_stat(pid) for pid in below}
        seen: dict[tuple[int, int], str] = {}
        for pid in below:
            found = stats[pid]
            if found is None or found.state in "ZX":
                continue
            where = cgroup.process_cgroup(pid)
            if where is None:
                continue
            holder = next((job_id for job_id, path in cgroups.items()
                           if where == path or where.startswith(path + "/")), None)
            owner = _owner(pid, stats, leaders, sessions, me) or self.seen.get((pid, found.start))
            if owner is None and holder is not None:
                begun = self.running[holder].started
                if begun is not None and found.start < begun:
                    owner = "none"  # in the job's cgroup, but older than the job's command: not the job's
            if owner is not None and owner != holder and (holder is not None or owner == ending):
                if owner == "none":
                    why = f"it is in the cgroup of {holder} but started before that job's command"
                elif holder is not None:
                    why = f"a process of {owner} found in the cgroup of {holder}: it belongs to neither"
                else:
                    why = f"a process of {owner}, which ended, found in {where}"
                print(f"peon-worker jobs: killing process {pid}: {why}", file=sys.stderr)
                proctree.kill_tree(pid, include_root=True, reap=REAPER.reap, timeout=5.0)
                continue
            if holder is not None or owner is not None:
                seen[(pid, found.start)] = owner or holder or ""
        self.seen = seen
        REAPER.reap()

    def sweep_strays(self) -> None:
        """Kill what lives below the host outside every running job's cgroup (it left its own)."""
        home = cgroup.process_cgroup(os.getpid())
        if home is None:
            return
        parent = home.rpartition("/")[0]
        allowed = tuple(f"{parent}/{job_id}" for job_id in self.running)
        for pid in proctree.descendants(os.getpid()):
            fields = proctree.stat_fields(pid)
            if fields is None or fields[0] in "ZX":
                continue
            where = cgroup.process_cgroup(pid)
            if where is not None and any(where == path or where.startswith(path + "/") for path in allowed):
                continue
            print(f"peon-worker jobs: killing process {pid}, outside the cgroup of every running job ({where})",
                  file=sys.stderr)
            proctree.kill_tree(pid, include_root=True, reap=REAPER.reap, timeout=5.0)
        REAPER.reap()


def _owner(pid: int, stats: dict[int, proctree.ProcessStat | None], leaders: dict[tuple[int, int], str],
           sessions: dict[int, str], host: int) -> str | None:
    """The job ``pid`` is of by evidence: one of its ancestors up to the host (or itself) is the job's
    command, or it is in that command's session; None when neither says."""
    current = pid
    while current != host:
        found = stats.get(current) or proctree.process_stat(current)
        if found is None:
            break
        job_id = leaders.get((current, found.start))
        if job_id is not None:
            return job_id
        current = found.ppid
    found = stats.get(pid)
    return sessions.get(found.sid) if found is not None else None


async def _check_while_running(host: Host) -> None:
    """Every :data:`CHECK_SECONDS` while jobs run: :meth:`Host.check`."""
    while True:
        await asyncio.sleep(CHECK_SECONDS)
        if host.running:
            host.check()


async def host_jobs(channel: FrameChannel, session: SessionView, tools: dict[str, Tool]) -> int:
    """Run the session's background jobs until the supervisor closes the channel; 0 then, after every
    job's processes were killed."""
    setproctitle("peon-worker jobs")
    home_path = limits.CGROUP  # the host's own cgroup (the worker's it was), where it serves
    if home_path is None:
        channel.close()
        return EXIT_NOT_STARTED  # a job host exists only in cgroup containment
    host = Host(channel, session, tools, cgroup.Cgroup(home_path))
    tasks: set[asyncio.Task[None]] = set()
    # Reap orphans of the jobs as they die, between the jobs' own ends.
    asyncio.get_running_loop().add_signal_handler(signal.SIGCHLD, REAPER.reap)
    checker = asyncio.get_running_loop().create_task(_check_while_running(host))
    try:
        while True:
            data = await channel.recv_or_end()
            if data is None:
                break
            try:
                message = json.loads(data)
            except ValueError:
                break
            op = message.get("op") if isinstance(message, dict) else None
            if op == "call":
                task = host.start(message)
                if task is None:
                    break
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            elif op == "cancel":
                host.cancel(message.get("id"), str(message.get("reason") or "cancelled by the client"))
            elif op == "input":
                await host.write(message)
            else:
                break
    finally:
        checker.cancel()
        for job in list(host.running.values()):
            job.token.cancel("the job host is ending")
        _kill_everything()
        for job in list(host.running.values()):
            if job.group is not None:
                job.group.kill()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        channel.close()
    return 0
