"""Peon's own processes abandoned for good, found and ended without a cgroup.

Promises:

* :func:`judge` (pure) calls a process *abandoned* when it is one of Peon's — titled ``peon-supervisor``,
  ``peon-forkserver`` or ``peon-worker`` — stopped (``T``), and cut off from its session: a supervisor
  whose parent is init (a supervisor's parent is its client, which died), a forkserver whose parent is not
  a ``peon-supervisor``, a worker whose parent is neither a ``peon-forkserver`` nor a ``peon-supervisor``
  (a worker's parent is its forkserver, or after its death the supervisor, a subreaper). Stopped, such a
  process runs no parent-death handler, and nothing of its session is left alive to continue or kill it:
  left alone, it and the commands below it live for good. A running one is not judged: it ends itself;
* :func:`end_abandoned` finds every abandoned process of this user, opens a pidfd to it, checks again
  through ``/proc`` that it is the same stopped orphan, kills everything below it, then it through the
  pidfd (a pid reused meanwhile is never signalled); it returns what it ended.

Process-tree containment has no cgroup to find what a session left when its client and supervisor died
together (a command that stops its worker and kills both; a supervisor stopped from outside while its
client is killed): a later session ends them as its first worker starts, in either containment
(:mod:`peon.supervisor.containment`), and ``peon doctor --clean`` does too. The title is the evidence
(a process's title is its own to set): a process that titles itself so and stops itself is ended with
what is below it — its own tree, nothing else.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from peon.workers import proctree

KINDS = ("peon-supervisor", "peon-forkserver", "peon-worker")


@dataclass(frozen=True)
class Seen:
    """One process as ``/proc`` shows it: enough to judge it."""

    pid: int
    state: str
    title: str
    parent_title: str
    ppid: int


def kind_of(title: str) -> str | None:
    """Which of Peon's processes ``title`` names, or None."""
    first = title.split(" ", 1)[0]
    return first if first in KINDS else None


def judge(seen: Seen) -> bool:
    """Whether ``seen`` is abandoned for good (see the module's promise)."""
    kind = kind_of(seen.title)
    if kind is None or seen.state != "T":
        return False
    parent = kind_of(seen.parent_title)
    if kind == "peon-supervisor":
        return seen.ppid == 1
    if kind == "peon-forkserver":
        return parent != "peon-supervisor"
    return parent not in ("peon-forkserver", "peon-supervisor")


def look(pid: int) -> Seen | None:
    """``pid`` as ``/proc`` shows it now, if it is a stopped process of this user titled as Peon's."""
    fields = proctree.stat_fields(pid)
    if fields is None or fields[0] != "T":
        return None
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return None
    except OSError:
        return None
    title = _title(pid)
    if kind_of(title) is None:
        return None
    return Seen(pid, fields[0], title, _title(fields[1]) if fields[1] > 1 else "", fields[1])


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(4096).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def end_abandoned() -> list[str]:
    """End every abandoned process of this user with everything below it; each ended one described."""
    ended: list[str] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        seen = look(pid)
        if seen is None or not judge(seen):
            continue
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            again = look(pid)  # the pidfd names this process now: is it still the one judged?
            if again is None or not judge(again) or again.title != seen.title:
                continue
            proctree.kill_tree(pid, timeout=2.0)
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            ended.append(f"{pid} {seen.title[:80]}")
        except OSError:
            continue
        finally:
            os.close(pidfd)
    return ended
