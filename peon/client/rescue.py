"""The end of a session's supervisor as the client handles it: waited for, killed when it must be, and
nothing of its session left behind when it died.

Promises:

* :meth:`Rescue.kill` stops the supervisor first, so that nothing it started can escape to init while
  the tree below it is killed (workers, commands, daemons), then kills it and reaps it;
* once the supervisor is gone, :meth:`Rescue.contain_leftovers` kills the tree of every worker the
  supervisor told of (``worker``) and did not see go (``worker_gone``), if it is still the process it
  named (same pid, same start time: a reused pid is never signalled; a stopped worker runs no
  parent-death handler), then every process of the session's cgroup with its tree, then the cgroup;
  several threads may ask at once, one cleans;
* at most :data:`MAX_TRACKED_WORKERS` workers are tracked, whatever a broken supervisor sends;
* :meth:`Rescue.exit_description` says how the supervisor ended, in words a caller can act on, and
  :attr:`Rescue.gave_up` why the client killed it, when it did.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from peon.workers import proctree
from peon.workers.cgroup import Cgroup, session_cgroup_path

# The most workers the client tracks at once (process-tree containment); a supervisor has a few
# (standbys, the running call, jobs.max_running jobs): the bound only caps what a broken one could send.
MAX_TRACKED_WORKERS = 4096


class Rescue:
    """One supervisor process's end, and the clean-up of what it leaves."""

    def __init__(self, proc: subprocess.Popen[bytes], session_id: str):
        self.proc = proc
        self.session_id = session_id
        self.gave_up: str | None = None  # why the client killed an unresponsive supervisor
        self.cgroup: str | None = None  # the session's cgroup, as the supervisor reported it when ready
        self.lock = threading.Lock()
        self.contain_lock = threading.Lock()
        # The supervisor's workers (pid -> start time), in process-tree containment: killed by the client
        # if they outlive their supervisor (a stopped worker runs no parent-death handler).
        self.workers: dict[int, float] = {}

    def track_worker(self, message: dict[str, Any]) -> None:
        """Record a worker the supervisor started (``worker``: its pid and start time) or forget one that
        is gone (``worker_gone``). Anything malformed is ignored; the table is bounded."""
        pid, start_time = message.get("pid"), message.get("start_time")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            return
        with self.lock:
            if message.get("op") == "worker_gone":
                self.workers.pop(pid, None)
            elif isinstance(start_time, (int, float)) and not isinstance(start_time, bool):
                if len(self.workers) >= MAX_TRACKED_WORKERS:
                    self.workers.pop(next(iter(self.workers)))
                self.workers[pid] = float(start_time)

    def kill_tracked_workers(self) -> None:
        """Kill the tree of every worker the supervisor told of and did not see go, if it is still the
        process it named (same pid, same start time: a reused pid is never signalled)."""
        with self.lock:
            workers, self.workers = self.workers, {}
        if not workers:
            return
        import psutil  # only here, once a supervisor is gone

        for pid, start_time in workers.items():
            try:
                if psutil.Process(pid).create_time() != start_time:
                    continue
            except psutil.Error:
                continue
            proctree.kill_tree(pid, include_root=True, timeout=2.0)

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the supervisor to exit and reap it (``subprocess.TimeoutExpired``
        past it). A pidfd wakes this the moment it exits; ``Popen.wait(timeout)`` would poll with
        sleeps of up to 50 ms, which every close paid."""
        if self.proc.poll() is not None:
            return
        try:
            pidfd = os.pidfd_open(self.proc.pid)
        except OSError:  # reaped meanwhile, or no pidfds on this kernel
            self.proc.wait(timeout)
            return
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            if not poller.poll(max(0, int(timeout * 1000))):
                raise subprocess.TimeoutExpired(self.proc.args, timeout)
        finally:
            os.close(pidfd)
        self.proc.wait()

    def exit_description(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "is not responding"
        if code < 0:
            sender = "another process or the out-of-memory killer" if -code == 9 else "another process"
            return (f"was killed by {proctree.signal_name(-code)}, sent by {sender} (this client sends none but "
                    "to a supervisor it gave up on); call Session.restart() or open a new session")
        if code > 128 and proctree.signal_name(code - 128).startswith("SIG"):
            return (f"closed the session on {proctree.signal_name(code - 128)} (exit status {code}), sent by "
                    "another process (this client sends none); call Session.restart() or open a new session")
        return f"exited with status {code}"

    def kill(self, reason: str | None = None) -> None:
        """Kill the supervisor and everything below it: stopped first, so that nothing it started can
        escape to init while the tree below it is killed (workers, commands, daemons), then killed.
        ``reason``: why the client gave up on it, which the pending calls are answered with."""
        if reason is not None:
            self.gave_up = reason
        if self.proc.poll() is None:
            survivors = proctree.kill_tree(self.proc.pid, include_root=True, timeout=5.0)
            if survivors:
                print(f"peon: processes {survivors} of the session's supervisor survived SIGKILL", file=sys.stderr)
            self.proc.wait()
        self.contain_leftovers()

    def end(self, timeout: float) -> None:
        """The channel has ended: wait up to ``timeout`` for the supervisor to exit (killing it past
        that), then clean what it left."""
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.contain_leftovers()

    def contain_leftovers(self) -> None:
        """Once the supervisor is gone, if it died, kill what is left of its session: every worker it told
        of that is still alive, with its tree (process-tree containment), and every process in its
        cgroup with everything below it (a descendant may have moved itself to another cgroup), then the
        cgroup.
        Workers kill their own trees too, when their forkserver dies. Several threads may get here at
        once (the reader seeing the end of the channel, ``close()`` giving up on a slow supervisor):
        one cleans, and the cgroup code tolerates a tree that vanishes."""
        with self.contain_lock:
            self.kill_tracked_workers()
            candidate = Path(self.cgroup) if self.cgroup else session_cgroup_path(self.session_id, self.proc.pid)
            if candidate is None or not candidate.is_dir():
                return
            group = Cgroup(candidate)
            for pid in group.all_pids():
                proctree.kill_tree(pid, include_root=True, timeout=2.0)
            group.kill_and_remove()
