"""A worker process's life: a ``multiprocessing`` process, forked by the session's forkserver, that serves
one call at a time (:mod:`peon.workers.call`): after a clean call (:func:`peon.workers.reuse.may_offer`: for
a tool that starts processes, its commands ended by themselves and left nothing) it offers to serve the
next one; after any other call it exits.

Promise:

* it is a child subreaper, so everything a call starts stays below it; in cgroup containment it moves
  into a cgroup of its own before anything else (its limits, its OOM count and its ``cgroup.kill``
  are then its calls' alone, and everything it starts is born there), or exits without serving;
* no descriptor of Peon's reaches a process it starts: it keeps only 0, 1, 2, its channel and the
  pinned workspace root, all close-on-exec (and the runner audits the table before every spawn), and
  while a foreground call's kept output is past 1 MiB, the unnamed file holding it (close-on-exec);
  and it is not dumpable, so processes of the same user can neither ptrace it nor take its
  descriptors (``pidfd_getfd``);
* if its forkserver dies (it does when the supervisor dies) it gets a parent-death ``SIGTERM``, kills
  its whole tree and exits (:data:`~peon.workers.exit_codes.EXIT_PARENT_GONE`) — stopped too: it is
  in a process group of its own, which its forkserver's and supervisor's deaths leave orphaned, so
  the kernel continues it (``SIGHUP``, then ``SIGCONT``), and a ``SIGHUP`` once its parent is gone
  does the same;
* it never serves a call sent after a result that did not let it serve again: it exits instead, and
  the supervisor reports that call; it does not offer to serve again once its limits, priority,
  scheduling, umask or signal handlers differ from its start (:mod:`peon.workers.process_state`).

Life: :func:`serve` is the :class:`multiprocessing.Process` target. The standby prepares everything
(descriptors, session, event loop), starts its loop and then waits for its ``call`` (a poll of its
channel and of the pipe a wake signal writes to: each wake runs one warm-up round) and reads it with
``Connection.recv_bytes``; from then on the channel is a :class:`~peon.workers.channel.FrameChannel` on
the same socket, carrying ``progress`` messages and the ``result`` (:mod:`peon.workers.messages`). After
a result that lets it serve again it waits, titled as a standby, for the next ``call`` on that channel
(the supervisor closes it to retire the worker); after any other result it waits (bounded) for the
supervisor to close the channel, so its exit costs nothing on the path of the reply, and a call sent
to it then is never served: it exits.

A standby whose first message is ``host`` (:data:`~peon.workers.messages.HOST_MESSAGE`) becomes the
session's job host instead (:mod:`peon.workers.job_host`): it runs every background job of the session.

Titles: ``peon-worker standby`` while waiting, ``peon-worker <tool> <call-id>`` while serving,
``peon-worker jobs`` as the job host.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import importlib
import json
import multiprocessing
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NoReturn

from setproctitle import getproctitle, setproctitle

from peon.core.config_view import ResolvedConfig
from peon.core.framing import MAX_MESSAGE_BYTES, encode_json
from peon.core.skills import SkillRecord
from peon.core.tool import SessionView, Tool, ToolContext, ToolRisk

from peon.workers import limits, linux, process_state, proctree
from peon.workers.call import serve_call
from peon.workers.channel import FrameChannel, socket_of
from peon.workers.exit_codes import EXIT_INTERNAL_ERROR, EXIT_NOT_STARTED, EXIT_PARENT_GONE
from peon.workers.messages import HOST_MESSAGE, WAKE_SIGNAL
from peon.workers.sandbox import call_details, confine

LINGER_SECONDS = 10.0  # after its result, how long a worker waits for the supervisor to close the channel
STANDBY_WARM_UP_ROUNDS = 1


class InheritedFd:
    """A descriptor handed to a worker through ``multiprocessing`` (``reduction.DupFd``: sent to the
    forkserver with ``SCM_RIGHTS`` and inherited by the worker it forks)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        from multiprocessing import reduction

        return _inherit, (reduction.DupFd(self.fd),)


def _inherit(dup: Any) -> InheritedFd:
    return InheritedFd(dup.detach())


@dataclass
class WorkerStart:
    """What the supervisor gives a worker it starts (pickled by ``multiprocessing``)."""

    connection: Any  # the worker's end of a multiprocessing.Pipe(duplex=True)
    session: bytes | None  # the session as JSON (SessionState.worker_session), None: the forkserver has it
    tools: tuple[str, ...]  # import paths of the session's tools
    forkserver_pid: int  # its parent; when that dies, so does the worker
    cgroup: str | None  # the cgroup v2 directory of this worker alone (its limits), which it joins first
    root: InheritedFd | None  # the workspace, pinned by the supervisor (O_PATH)


def _on_parent_gone(signum: int, frame: Any) -> None:
    proctree.kill_tree(os.getpid(), reap=proctree.reap_all, timeout=5.0)
    os._exit(EXIT_PARENT_GONE)


_FORKSERVER_PID = 0  # this worker's parent while it lives


def _on_hangup(signum: int, frame: Any) -> None:
    """The kernel's ``SIGHUP`` (then ``SIGCONT``) to a stopped process of a group that its parent's
    death orphaned: its forkserver and supervisor are gone, and this worker must end with its tree even
    though a command stopped it. With its parent alive, a ``SIGHUP`` ends it as it always did."""
    if os.getppid() != _FORKSERVER_PID:
        _on_parent_gone(signum, frame)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGHUP)


def serve(start: WorkerStart) -> NoReturn:
    """The worker process's whole life; never returns."""
    code = EXIT_NOT_STARTED
    try:
        session, tools, loop = _prepare(start)
        code = EXIT_INTERNAL_ERROR
        code = loop.run_until_complete(_wait_and_serve(start.connection, session, tools))
    except BaseException:
        traceback.print_exc(file=sys.stderr)
    finally:
        os._exit(code)


def _prepare(start: WorkerStart) -> tuple[SessionView, dict[str, Tool], asyncio.AbstractEventLoop]:
    linux.set_dumpable(False)
    linux.unblock_signals()  # its forkserver's mask, whatever that was: SIGTERM must reach _on_parent_gone
    global _FORKSERVER_PID
    _FORKSERVER_PID = start.forkserver_pid
    signal.signal(signal.SIGTERM, _on_parent_gone)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, _on_hangup)
    signal.signal(WAKE_SIGNAL, _on_wake)
    # A process group of its own in the supervisor's session: when the forkserver and the supervisor die,
    # the group is orphaned, and the kernel continues it if a command stopped it (SIGHUP, SIGCONT).
    os.setpgid(0, 0)
    linux.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != start.forkserver_pid:  # the forkserver died before the death signal was armed
        os._exit(EXIT_PARENT_GONE)
    forkserver: Any = sys.modules.get("peon.workers.forkserver")
    if not getattr(forkserver, "ARMED", False):
        raise RuntimeError("this worker's forkserver did not arm its parent-death signal; refusing to serve")
    linux.set_child_subreaper()
    if start.cgroup:  # its own cgroup, before anything it runs: else it would serve outside its limits
        _join_cgroup(start.cgroup)
    root_fd = start.root.fd if start.root is not None else -1
    _keep_only_own_descriptors({start.connection.fileno(), root_fd})
    if start.session is None and forkserver.SESSION is not None:  # built once, by the forkserver
        session, tools = dataclasses.replace(forkserver.SESSION, root_fd=root_fd), dict(forkserver.TOOLS)
    elif start.session is not None:
        session, tools = session_from_wire(json.loads(start.session), root_fd), load_tools(start.tools)
    else:
        raise RuntimeError("the session is neither in the forkserver nor in this worker's start")
    loop = asyncio.new_event_loop()  # no SIGCHLD handler: the runner watches what it starts through pidfds
    asyncio.set_event_loop(loop)
    if start.cgroup:
        limits.CGROUP = Path(start.cgroup)
    # Its own copy of the pages its call will write, made now; no process started for it.
    warm_up(loop, session, tools.values(), STANDBY_WARM_UP_ROUNDS, processes=False)
    if session.sandbox.get("active"):  # what its first sandboxed call would build, built while it waits
        confine.prepare(call_details(session.sandbox))
    setproctitle("peon-worker standby")
    gc.freeze()  # what the forkserver and the preparation made is never collected here
    process_state.record()  # what every call it serves must leave as it was (peon.workers.process_state)
    return session, tools, loop


def _join_cgroup(path: str) -> None:
    """Move this process into the cgroup ``path`` (made for it by the supervisor); exit if it cannot."""
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write("0")
    except OSError as exc:
        print(f"peon-worker: cannot join its cgroup {path}: {exc.strerror}; not serving", file=sys.stderr)
        os._exit(EXIT_NOT_STARTED)


def _keep_only_own_descriptors(keep: set[int]) -> None:
    """Close every descriptor but 0, 1, 2 and ``keep`` (what the forkserver passed along for
    ``multiprocessing`` — its liveness pipe, the resource tracker's — is no business of a tool), and
    make the kept ones close-on-exec: ``SCM_RIGHTS`` delivered them inheritable."""
    keep = {fd for fd in keep if fd > 2}
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        os.set_inheritable(fd, False)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
    try:
        os.fstat(0)
    except OSError:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)


def session_from_wire(wire: Mapping[str, Any], root_fd: int = -1) -> SessionView:
    return SessionView(
        workspace=Path(wire["workspace"]),
        config=ResolvedConfig(wire["config"]).config,
        env=dict(wire["env"]),
        session_id=wire["session_id"],
        skills={record["name"]: SkillRecord(**record) for record in wire["skills"]},
        root_fd=root_fd,
        sandbox=wire.get("sandbox") or {},
        spill_dir=Path(wire["spill_dir"]) if wire.get("spill_dir") else None,
    )


def load_tools(paths: tuple[str, ...] | list[str]) -> dict[str, Tool]:
    """The supervisor checked these tools when it registered them (peon.core.registry); here they are only
    loaded, without the registry's checks and entry-point machinery."""
    tools = {}
    for path in paths:
        module_name, _, attr = path.partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        tool = obj() if isinstance(obj, type) else obj
        tools[tool.name] = tool
    return tools


# -- waiting for calls, and retiring ----------------------------------------------------------------


async def _wait_and_serve(connection: Any, session: SessionView, tools: dict[str, Tool]) -> int:
    """The standby's wait for its call, from inside the running loop, so that starting the loop is not
    on the call's path; the wait itself blocks: nothing else runs in a standby but one warm-up round
    per wake (:data:`~peon.workers.messages.WAKE_SIGNAL`). 0 when it is retired (its channel closes)
    before a call."""
    sock = socket_of(connection, close=False)  # made now; non-blocking only once the call is in
    wakes, woken = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous = signal.set_wakeup_fd(woken, warn_on_full_buffer=False)  # the signal writes a byte here
    waiting = select.poll()
    waiting.register(connection.fileno(), select.POLLIN)
    waiting.register(wakes, select.POLLIN)
    try:
        while all(fd == wakes for fd, _ in waiting.poll()):  # the standby waits here
            os.read(wakes, 64)
            await _warm_up_rounds(session, tools.values(), 1, processes=False)
        data = connection.recv_bytes(MAX_MESSAGE_BYTES)
    except (EOFError, OSError):
        sock.close()
        return 0
    finally:
        signal.set_wakeup_fd(previous)
        os.close(wakes)
        os.close(woken)
        connection.close()
    return await _serve_one(sock, data, session, tools)


def _on_wake(signum: int, frame: Any) -> None:
    """Nothing: while a standby waits, the wake is the byte the signal writes to its wakeup pipe.
    The handler stays for the worker's whole life, so that a late wake never ends it (and a command
    it starts gets the default disposition back at ``exec``)."""


async def _serve_one(sock: socket.socket, data: bytes | None, session: SessionView, tools: dict[str, Tool],
                     reusable: bool = True) -> int:
    """Serve the call in ``data``, then each next call the supervisor sends while the worker may serve
    again (:func:`peon.workers.reuse.may_offer`; never with ``reusable`` false: a warm-up round's);
    0 once the supervisor closes the channel."""
    channel = FrameChannel(sock)
    try:
        while data is not None:
            if data == HOST_MESSAGE and reusable:  # a standby, or a worker between two calls
                from peon.workers.job_host import host_jobs  # only the one worker that becomes the session's job host

                return await host_jobs(channel, session, tools)
            again = await serve_call(channel, data, session, tools, reusable)
            data = await _next_call(channel) if again else await _linger(channel)
        return 0
    finally:  # a worker's exit would close it; a warm-up round in the forkserver or a standby must
        channel.close()


async def _next_call(channel: FrameChannel) -> bytes | None:
    """Wait, as a standby does, for the next call on the channel; None once it closes. A cancel that
    crossed the previous result is stale and skipped; anything else is not the supervisor's and ends
    the worker."""
    while True:
        data = await channel.recv_or_end()
        if data is None:
            return None
        try:
            message = json.loads(data)
        except ValueError:
            return None
        if isinstance(message, dict) and message.get("op") in ("call", "host"):
            return data
        if not (isinstance(message, dict) and message.get("op") == "cancel"):
            return None


async def _linger(channel: FrameChannel) -> bytes | None:
    """Exit once the supervisor has the result (it closes the channel), not on its way. A call sent to
    a worker that may not serve again is never served: the worker exits, and the supervisor reports it."""
    try:
        async with asyncio.timeout(LINGER_SECONDS):
            while (data := await channel.recv()) is not None:
                if data[:64].find(b'"call"') >= 0:
                    return None
    except (TimeoutError, Exception):
        pass
    return None


# -- warming up ----------------------------------------------------------------------------------------


class _WarmUpTool(Tool):
    name = "peon_warm_up"
    description = "Runs the warm-up of each of the session's tools (Tool.warm_up), then returns."
    risk = ToolRisk.READ_ONLY
    input_schema: ClassVar[Mapping[str, Any]] = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self, tools: Iterable[Tool] = (), processes: bool = False):
        self.tools = tuple(tools)
        self.processes = processes

    def approval_summary(self, args: Any) -> str:
        return "nothing"

    async def execute(self, args: Any, ctx: ToolContext) -> dict[str, Any]:
        for tool in self.tools:
            try:
                await tool.warm_up(ctx, processes=self.processes)
            except Exception:  # a warm-up that fails costs speed, nothing else
                pass
        return {"done": True}


async def _warm_up_round(session: SessionView, tools: Iterable[Tool], processes: bool) -> None:
    ours, theirs = multiprocessing.Pipe(duplex=True)
    supervisor_side = FrameChannel(socket_of(ours))
    call = {"op": "call", "id": "warm-up", "tool": _WarmUpTool.name, "args": {}, "deadline": time.monotonic() + 60,
            "approved": {}, "progress": False, "stream": "end"}
    served: dict[str, Tool] = {_WarmUpTool.name: _WarmUpTool(tools, processes)}
    try:
        async with asyncio.timeout(5.0), asyncio.TaskGroup() as group:
            group.create_task(_serve_one(socket_of(theirs), encode_json(call), session, served, reusable=False))
            while (message := await supervisor_side.recv()) is not None and b'"result"' not in message[:32]:
                pass  # its output, then its result
            supervisor_side.close()  # and the linger ends; the group waits for the serving task
    finally:
        supervisor_side.close()


def warm_up(loop: asyncio.AbstractEventLoop, session: SessionView, tools: Iterable[Tool], rounds: int, *,
            processes: bool) -> None:
    """Serve ``rounds`` calls, in this process, on ``loop``, of a tool that runs each of ``tools``'
    :meth:`~peon.core.tool.Tool.warm_up` (``read`` reads one of Peon's files; ``bash``, when ``processes``,
    starts ``/bin/true`` through the process runner): a call's whole path, with no effect.

    Python 3.11 specializes bytecode in place as it runs, and every object it touches has its
    reference count written. Run in the forkserver before it forks, the bytecode of a worker's path
    is specialized once, not in every worker; run once more in a standby while it waits, the pages a
    call writes are copied from the forkserver then, not on the call's path. Measured on the
    development machine (a forked child of a warmed parent, one ``read`` of a small file through
    ``_serve_one``): the first call in the child took 1.57 ms and 540 page faults, a second 0.34 ms
    and 18. For ``bash`` with ``true`` a warm-up that started ``/bin/true`` cut the faults from 674
    to 89 but the call only from 5.9 to 5.5 ms, while it cost each standby about 1.4 ms more CPU
    (``bench/studies/bench_cpu.py``): a standby's warm-up starts no process."""
    loop.run_until_complete(_warm_up_rounds(session, tools, rounds, processes=processes))


async def _warm_up_rounds(session: SessionView, tools: Iterable[Tool], rounds: int, *, processes: bool) -> None:
    title = getproctitle()
    try:
        for _ in range(rounds):
            await _warm_up_round(session, tools, processes)
    except Exception as exc:  # a warm-up that fails costs speed, nothing else
        print(f"peon-worker: warm-up skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        setproctitle(title)
