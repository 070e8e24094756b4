"""What a reader asks of a workspace's checkpoints: which sessions have them, what each call changed,
and the workspace put back as it was before a call.

Promises:

* :func:`sessions_for` lists the state directories (directly under the state root, never through a
  link) whose session record names the workspace and that hold checkpoints, newest first; it reads
  and runs nothing of the workspace's;
* :class:`Review` reads one session's records and store and works the same whether its supervisor
  runs, ended or was killed (a call without an ``after`` is compared with the workspace as it is now);
* :meth:`Review.rewind` restores the stored files of the workspace to the snapshot taken just before
  the call named, after checkpointing the workspace itself (:meth:`peon.checkpoints.book.Book.rewind`,
  so a rewind can be undone); it refuses a call that was not checkpointed, whose checkpoint was
  pruned, or whose checkpoint is unsettled (written to while it was taken), and never restores the
  workspace's ``.git``: its HEAD's movement since is reported.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from peon.checkpoints import records
from peon.checkpoints.book import STORE_DIR, Book
from peon.checkpoints.gitstore import StoreError
from peon.checkpoints.head import workspace_head
from peon.core.session_record import read_record

DIFF_MAX_BYTES = 4 * 1024 * 1024


class ReviewError(Exception):
    """What was asked cannot be answered (the message says why and what to do)."""


def sessions_for(workspace: Path, state_root: Path) -> list[Path]:
    target = os.path.realpath(workspace)
    found: list[tuple[float, Path]] = []
    try:
        entries = list(os.scandir(state_root))
    except OSError:
        return []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        directory = Path(entry.path)
        record = read_record(directory)
        store = directory / STORE_DIR / records.FILE_NAME
        if record is None or not store.is_file() or store.is_symlink():
            continue
        if os.path.realpath(str(record.get("workspace", ""))) != target:
            continue
        started = record.get("started_at")
        found.append((float(started) if isinstance(started, (int, float)) else 0.0, directory))
    return [directory for _started, directory in sorted(found, reverse=True)]


class Review:
    def __init__(self, state_dir: Path, workspace: Path | None = None, *, max_seconds: float = 60.0):
        self.state_dir = Path(state_dir)
        record = read_record(self.state_dir)
        if workspace is None:
            if record is None or not isinstance(record.get("workspace"), str):
                raise ReviewError(f"{self.state_dir} holds no session record naming its workspace")
            workspace = Path(record["workspace"])
        self.session_id = str(record.get("session_id")) if record else self.state_dir.name
        self.workspace = Path(workspace)
        self.book = Book(self.state_dir, self.workspace, max_seconds=max_seconds)
        if not (self.book.directory / records.FILE_NAME).is_file():
            raise ReviewError(f"session {self.session_id} has no checkpoints")

    def entries(self) -> list[records.Entry]:
        return records.timeline(records.read(self.book.directory))

    def entry(self, ident: str) -> records.Entry:
        for entry in self.entries():
            if entry.id == ident:
                return entry
        raise ReviewError(f"session {self.session_id} has no checkpoint of call {ident!r} "
                          f"(`peon changes` lists them)")

    def _now(self) -> str:
        """The workspace as it is now, as a tree (not recorded: a reader's look)."""
        with self.book.locked():
            return self.book.store.snapshot(self.book.max_seconds).tree

    def listing(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "workspace": str(self.workspace),
                "calls": [entry.to_dict() for entry in self.entries()]}

    def _checkpointed(self, ident: str) -> tuple[records.Entry, str]:
        """The entry of call ``ident`` and the tree of its checkpoint, which the store still holds."""
        entry = self.entry(ident)
        if entry.before is None or entry.pruned:
            raise ReviewError(f"call {entry.id} has no checkpoint: "
                              f"{'pruned' if entry.pruned else entry.not_checkpointed or 'not checkpointed'}")
        if not self.book.store.has(entry.before, self.book.max_seconds):
            raise ReviewError(f"the checkpoint before call {entry.id} is no longer in the store (pruned)")
        return entry, entry.before

    def restored_paths(self, ident: str) -> list[str]:
        """Every path a rewind to just before call ``ident`` would write or remove — all of them, unbounded
        (a rename: both of its paths) — in the order of the diff."""
        _entry, before = self._checkpointed(ident)
        paths: list[str] = []
        for change in self.book.store.diff(before, self._now(), self.book.max_seconds).files:
            paths += [change.old_path, change.path] if change.old_path is not None else [change.path]
        return paths

    def changes(self, ident: str | None = None, *, since: str | None = None, diff: bool = True) -> dict[str, Any]:
        """What call ``ident`` changed (to its end, or to now when it never ended), or everything since
        just before call ``since``; with the unified diff when ``diff``."""
        if (ident is None) == (since is None):
            raise ReviewError("name one call, or --since one call")
        entry, _before = self._checkpointed(ident or since or "")
        assert entry.before is not None
        to_now = since is not None or entry.after is None
        after = self._now() if to_now else entry.after
        assert after is not None
        result: dict[str, Any] = {"session_id": self.session_id, "id": entry.id, "tool": entry.tool,
                                  "checkpoint": entry.before, "to": "now" if to_now else "its end",
                                  "changes": self.book.store.diff(entry.before, after, self.book.max_seconds).to_dict()}
        if entry.shared_with:
            result["shared_with"] = entry.shared_with
        head_after = workspace_head(self.workspace) if to_now else entry.head_after
        if entry.head_before != head_after:
            result["git_head"] = {"before": entry.head_before, "after": head_after}
        if entry.after is None and since is None:
            result["note"] = "this call has no end recorded (its session ended or was killed while it ran)"
        if diff:
            result["diff"] = self.book.store.patch(entry.before, after, self.book.max_seconds, DIFF_MAX_BYTES)
        return result

    def rewind(self, ident: str) -> dict[str, Any]:
        """The workspace's stored files put back as they were just before call ``ident``."""
        entry = self.entry(ident)
        if entry.before is None or entry.pruned:
            why = "pruned" if entry.pruned else f"never taken ({entry.not_checkpointed or 'not checkpointed'})"
            raise ReviewError(f"call {entry.id} cannot be rewound: its checkpoint was {why}")
        if entry.unsettled_before:
            raise ReviewError(f"the checkpoint before call {entry.id} was taken while other calls or jobs wrote "
                              f"files ({', '.join(entry.unsettled_before[:5])}): it is not one a rewind restores "
                              f"(rewind to an earlier call)")
        rewind_id = f"rewind-{time.time_ns() // 1_000_000}"
        try:
            before = self.book.rewind(rewind_id, entry.before, rewound_to=entry.id)
        except StoreError as exc:
            raise ReviewError(f"the workspace was not rewound: {exc}") from None
        changes = self.book.end(rewind_id, before)
        result: dict[str, Any] = {"session_id": self.session_id, "rewound_to": entry.id, "id": rewind_id,
                                  "changes": changes}
        head = workspace_head(self.workspace)
        if entry.head_before != head:
            result["git_head"] = {"then": entry.head_before, "now": head,
                                  "note": "the workspace's .git is never rewound"}
        return result
