"""A session's checkpoint book: a snapshot before each call or job that can change the workspace, its
changes after, written to the store and the record log — by the supervisor, and by a rewind.

Promises:

* :meth:`Book.begin` snapshots the workspace and writes the ``before`` line naming the tree; it never
  raises: a snapshot that fails or takes longer than ``max_seconds`` writes a ``not_checkpointed``
  line with the reason and returns None — never silently; after a snapshot past its bound, calls are
  reported not checkpointed for :data:`REST_AFTER_TIMEOUT_SECONDS` rather than each waiting for it;
* :meth:`Book.end` snapshots again, writes the ``after`` line with what changed since the ``before``
  (:class:`peon.checkpoints.summary.Changes`), the files dropped as too large, the files that changed
  while the snapshot was taken (``unsettled``: asked for when other calls or jobs ran beside) and
  the ids given as ``shared_with`` and, with the watch, the excluded trees in which something
  happened (``excluded_changed``, each with its file count, never stored); it returns the ``changes``
  a call's result carries;
* with ``watch``, a snapshot of a workspace where nothing happened since the last one is that one
  again, taken without a walk (:class:`peon.checkpoints.watch.Watch`); anything the watch cannot vouch
  for is walked;
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
from peon.checkpoints.gitstore import GitStore, Snapshot, StoreError, StoreTimeout
from peon.checkpoints.head import workspace_head
from peon.checkpoints.summary import excluded_names
from peon.checkpoints.watch import Watch

STORE_DIR = "checkpoints"
SIZE_CHECK_EVERY = 25  # ends between two measurements of the store's size
EXCLUDED_COUNT_LIMIT = 100_000  # files counted in an excluded tree that changed
FIRST_SNAPSHOT_FACTOR = 10  # the first snapshot (every file stored) may take this many times max_seconds
REST_AFTER_TIMEOUT_SECONDS = 300.0  # after a snapshot past its bound: calls not checkpointed (and said) this long


class Book:
    def __init__(self, state_dir: Path, workspace: Path, *, exclude: tuple[str, ...] | list[str] = (),
                 max_file_bytes: int | None = None, max_store_bytes: int = 1024 ** 3,
                 max_seconds: float = 10.0, watch: bool = False):
        self.directory = Path(state_dir) / STORE_DIR
        self.workspace = Path(workspace)
        self.store = GitStore(self.directory, self.workspace, exclude=exclude, max_file_bytes=max_file_bytes)
        self.max_store_bytes = max_store_bytes
        self.max_seconds = max_seconds
        self._lock = threading.Lock()
        self._ends = 0
        self._exclude = list(exclude)
        self._wants_watch = watch
        self.watch: Watch | None = None
        self.last_tree: str | None = None  # the newest snapshot this book took
        self._first = True  # the first snapshot stores every file: it has a longer bound
        self._resting_until = 0.0  # after a snapshot took too long, calls are not checkpointed until then

    def _snapshot(self, *, check_settled: bool = False) -> Snapshot:
        """The workspace now: the last snapshot again when the watch says nothing changed since it was
        taken (:mod:`peon.checkpoints.watch`), else a walk of the tree by the store."""
        if self._wants_watch and self.watch is None:
            globs = [pattern.strip("/") for pattern in self._exclude if "/" in pattern.strip("/")]
            self.watch = Watch(self.workspace, excluded_names(self._exclude), globs)
        if self.watch is not None and self.last_tree is not None and self.watch.settled():
            return Snapshot(self.last_tree)
        if time.monotonic() < self._resting_until:
            raise StoreError(f"the workspace took longer than checkpoints.max_seconds ({self.max_seconds:g} s) to "
                             f"snapshot; the next attempt is in {self._resting_until - time.monotonic():.0f} s")
        if self.watch is not None:
            self.watch.clear()
        try:
            snapshot = self.store.snapshot(self.max_seconds * (FIRST_SNAPSHOT_FACTOR if self.last_tree is None
                                                               and self._first else 1),
                                           check_settled=check_settled)
        except StoreTimeout:
            self._resting_until = time.monotonic() + REST_AFTER_TIMEOUT_SECONDS
            raise
        finally:
            self._first = False
        self.last_tree = snapshot.tree
        return snapshot

    def prime(self) -> None:
        """The first snapshot, taken ahead of the first call (from a thread of the caller's): the one that
        stores every file is the longest, and is bounded by :data:`FIRST_SNAPSHOT_FACTOR` times
        ``max_seconds``. A failure is left for the first call to report."""
        with self.locked():
            try:
                self._snapshot()
            except (StoreError, OSError):
                pass

    def _excluded_changes(self) -> list[dict[str, Any]]:
        """The excluded trees in which something happened since the last call, with their file counts
        (listed as changed, never stored; a count stops at :data:`EXCLUDED_COUNT_LIMIT`)."""
        if self.watch is None:
            return []
        listed = []
        for path in self.watch.take_excluded()[:50]:
            count, top = 0, self.workspace / path
            for _folder, _dirs, files in os.walk(top):
                count += len(files)
                if count >= EXCLUDED_COUNT_LIMIT:
                    break
            listed.append({"path": path + "/", "files": count if count < EXCLUDED_COUNT_LIMIT
                           else f"{EXCLUDED_COUNT_LIMIT}+"})
        return listed

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

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

    def begin(self, ident: str, tool: str | None, *, kind: str = "call", check_settled: bool = False,
              **extra: Any) -> str | None:
        """Snapshot before ``ident`` runs; the tree, or None (not checkpointed, and said). ``check_settled``
        (other calls or jobs run): also record the files that changed while it was taken."""
        with self.locked():
            try:
                snapshot = self._snapshot(check_settled=check_settled)
            except (StoreError, OSError) as exc:
                self.write({"event": "before", "id": ident, "tool": tool, "kind": kind, "tree": None,
                            "at": time.time(), **extra})
                self.write({"event": "not_checkpointed", "id": ident, "reason": str(exc), "at": time.time()})
                return None
            self.write({"event": "before", "id": ident, "tool": tool, "kind": kind, "tree": snapshot.tree,
                        "head": workspace_head(self.workspace), "at": time.time(),
                        **({"unsettled": snapshot.unsettled} if snapshot.unsettled else {}), **extra})
            return snapshot.tree

    def end(self, ident: str, before: str | None, *, shared_with: list[str] | tuple[str, ...] = (),
            check_settled: bool = False) -> dict[str, Any]:
        """Snapshot after ``ident``; what it changed since ``before`` (its ``changes``)."""
        if before is None:
            return {"checkpoint": None, "not_checkpointed": "no checkpoint was taken before it (see the record)"}
        with self.locked():
            try:
                snapshot = self._snapshot(check_settled=check_settled)
                changes = self.store.diff(before, snapshot.tree, self.max_seconds)
                changed = [item.path for item in changes.files if item.status in ("added", "modified", "renamed")]
                tree, large = self.store.drop_large(changed, self.max_seconds)
                if large:
                    snapshot.tree, snapshot.dropped = tree, [*snapshot.dropped, *large]
                    self.last_tree = tree
            except (StoreError, OSError) as exc:
                self.write({"event": "not_checkpointed", "id": ident, "reason": str(exc), "at": time.time()})
                return {"checkpoint": before, "not_checkpointed": str(exc)}
            summary = changes.to_dict()
            head = workspace_head(self.workspace)
            self.write({"event": "after", "id": ident, "tree": snapshot.tree, "head": head, "at": time.time(),
                        "changes": summary, "shared_with": list(shared_with), "dropped": snapshot.dropped,
                        "unsettled": snapshot.unsettled})
            result: dict[str, Any] = {"checkpoint": before, **summary}
            excluded = self._excluded_changes()
            if excluded:
                result["excluded_changed"] = excluded
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
            snapshot = self._snapshot()
            self.write({"event": "before", "id": ident, "tool": "rewind", "kind": "rewind", "tree": snapshot.tree,
                        "head": workspace_head(self.workspace), "at": time.time(), **extra})
            self.store.restore(target, self.max_seconds * 6)
            self.last_tree = None  # the index is the target's now, and the watch saw the rewind's writes
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
