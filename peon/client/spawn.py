"""Starting a session's supervisor process: the first step of opening a :class:`peon.Session`, kept in a
module of its own so a front end can take it before it loads anything else.

Promises:

* :func:`launch` returns a :class:`Launch`: a fresh interpreter running ``python -P -m peon.supervisor`` in a
  new session (its own process group), in ``/``, with the session's environment, stdin and stdout on
  ``/dev/null``, this process's stderr, and no other descriptor of this process but its end of one
  socket. Not in the workspace: ``multiprocessing`` starts every forkserver and worker in its parent's
  working directory by path, so a workspace renamed while a worker started made that worker fail its
  ``chdir`` (and a symlink put in its place would have been entered instead); the session's processes
  use the pinned workspace descriptor, and every command gets its own directory. It starts
  nothing and opens nothing until the session sends it the start message; when that socket closes
  first (this process died, or :meth:`Launch.abandon`), it exits.
* :meth:`Launch.abandon` kills and reaps it; it is idempotent, and a no-op once a session has adopted
  the launch (:meth:`Launch.adopt`). A launch creates nothing in the file system: no runtime directory,
  no socket with a name (the supervisor reaches its forkserver over an inherited socket pair).
* The module imports nothing of Peon's and no third-party package, so importing it costs a few
  milliseconds: ``peon mcp`` starts its supervisor while its own interpreter is still loading the MCP
  server, and the two start-ups overlap (docs/architecture.md, "Processes", the client).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path


def import_root() -> str:
    """The directory this ``peon`` package is imported from (a checkout, or site-packages): the supervisor
    imports the same Peon, and nothing else from there, ahead of the session's own ``PYTHONPATH``."""
    return str(Path(__file__).resolve().parents[2])


class Launch:
    """A supervisor process that waits for its start message."""

    def __init__(self, workspace: Path, env: Mapping[str, str]):
        self.workspace = workspace
        self.env = dict(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        child_env = dict(self.env)  # the supervisor runs with the session's environment
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (import_root(), child_env.get("PYTHONPATH")) if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-m", "peon.supervisor", "--fd", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                cwd="/", env=child_env, start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self._lock = threading.Lock()
        self._settled = False  # adopted by a session, or abandoned

    def matches(self, workspace: Path, env: Mapping[str, str]) -> bool:
        """Whether this launch is the supervisor a session of ``workspace`` with ``env`` would start."""
        return self.workspace == workspace and self.env == dict(env) and self.process.poll() is None

    def adopt(self) -> bool:
        """Hand the process to a session; False when it was adopted or abandoned already."""
        with self._lock:
            if self._settled:
                return False
            self._settled = True
            return True

    def abandon(self) -> None:
        """Kill and reap the process, unless a session adopted it. Until its start message it has
        started nothing, so killing it alone leaves nothing behind."""
        if self.adopt():
            self.kill()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.sock.close()


def launch(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Launch:
    """Start the supervisor of a session of ``workspace`` (an existing directory) with ``env``
    (``os.environ`` when None); pass it to :class:`peon.Session` as ``launch=``."""
    return Launch(Path(workspace).expanduser().resolve(), os.environ if env is None else env)
