"""The session's forkserver: what it loads, and its main loop, which forks one worker per request.

The supervisor starts its workers as ``multiprocessing`` forkserver processes
(:mod:`peon.supervisor.forker`). The forkserver is a fresh interpreter started by the supervisor
(``python -P -c 'from peon.workers.forkserver import main; main(CHANNEL, ALIVE)'``); importing this
module *in that process* makes it Peon's, and :func:`main` serves the supervisor's requests. Promises:

* its only channel is one end of a ``socketpair(AF_UNIX, SOCK_STREAM)`` it inherited from the
  supervisor: no socket with a name in the file system or the abstract namespace, nothing another
  process can connect to, rename or replace (a stream pair, because a ``SOCK_SEQPACKET`` socket that
  passes credentials is bound to an abstract name as it sends). Each request and each answer is one
  write of a fixed size, and a request carries descriptors, so a read never joins two of them. The
  channel's creator must be its supervisor
  (``SO_PEERCRED``) and every request must come from it (``SCM_CREDENTIALS``, which the kernel
  fills in); anything else is refused, its descriptors closed, and nothing is forked. Each fork is
  acknowledged on the channel, so the supervisor sees, by the kernel's word, that its forkserver
  answered. Requests are served one at a time; a forked child runs the standard library's
  ``multiprocessing.forkserver._serve_one`` (the ``Process`` / ``Popen`` / sentinel protocol of
  ``multiprocessing`` is unchanged: workers are ``multiprocessing.Process`` es);

* it dies with its supervisor (a parent-death signal, armed before anything else, then a check that
  the supervisor is still its parent; or the end of its channel, whichever it sees first), and is not
  dumpable (no ptrace, no ``pidfd_getfd`` from
  processes of the same user; its workers inherit that). Dying, it leaves nothing of the session
  (:func:`end_session`): each worker is told (``SIGTERM``, ``SIGCONT`` for one a command stopped) and
  kills its own tree, and once they are gone (or :data:`WORKERS_END_SECONDS` passed) the session's
  cgroup gets ``cgroup.kill``, which ends what a worker killed earlier left in it. Stopped when its
  supervisor dies, it still does so: it is in a process group of its own, which the supervisor's
  death orphans, so the kernel continues it (``SIGHUP``, then ``SIGCONT``);
* the descriptors it receives for each worker (``SCM_RIGHTS``) arrive close-on-exec
  (``MSG_CMSG_CLOEXEC``), and a forked child closes the channel before anything else runs;
* in cgroup mode it joins the session's ``forkserver`` cgroup first, so every worker is born there (and
  then moves into a cgroup of its own, :mod:`peon.workers.worker`);
* it is lean: it loads the worker, the runtime and the session's tool modules, and no validation,
  approval or configuration code (no pydantic, no jsonschema, nothing of the supervisor's:
  ``tests/project/test_layers.py`` checks it), so workers forked from it are small and quick to start; then
  ``gc.freeze()`` so those objects are never collected (and their pages never copied) in a worker;
* its title is ``peon-forkserver <workspace>``; it is not a subreaper, so the orphans of a dying
  worker are reparented past it to the supervisor.

The supervisor passes what this needs in the environment variable :data:`ENV` (its pid, the title,
the cgroup and the tool modules), which it removes from the forkserver's environment at once. Imported anywhere
else (tests, tools) the module does nothing. :data:`ARMED` says whether this process is an armed
forkserver (or a worker forked by one): a worker refuses to serve otherwise.
"""

from __future__ import annotations

import array
import asyncio
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

import multiprocessing.popen_forkserver  # noqa: F401  (unpickling a Process in a worker needs it: load it once here)
from multiprocessing import forkserver as mp_forkserver
from multiprocessing import util as mp_util
from setproctitle import setproctitle

from peon.core.redaction import session as redaction_session
from peon.core.tool import SessionView, Tool

from peon.workers import linux, proctree, worker
from peon.workers.messages import WAKE_SIGNAL
from peon.workers.runner import audit_descriptors
from peon.workers.worker import load_tools, session_from_wire

ENV = "PEON_FORKSERVER"
ARMED = False
SUPERVISOR_PID: int | None = None  # the supervisor that started this forkserver: the only one it serves
OWN_PID = 0  # this forkserver (its children inherit its handlers until they set their own)
SESSION_CGROUP: str | None = None  # the session's cgroup (the workers' one's parent), in cgroup containment
WORKERS_END_SECONDS = 6.0  # once its supervisor is gone, how long its workers have to kill their trees
# The channel's wire format. A request is REQUEST with the worker's descriptors (SCM_RIGHTS): the
# status pipe's read end for the child, its write end for the forkserver, then what the child gets
# (the alive pipe, the resource tracker's descriptor, the Process's own). An answer is the child's
# pid as a signed 64-bit integer, or REFUSED, or FORK_FAILED.
REQUEST = b"peon-fork-request"
PID = struct.Struct("q")
REFUSED = -1
FORK_FAILED = -2  # fork(2) failed (the process limit, memory): the request was valid
MAX_FDS = 256  # per request, as the standard library's forkserver
CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
WARM_UP_ROUNDS = 10
# The session and its tools, when the supervisor passed them: built once here, shared by every worker.
SESSION: SessionView | None = None
TOOLS: dict[str, Tool] = {}


def _become_forkserver() -> None:
    global ARMED, SUPERVISOR_PID
    spec = os.environ.pop(ENV, None)
    if spec is None:
        return
    info = json.loads(spec)
    global OWN_PID, SESSION_CGROUP
    OWN_PID, SUPERVISOR_PID = os.getpid(), int(info["supervisor"])
    SESSION_CGROUP = os.path.dirname(info["cgroup"]) if info.get("cgroup") else None
    linux.unblock_signals()
    # Ignored until a worker sets its handler: a wake that reaches a worker still preparing is lost,
    # not fatal. Nothing but the warm-up's /bin/true is started from here with it ignored.
    signal.signal(WAKE_SIGNAL, signal.SIG_IGN)
    # Its own process group: orphaned by the supervisor's death, so the kernel continues it if stopped.
    os.setpgid(0, 0)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_ending_signal)
    linux.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != SUPERVISOR_PID:  # the supervisor died before the death signal was armed
        end_session()
    linux.set_dumpable(False)
    if info.get("cgroup"):  # every worker is forked into it: one migration for the session, none per call
        try:
            with open(os.path.join(info["cgroup"], "cgroup.procs"), "w") as f:
                f.write("0")
        except OSError as exc:
            print(f"peon-forkserver: cannot join the forkserver's cgroup {info['cgroup']}: {exc.strerror}",
                  file=sys.stderr)
            os._exit(1)
    setproctitle(str(info["title"]))
    for name in info.get("modules", ()):
        try:  # a tool module that fails here fails again, clearly, when a worker loads it for its call
            importlib.import_module(name)
        except Exception as exc:
            print(f"peon-forkserver: could not preload {name}: {exc}", file=sys.stderr)
    if info.get("session") is not None:
        global SESSION, TOOLS
        try:
            SESSION = session_from_wire(json.loads(info["session"]))
            TOOLS = load_tools(info.get("tools", ()))
        except Exception as exc:  # each worker then builds its own, and reports what fails
            print(f"peon-forkserver: could not load the session: {exc}", file=sys.stderr)
            SESSION, TOOLS = None, {}
    try:  # built once here, inherited by every worker (each would otherwise compile it on its first call)
        redaction_session.prepare(SESSION)
    except Exception as exc:  # a worker builds it again, and reports what fails
        print(f"peon-forkserver: could not prepare redaction: {exc}", file=sys.stderr)
    ARMED = True
    _warm_up()
    gc.freeze()


def _on_ending_signal(signum: int, frame: Any) -> None:
    """``SIGTERM`` (its parent-death signal, or the supervisor closing the session) or ``SIGHUP`` (the
    kernel's, to a stopped process its parent's death orphaned): with the supervisor gone, end the
    session (:func:`end_session`); from a live supervisor, exit as the default action would."""
    if os.getpid() != OWN_PID:  # a worker not yet past its own set-up: it ends as it always did
        os._exit(128 + signum)
    if os.getppid() != SUPERVISOR_PID:
        end_session()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def end_session(code: int = 1) -> NoReturn:
    """The supervisor is gone: leave nothing of its session, then exit. Each worker gets ``SIGTERM`` (its
    parent-death handler kills its tree) and ``SIGCONT`` (a command may have stopped it); once they are
    gone, or after :data:`WORKERS_END_SECONDS`, what is left below this process is killed, and in cgroup
    containment the session's cgroup gets ``cgroup.kill`` (this process is in it too): what a worker
    killed earlier left behind, reparented to init, is still in it. Exits with ``code``."""
    try:
        workers = proctree.children(os.getpid())
        for pid in workers:
            for sig in (signal.SIGTERM, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        until = time.monotonic() + WORKERS_END_SECONDS
        while proctree.alive(proctree.children(os.getpid())) and time.monotonic() < until:
            proctree.reap_all()
            time.sleep(0.01)
        proctree.kill_tree(os.getpid(), reap=proctree.reap_all, timeout=2.0)
        if SESSION_CGROUP is not None:
            with open(os.path.join(SESSION_CGROUP, "cgroup.kill"), "w") as f:
                f.write("1")
    except BaseException:  # nothing may keep it alive: it exits whatever failed
        pass
    finally:
        os._exit(code)


@dataclass
class Request:
    """One request read from the channel: the descriptors it carried, and why it is refused (None: serve it)."""

    fds: list[int] = field(default_factory=list)
    refused: str | None = None


def parse_request(data: bytes, ancillary: list[tuple[int, int, bytes]], flags: int, supervisor: int,
                  uid: int) -> Request:
    """Decide on one message of the channel (sans I/O). Every descriptor it carried is returned, to be
    used or closed; it is served only if it is exactly :data:`REQUEST`, untruncated, sent by the
    process ``supervisor`` of user ``uid`` (credentials the kernel attached), with the 4 descriptors
    of the protocol and at most :data:`MAX_FDS` in all."""
    request = Request()
    sender: tuple[int, int, int] | None = None
    for level, kind, payload in ancillary:
        if level != socket.SOL_SOCKET:
            continue
        if kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            request.fds.extend(fds)
        elif kind == socket.SCM_CREDENTIALS and len(payload) >= CREDENTIALS.size:
            sender = CREDENTIALS.unpack_from(payload)
    if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
        request.refused = "the request was truncated"
    elif sender is None:
        request.refused = "the request carried no credentials"
    elif sender[0] != supervisor or sender[1] != uid:
        request.refused = (f"the request came from pid {sender[0]} (uid {sender[1]}), "
                           f"not from the supervisor {supervisor}")
    elif data != REQUEST:
        request.refused = f"the request is not a fork request ({len(data)} bytes)"
    elif not 4 <= len(request.fds) <= MAX_FDS:
        request.refused = f"the request carried {len(request.fds)} descriptors, not 4 to {MAX_FDS}"
    return request


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``SO_PEERCRED`` of a unix socket: (pid, uid, gid) of its peer (for a socket pair: its creator)."""
    pid, uid, gid = CREDENTIALS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, CREDENTIALS.size))
    return pid, uid, gid


def _say(message: str) -> None:
    try:
        print(f"peon-forkserver: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def main(channel_fd: int, alive_r: int) -> None:
    """Serve fork requests from the supervisor on the inherited channel until it closes the channel,
    or it and every worker closed the alive pipe (modelled on ``multiprocessing.forkserver.main``)."""
    for fd in (channel_fd, alive_r):  # inherited, so inheritable: never again (nothing here execs, but still)
        os.set_inheritable(fd, False)
    channel = socket.socket(fileno=channel_fd)
    supervisor = SUPERVISOR_PID
    if supervisor is None or peer_credentials(channel)[:2] != (supervisor, os.getuid()):
        _say(f"refusing to serve: the channel was not made by the supervisor {supervisor}")
        os._exit(1)
    channel.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    mp_util._close_stdin()  # type: ignore[attr-defined]
    sig_r, sig_w = os.pipe()
    os.set_blocking(sig_r, False)
    os.set_blocking(sig_w, False)
    handlers: dict[signal.Signals, Any] = {signal.SIGCHLD: lambda *_: None, signal.SIGINT: signal.SIG_IGN}
    old_handlers = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    signal.set_wakeup_fd(sig_w)
    status_of: dict[int, int] = {}  # child pid -> the write end of its status pipe (pid, later exit code)
    ancillary_size = socket.CMSG_SPACE(MAX_FDS * 4) + socket.CMSG_SPACE(CREDENTIALS.size)
    with selectors.DefaultSelector() as selector:
        selector.register(channel, selectors.EVENT_READ)
        selector.register(alive_r, selectors.EVENT_READ)
        selector.register(sig_r, selectors.EVENT_READ)
        while True:
            ready = [key.fileobj for key, _ in selector.select()]
            if alive_r in ready:  # the supervisor and every worker are gone
                raise SystemExit
            if sig_r in ready:
                _report_exits(sig_r, status_of)
            if channel not in ready:
                continue
            try:
                data, ancillary, flags, _ = channel.recvmsg(len(REQUEST) + 1, ancillary_size, socket.MSG_CMSG_CLOEXEC)
            except InterruptedError:
                continue
            if not data:  # the supervisor is gone: a live one ends this process by SIGTERM, never by closing
                for fd in parse_request(data, ancillary, flags, supervisor, os.getuid()).fds:
                    os.close(fd)
                # Its descriptors close before the kernel sends this process its parent-death signal, so
                # the end of stream may come first: the session ends here as the signal would end it (a
                # plain exit would leave a worker a command stops just now stopped for good).
                end_session(0)
            request = parse_request(data, ancillary, flags, supervisor, os.getuid())
            if request.refused is not None:
                for fd in request.fds:
                    os.close(fd)
                _say(f"refused a request: {request.refused}")
                _answer(channel, REFUSED)
                continue
            child_r, child_w, *fds = request.fds
            try:
                pid = os.fork()
            except OSError as exc:
                for fd in request.fds:
                    os.close(fd)
                _say(f"could not fork a worker: {exc.strerror}")
                _answer(channel, FORK_FAILED)
                continue
            if pid == 0:
                code = 1
                try:  # nothing of the forkserver's stays open in a worker: not the channel, above all
                    channel.close()
                    selector.close()
                    code = mp_forkserver._serve_one(  # type: ignore[attr-defined]
                        child_r, fds, [alive_r, child_w, sig_r, sig_w, *status_of.values()], old_handlers)
                except Exception:
                    sys.excepthook(*sys.exc_info())
                    sys.stderr.flush()
                finally:
                    os._exit(code)
            try:
                mp_forkserver.write_signed(child_w, pid)
            except BrokenPipeError:  # the supervisor gave up on this start
                pass
            status_of[pid] = child_w
            os.close(child_r)
            for fd in fds:
                os.close(fd)
            _answer(channel, pid)


def _answer(channel: socket.socket, pid: int) -> None:
    try:
        channel.send(PID.pack(pid))
    except OSError:  # the supervisor is gone: the next select sees the channel's end
        pass


def _report_exits(sig_r: int, status_of: dict[int, int]) -> None:
    """Reap exited children; write each worker's exit code to its status pipe (``Process.sentinel``)."""
    try:
        os.read(sig_r, 65536)
    except BlockingIOError:
        pass
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        child_w = status_of.pop(pid, None)
        if child_w is None:  # the warm-up's processes are reaped by their own code
            continue
        try:
            mp_forkserver.write_signed(child_w, os.waitstatus_to_exitcode(status))
        except BrokenPipeError:
            pass
        os.close(child_w)


def _warm_up(rounds: int = WARM_UP_ROUNDS) -> None:
    """Serve a few calls of a tool that runs ``/bin/true``, here, before forking any worker
    (see :func:`peon.workers.worker.warm_up`)."""
    if SESSION is None:  # a session too large for the environment: each worker builds its own
        return
    audit_descriptors(report=False)  # multiprocessing's own descriptors here: this process never execs
    loop = asyncio.new_event_loop()
    try:
        worker.warm_up(loop, SESSION, TOOLS.values(), rounds, processes=True)
    finally:
        loop.close()
        asyncio.set_event_loop(None)


_become_forkserver()
