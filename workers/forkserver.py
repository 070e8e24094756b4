"""What the session's forkserver loads: the preload module of :mod:`multiprocessing.forkserver`.

The supervisor starts its workers with ``multiprocessing.get_context("forkserver")``. The standard
library's forkserver is a fresh interpreter started by the supervisor (``python -B -P -c 'from
multiprocessing.forkserver import main; ...'``) that imports the modules named by
``set_forkserver_preload`` and then forks one child per ``Process.start()``. The supervisor names
this module, and importing it *in that process* makes the forkserver Peon's:

* it dies with its supervisor (parent-death ``SIGKILL``, armed before anything else, then a check
  that the supervisor is still its parent), and is not dumpable (no ptrace, no ``pidfd_getfd`` from
  processes of the same user; its workers inherit that);
* in cgroup mode it joins the session's ``workers`` cgroup first, so every worker is born there;
* it is lean: it loads the worker, the runtime and the session's tool modules, and no validation,
  approval or configuration code (no pydantic, no jsonschema, nothing of the supervisor's but the
  skill record), so workers forked from it are small and quick to start; then ``gc.freeze()`` so
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
import multiprocessing
import os
import signal
import sys
import time
from typing import Any

import multiprocessing.popen_forkserver  # noqa: F401  (unpickling a Process in a worker needs it: load it once here)
from setproctitle import setproctitle

from peon.framing import encode_json
from peon.tool import SessionView, Tool, ToolRisk

from . import linux, worker
from .channel import FrameChannel, socket_of
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
    linux.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != info["supervisor"]:  # the supervisor died before the death signal was armed
        os._exit(1)
    linux.set_dumpable(False)
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


class _WarmUpTool(Tool):
    name = "peon_warm_up"
    description = "Returns at once: runs a worker's path in the forkserver before any fork."
    risk = ToolRisk.READ_ONLY
    input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def approval_summary(self, args: Any) -> str:
        return "nothing"

    async def execute(self, args: Any, ctx: Any) -> dict[str, Any]:
        return {"done": True}


async def _warm_up_round(ours: Any, theirs: Any, call: bytes, session: SessionView) -> None:
    supervisor_side = FrameChannel(socket_of(ours))
    serving = asyncio.ensure_future(worker._serve_one(theirs, call, session, {_WarmUpTool.name: _WarmUpTool()}))
    try:
        async with asyncio.timeout(5.0):
            await supervisor_side.recv()  # its result
            supervisor_side.close()  # and the worker's linger ends
            await serving
    finally:
        supervisor_side.close()
        serving.cancel()


def _warm_up(rounds: int = WARM_UP_ROUNDS) -> None:
    """Serve a few calls of a tool that does nothing, here, before forking anything. Python 3.11
    specializes bytecode in place as it runs and every object it touches has its reference count
    written: run once here, the pages of the worker's path are already written when the forkserver
    forks, so each worker copies fewer of them (and its caches start warmer). Measured on the loaded
    2-core development machine: a forked child ran the same channel round trips in 1.8-2.1 ms after a
    warm-up in its parent against 2.9-8.1 ms cold."""
    if SESSION is None:  # a session too large for the environment: each worker builds its own
        return
    session = SESSION
    title = None
    try:
        from setproctitle import getproctitle

        title = getproctitle()
        for _ in range(rounds):
            ours, theirs = multiprocessing.Pipe(duplex=True)
            call = {"op": "call", "id": "warm-up", "tool": _WarmUpTool.name, "args": {}, "deadline": time.monotonic() + 60,
                    "approved": {}, "progress": False}
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(_warm_up_round(ours, theirs, encode_json(call), session))
            finally:
                loop.close()
                asyncio.set_event_loop(None)
    except Exception as exc:  # a warm-up that fails costs speed, nothing else
        print(f"peon-forkserver: warm-up skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        worker.CURRENT_CHANNEL = None
        if title is not None:
            setproctitle(title)


_become_forkserver()
