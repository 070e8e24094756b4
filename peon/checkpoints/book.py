"""A session's checkpoint book: a snapshot before each call or job that can change the workspace, its
changes after, written to the store and the record log — by the supervisor, and by a rewind.

Promises:

* :meth:`Book.begin` snapshots the workspace and writes the ``before`` line naming the tree; it never
  raises: a snapshot that fails or takes longer than ``max_seconds`` writes a ``not_checkpointed``
  line with the reason and returns None — never silently;
* :meth:`Book.end` snapshots again, writes the ``after`` line with what changed since the ``before``
  (:class:`peon.checkpoints.summary.Changes`), the files dropped as too large, the files that changed
  while the snapshot was taken (``unsettled``: asked for when other calls or jobs ran beside) and
  the ids given as ``shared_with``; it returns the ``changes`` a call's result carries;
* :meth:`Book.rewind` checkpoints the workspace first (a ``before`` line of its own id, so a rewind
  can itself be rewound) and only then restores, under one lock;
* the store is used by one book at a time, across processes: a thread lock and an ``flock`` on the
  store's ``lock`` file around every snapshot and rewind;
* past ``max_store_bytes`` the oldest entries' trees are released (never the newest entry's, nor the
  one just begun) and their objects pruned, each pruned entry getting a ``pruned`` line, and the
  ``changes`` returned then say how many were pruned.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from peon.checkpoints import records
from peon.checkpoints.gitstore import GitStore, StoreError
from peon.checkpoints.head import workspace_head

STORE_DIR = "checkpoints"
SIZE_CHECK_EVERY = 25  # ends between two measurements of the store's size


class Book:
    def __init__(self, state_dir: Path, workspace: Path, *, exclude: tuple[str, ...] | list[str] = (),
                 max_file_bytes: int = 10 * 1024 * 1024, max_store_bytes: int = 1024 ** 3,
                 max_seconds: float = 10.0):
        self.directory = Path(state_dir) / STORE_DIR
        self.workspace = Path(workspace)
        self.store = GitStore(self.directory, self.workspace, exclude=exclude, max_file_bytes=max_file_bytes)
        self.max_store_bytes = max_store_bytes
        self.max_seconds = max_seconds
        self._lock = threading.Lock()
        self._ends = 0

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def write(self, record: dict[str, Any]) -> None:
        records.append(self.directory, record)

    def begin(self, ident: str, tool: str | None, *, kind: str = "call", **extra: Any) -> str | None:
        """Snapshot before ``ident`` runs; the tree, or None (not checkpointed, and said)."""
        with self.locked():
            try:
                snapshot = self.store.snapshot(self.max_seconds)
            except (StoreError, OSError) as exc:
                self.write({"event": "before", "id": ident, "tool": tool, "kind": kind, "tree": None,
                            "at": time.time(), **extra})
                self.write({"event": "not_checkpointed", "id": ident, "reason": str(exc), "at": time.time()})
                return None
            self.write({"event": "before", "id": ident, "tool": tool, "kind": kind, "tree": snapshot.tree,
                        "head": workspace_head(self.workspace), "at": time.time(), **extra})
            return snapshot.tree

    def end(self, ident: str, before: str | None, *, shared_with: list[str] | tuple[str, ...] = (),
            check_settled: bool = False) -> dict[str, Any]:
        """Snapshot after ``ident``; what it changed since ``before`` (its ``changes``)."""
        if before is None:
            return {"checkpoint": None, "not_checkpointed": "no checkpoint was taken before it (see the record)"}
        with self.locked():
            try:
                snapshot = self.store.snapshot(self.max_seconds, check_settled=check_settled)
                changes = self.store.diff(before, snapshot.tree, self.max_seconds)
                changed = [item.path for item in changes.files if item.status in ("added", "modified", "renamed")]
                tree, large = self.store.drop_large(changed, self.max_seconds)
                if large:
                    snapshot.tree, snapshot.dropped = tree, [*snapshot.dropped, *large]
            except (StoreError, OSError) as exc:
                self.write({"event": "not_checkpointed", "id": ident, "reason": str(exc), "at": time.time()})
                return {"checkpoint": before, "not_checkpointed": str(exc)}
            summary = changes.to_dict()
            head = workspace_head(self.workspace)
            self.write({"event": "after", "id": ident, "tree": snapshot.tree, "head": head, "at": time.time(),
                        "changes": summary, "shared_with": list(shared_with), "dropped": snapshot.dropped,
                        "unsettled": snapshot.unsettled})
            result: dict[str, Any] = {"checkpoint": before, **summary}
            if shared_with:
                result["shared_with"] = list(shared_with)
            if snapshot.dropped:
                result["not_stored"] = snapshot.dropped[:50]
            if snapshot.unsettled:
                result["unsettled"] = snapshot.unsettled[:50]
            pruned = self._bound(keep={before, snapshot.tree})
            if pruned:
                result["pruned_checkpoints"] = pruned
            return result

    def adopt(self, ident: str, tree: str | None, tool: str | None, *, kind: str, **extra: Any) -> None:
        """A ``before`` line for ``ident`` naming a snapshot already taken (a background job begins at
        its call's)."""
        self.write({"event": "before", "id": ident, "tool": tool, "kind": kind, "tree": tree,
                    "head": workspace_head(self.workspace), "at": time.time(), **extra})

    def rewind(self, ident: str, target: str, **extra: Any) -> str:
        """Snapshot the workspace as ``ident`` (a ``before`` line, so the rewind can be undone), then make
        its stored files those of ``target``; the snapshot's tree. Raises :class:`StoreError` when the
        workspace could not be checkpointed first (nothing is then changed)."""
        with self.locked():
            if not self.store.has(target, self.max_seconds):
                raise StoreError(f"checkpoint {target} is no longer in the store (pruned)")
            snapshot = self.store.snapshot(self.max_seconds)
            self.write({"event": "before", "id": ident, "tool": "rewind", "kind": "rewind", "tree": snapshot.tree,
                        "head": workspace_head(self.workspace), "at": time.time(), **extra})
            self.store.restore(target, self.max_seconds * 6)
            return snapshot.tree

    def _bound(self, keep: set[str]) -> int:
        """Prune the oldest entries while the store is over its size; how many were pruned."""
        self._ends += 1
        if self._ends % SIZE_CHECK_EVERY and self._ends > 1:
            return 0
        if self.store.size() <= self.max_store_bytes:
            return 0
        entries = [entry for entry in records.timeline(records.read(self.directory)) if not entry.pruned]
        pruned = 0
        for entry in entries[:-1]:
            trees = {tree for tree in (entry.before, entry.after) if tree} - keep
            later = {tree for other in entries[entries.index(entry) + 1:] for tree in (other.before, other.after)}
            self.store.release(trees - later)
            self.write({"event": "pruned", "id": entry.id, "at": time.time()})
            pruned += 1
            if pruned % 10 == 0 or entry is entries[-2]:
                self.store.prune(self.max_seconds * 6)
                if self.store.size() <= self.max_store_bytes * 0.8:
                    break
        return pruned
