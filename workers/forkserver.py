"""The forkserver: a lean process that forks the session's workers when its supervisor asks.

Promise:

* it runs in a fresh interpreter that loads only what a worker needs (the runtime and the session's
  tool modules, no validation or approval code), so a worker forked from it is small and quick to
  start, and the supervisor never forks itself (no copy-on-write of its working set, no fork on its
  event loop);
* each ``fork`` request yields one worker — a child of the forkserver — and a pidfd for it, sent back
  over the control socket; when a worker exits the forkserver reaps it and reports its wait status;
* it dies with its supervisor (parent-death ``SIGKILL``), and its workers get their own parent-death
  signal when it dies, so they kill their trees and exit;
* it is not a subreaper: the orphans of a dying worker are reparented past it to the supervisor.

The session (workspace, configuration, environment, skills, tool import paths) arrives as one JSON
object on stdin. Then the control socket (``SOCK_SEQPACKET``: one JSON object per packet, file
descriptors attached) carries ``ready`` | ``fatal``; ``fork`` + the worker's channel socket →
``forked`` + a pidfd; and unprompted ``exited`` messages with a pid and its wait status.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import sys
import traceback
from pathlib import Path
from setproctitle import setproctitle

from peon.configview import ResolvedConfig
from peon.errors import PeonError
from peon.registry import resolve_import_path
from peon.tool import SessionView, Tool
from supervisor.skills import SkillRecord

from . import linux
from .proctree import reap_all
from .worker import become_worker

MAX_PACKET = 4096  # control packets are small; the session itself comes on stdin


def send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


def session_from_wire(wire: dict) -> SessionView:
    return SessionView(
        workspace=Path(wire["workspace"]),
        config=ResolvedConfig(wire["config"]).config,
        env=dict(wire["env"]),
        session_id=wire["session_id"],
        skills={record["name"]: SkillRecord(**record) for record in wire["skills"]},
        sandbox=wire.get("sandbox") or {},
    )


def load_tools(paths: list[str]) -> dict[str, Tool]:
    """The supervisor checked these tools when it registered them; here they are only loaded."""
    tools = {}
    for path in paths:
        obj = resolve_import_path(path)
        tool = obj() if isinstance(obj, type) else obj
        tools[tool.name] = tool
    return tools


def serve(ctl: socket.socket) -> int:
    start = json.loads(sys.stdin.buffer.read())
    try:
        session = session_from_wire(start["session"])
        tools = load_tools(start["tools"])
    except PeonError as exc:
        send(ctl, {"op": "fatal", "error": exc.to_dict()})
        return 1
    setproctitle(f"peon-forkserver {session.workspace}")
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
    send(ctl, {"op": "ready"})
    me = os.getpid()
    while True:
        ready, _, _ = select.select([ctl, wake_read], [], [])
        if wake_read in ready:
            while os.read(wake_read, 4096) == 4096:
                pass
            for pid, status in reap_all():
                send(ctl, {"op": "exited", "pid": pid, "status": status})
        if ctl in ready:
            try:
                data, fds, _, _ = socket.recv_fds(ctl, MAX_PACKET, 1)
            except ConnectionResetError:
                data, fds = b"", []
            if not data:
                return 0  # the supervisor closed the control socket: nothing more to fork
            if json.loads(data).get("op") != "fork" or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                continue
            pid = os.fork()
            if pid == 0:
                ctl.detach()
                become_worker(socket.socket(fileno=fds[0]), me, session, tools)
            pidfd = os.pidfd_open(pid)
            send(ctl, {"op": "forked", "pid": pid}, [pidfd])
            os.close(pidfd)
            os.close(fds[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m workers.forkserver")
    parser.add_argument("--fd", type=int, required=True, help="the control socket to the supervisor")
    parser.add_argument("--supervisor", type=int, required=True, help="the supervisor's pid")
    options = parser.parse_args(argv)
    linux.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != options.supervisor:  # the supervisor died before the death signal was armed
        sys.exit(1)
    setproctitle("peon-forkserver (starting)")
    ctl = socket.socket(fileno=options.fd)
    try:
        code = serve(ctl)
    except Exception:
        traceback.print_exc(file=sys.stderr)
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
