"""What the session's forkserver loads: the preload module of :mod:`multiprocessing.forkserver`.

The supervisor starts its workers with ``multiprocessing.get_context("forkserver")``. The standard
library's forkserver is a fresh interpreter started by the supervisor (``python -P -c 'from
multiprocessing.forkserver import main; ...'``) that imports the modules named by
``set_forkserver_preload`` and then forks one child per ``Process.start()``. The supervisor names
this module, and importing it *in that process* makes the forkserver Peon's. Promises:

* it dies with its supervisor (parent-death ``SIGKILL``, armed before anything else, then a check
  that the supervisor is still its parent), and is not dumpable (no ptrace, no ``pidfd_getfd`` from
  processes of the same user; its workers inherit that);
* the descriptors it receives for each worker (``SCM_RIGHTS``) arrive close-on-exec
  (``MSG_CMSG_CLOEXEC``);
* in cgroup mode it joins the session's ``workers`` cgroup first, so every worker is born there;
* it is lean: it loads the worker, the runtime and the session's tool modules, and no validation,
  approval or configuration code (no pydantic, no jsonschema, nothing of the supervisor's:
  ``tests/test_layers.py`` checks it), so workers forked from it are small and quick to start; then ``gc.freeze()`` so
  those objects are never collected (and their pages never copied) in a worker;
* its title is ``peon-forkserver <workspace>``; it is not a subreaper, so the orphans of a dying
  worker are reparented past it to the supervisor.

The supervisor passes what this needs in the environment variable :data:`ENV` (its pid, the title,
the cgroup and the tool modules), which it removes from the forkserver's environment at once. Imported anywhere
else (tests, tools) the module does nothing. :data:`ARMED` says whether this process is an armed
forkserver (or a worker forked by one): a worker refuses to serve otherwise.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import os
import signal
import sys

import multiprocessing.popen_forkserver  # noqa: F401  (unpickling a Process in a worker needs it: load it once here)
import socket
from multiprocessing import reduction
from typing import Any, cast
from setproctitle import setproctitle

from peon.tool import SessionView, Tool

from . import linux, worker
from .messages import WAKE_SIGNAL
from .runner import audit_descriptors
from .worker import load_tools, session_from_wire

ENV = "PEON_FORKSERVER"
ARMED = False
WARM_UP_ROUNDS = 10
# The session and its tools, when the supervisor passed them: built once here, shared by every worker.
SESSION: SessionView | None = None
TOOLS: dict[str, Tool] = {}


def _become_forkserver() -> None:
    global ARMED
    spec = os.environ.pop(ENV, None)
    if spec is None:
        return
    info = json.loads(spec)
    linux.unblock_signals()
    # Ignored until a worker sets its handler: a wake that reaches a worker still preparing is lost,
    # not fatal. Nothing but the warm-up's /bin/true is started from here with it ignored.
    signal.signal(WAKE_SIGNAL, signal.SIG_IGN)
    linux.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != info["supervisor"]:  # the supervisor died before the death signal was armed
        os._exit(1)
    linux.set_dumpable(False)
    _receive_close_on_exec()
    if info.get("cgroup"):  # every worker is forked into it: one migration for the session, none per call
        try:
            with open(os.path.join(info["cgroup"], "cgroup.procs"), "w") as f:
                f.write("0")
        except OSError as exc:
            print(f"peon-forkserver: cannot join the workers' cgroup {info['cgroup']}: {exc.strerror}", file=sys.stderr)
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
    ARMED = True
    _warm_up()
    gc.freeze()


class _CloseOnExecSocket:
    """A socket whose ``recvmsg`` asks for close-on-exec descriptors (``MSG_CMSG_CLOEXEC``)."""

    def __init__(self, sock: socket.socket):
        self._sock = sock

    def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0) -> Any:
        return self._sock.recvmsg(bufsize, ancbufsize, flags | socket.MSG_CMSG_CLOEXEC)

    def send(self, data: bytes) -> int:
        return self._sock.send(data)


def _receive_close_on_exec() -> None:
    """The descriptors a ``Process.start()`` sends (the worker's channel, the pinned root,
    ``multiprocessing``'s pipes) arrive close-on-exec here, as they would nowhere else in Peon, so none
    can reach a process that anything in the forkserver or a worker starts (workers check it again)."""
    received = reduction.recvfds

    def recvfds(sock: socket.socket, size: int) -> list[int]:
        return received(cast(socket.socket, _CloseOnExecSocket(sock)), size)  # recvfds only calls recvmsg

    reduction.recvfds = recvfds


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
