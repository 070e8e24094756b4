"""Process trees: list a process's descendants, freeze them, kill them, wait until they are gone.

Promise: :func:`freeze_and_kill` returns only after every descendant of ``root`` that existed or was
created while it ran has been sent ``SIGKILL``, and a fork loop cannot outrun it: every process is
stopped with ``SIGSTOP`` (and seen to stop) before anything is killed, and the tree is listed again
until a pass finds nothing new. Descendants stay reachable because Peon's supervisors and workers are
child subreapers: an orphan is reparented to them, never to init.

These functions only ever signal pids found below ``root`` — never by name.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Iterable

_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def stat_fields(pid: int) -> tuple[str, int, int] | None:
    """(state letter, parent pid, process group) of ``pid``, or None if it is gone."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    after_comm = text.rpartition(")")[2].split()
    if len(after_comm) < 3:
        return None
    return after_comm[0], int(after_comm[1]), int(after_comm[2])


def cmdline(pid: int) -> str:
    """The command line (or process title) of ``pid``, arguments joined by spaces; "" if it is gone."""
    text = _read(f"/proc/{pid}/cmdline")
    return text.replace("\0", " ").strip() if text else ""


def state(pid: int) -> str | None:
    fields = stat_fields(pid)
    return fields[0] if fields else None


def _children_by_scan() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields:
                tree.setdefault(fields[1], []).append(int(entry))
    return tree


def children(pid: int) -> list[int]:
    if not _CHILDREN_FILES:
        return _children_by_scan().get(pid, [])
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return found
    for tid in tasks:
        text = _read(f"/proc/{pid}/task/{tid}/children")
        if text:
            found.extend(int(p) for p in text.split())
    return found


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (not ``root`` itself), parents before children."""
    if not _CHILDREN_FILES:
        tree = _children_by_scan()
        get = lambda pid: tree.get(pid, [])  # noqa: E731
    else:
        get = children
    out: list[int] = []
    seen = {root}
    frontier = [root]
    while frontier:
        nxt = []
        for pid in frontier:
            for child in get(pid):
                if child not in seen:
                    seen.add(child)
                    out.append(child)
                    nxt.append(child)
        frontier = nxt
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# A stopped ('T'/'t'), dead ('Z'/'X') or uninterruptible ('D') process cannot return to user space
# without first acting on its pending SIGSTOP, so it cannot fork again.
_SETTLED = frozenset("TtZXD")


class _Freezer:
    """Signals a tree by process group where that is safe: one ``killpg`` instead of one ``kill`` per
    member matters when a fork loop has hundreds of members (each signal wakes its target).

    A group is signalled whole only if it is not the group of this process or of ``root`` (those hold
    processes outside the tree, e.g. the supervisor). Any other group found below ``root`` was created
    inside the tree — groups never span sessions, and every session below was created inside it — so
    ``killpg`` reaches nobody else.
    """

    def __init__(self, root: int):
        self.protected = {os.getpgid(0)}
        try:
            self.protected.add(os.getpgid(root))
        except ProcessLookupError:
            pass
        self.singles: set[int] = set()
        self.groups: set[int] = set()
        self.seen: set[int] = set()

    def stop(self, pid: int) -> None:
        self.seen.add(pid)
        fields = stat_fields(pid)
        if fields is None:
            return
        group = fields[2]
        if group in self.protected or group <= 1:
            self.singles.add(pid)
            _signal(pid, signal.SIGSTOP)
        elif group not in self.groups:
            self.groups.add(group)
            _signal_group(group, signal.SIGSTOP)

    def kill(self) -> None:
        for group in self.groups:
            _signal_group(group, signal.SIGKILL)
        for pid in self.singles:
            _signal(pid, signal.SIGKILL)


def _signal_group(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass


def freeze_and_kill(root: int, *, include_root: bool = False, settle_seconds: float = 0.5) -> int:
    """Stop the whole tree below ``root``, then SIGKILL it. Returns how many processes were signalled."""
    freezer = _Freezer(root)
    if include_root:
        freezer.singles.add(root)
        freezer.seen.add(root)
        _signal(root, signal.SIGSTOP)
    settle_until = time.monotonic() + settle_seconds
    while True:
        fresh = [p for p in descendants(root) if p not in freezer.seen]
        if not fresh and not freezer.seen:
            return 0  # the common case: nothing below root at all
        for pid in fresh:
            freezer.stop(pid)
        if fresh:
            continue
        # Nothing new: wait until every frozen process has really stopped, then list once more.
        running = [p for p in freezer.seen if (s := state(p)) is not None and s not in _SETTLED]
        if not running or time.monotonic() > settle_until:
            if not [p for p in descendants(root) if p not in freezer.seen]:
                break
            continue
        time.sleep(0.0005)
    freezer.kill()
    return len(freezer.seen)


def reap_all() -> list[tuple[int, int]]:
    """Reap every child that has exited; returns (pid, wait status) pairs."""
    reaped = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        reaped.append((pid, status))
    return reaped


def alive(pids: Iterable[int]) -> list[int]:
    """The pids in ``pids`` that still exist and are not zombies."""
    return [p for p in pids if (s := state(p)) is not None and s not in "ZX"]
