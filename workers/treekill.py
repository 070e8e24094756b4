"""How a worker kills everything below it: its cgroup where it has one, a freeze-then-kill sweep otherwise.

Promise: after :meth:`Tree.kill_descendants` every descendant of this worker that existed or was
being forked has ``SIGKILL`` pending; the worker itself is untouched. The caller then reaps until the
worker has no children (see :mod:`workers.runner`).

In cgroup mode the supervisor places each worker in ``worker-<pid>/tree/``. To kill, the worker
steps out into ``worker-<pid>/``, writes ``cgroup.kill`` on ``tree/`` — the kernel kills every member,
including ones forked while the kill runs — and steps back in, so processes a tool starts afterwards
are contained again. The common case, nothing left below the worker, costs one read of its children.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import proctree
from .limits import CgroupProbe, ResourceLimits, TreeProbe


class Tree:
    def kill_descendants(self) -> int:
        return proctree.freeze_and_kill(os.getpid())

    def limit_probe(self, limits: ResourceLimits) -> TreeProbe | CgroupProbe:
        return TreeProbe(limits, os.getpid())

    def kill_everything(self) -> None:
        """Parent-death path: kill the tree; the worker exits right after."""
        self.kill_descendants()


class CgroupTree(Tree):
    def __init__(self, tree: Path):
        self.tree = tree
        self.home = tree.parent

    def limit_probe(self, limits: ResourceLimits) -> TreeProbe | CgroupProbe:
        return CgroupProbe(limits, self.home, os.getpid())

    def _move_self(self, group: Path) -> None:
        with open(group / "cgroup.procs", "w") as f:
            f.write("0")

    def kill_descendants(self) -> int:
        if not proctree.children(os.getpid()):
            return 0
        try:
            self._move_self(self.home)
            with open(self.tree / "cgroup.kill", "w") as f:
                f.write("1")
            self._move_self(self.tree)
        except OSError:
            return super().kill_descendants()  # the cgroup went away: fall back to the sweep
        return 1

    def kill_everything(self) -> None:
        try:
            with open(self.home / "cgroup.kill", "w") as f:
                f.write("1")  # includes this worker, which is exiting anyway
        except OSError:
            super().kill_everything()


# The strategy of this process; the worker replaces it when its supervisor gives it a cgroup.
current: Tree = Tree()
