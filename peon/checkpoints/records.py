"""A session's change records: one JSON line per event, appended, read back by anyone.

Promises:

* :func:`append` writes one line with ``O_APPEND`` in one ``write`` (a reader never sees half of one:
  a line is at most :data:`MAX_LINE_BYTES`, its file lists cut to fit), never through a symbolic link;
  a line is written as soon as its event happened, so what a supervisor killed mid-call recorded is
  still there;
* :func:`read` reads at most :data:`MAX_LOG_BYTES` of a regular file and skips every line that is not a
  record (hostile or torn), keeping the others in order;
* :func:`timeline` folds the lines into one :class:`Entry` per call or job, in the order they began:
  the tree before, the tree after (None: it did not end, or its supervisor died), what it changed, and
  the calls and jobs that ran beside it; a pruned entry says so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peon.core.statefile import RefusedFile, read_regular_file

FILE_NAME = "records.jsonl"
MAX_LINE_BYTES = 64 * 1024
MAX_LOG_BYTES = 256 * 1024 * 1024


def append(directory: Path, record: dict[str, Any]) -> None:
    line = json.dumps(record, separators=(",", ":"), ensure_ascii=True)
    while len(line) >= MAX_LINE_BYTES and _shrink(record):
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=True)
    data = (line + "\n").encode()
    fd = os.open(directory / FILE_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _shrink(record: dict[str, Any]) -> bool:
    """Halve the longest list of the record (its changed files, dropped or unsettled paths)."""
    lists = [(value, key, holder) for holder in (record, record.get("changes") or {})
             for key, value in holder.items() if isinstance(value, list) and value]
    if not lists:
        return False
    longest, key, holder = max(lists, key=lambda item: len(json.dumps(item[0])))
    holder[key] = longest[: len(longest) // 2]
    holder[f"{key}_cut"] = True
    return True


def read(directory: Path) -> list[dict[str, Any]]:
    try:
        data = read_regular_file(directory / FILE_NAME, max_bytes=MAX_LOG_BYTES, follow_symlinks=False)
    except FileNotFoundError:
        return []
    except RefusedFile as exc:
        raise OSError(str(exc)) from None
    records = []
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("event"), str) and isinstance(record.get("id"), str):
            records.append(record)
    return records


@dataclass
class Entry:
    id: str
    tool: str | None = None
    kind: str = "call"  # call, job, rewind
    call_id: str | None = None  # a job's call
    before: str | None = None
    after: str | None = None
    began_at: float | None = None
    ended_at: float | None = None
    head_before: str | None = None
    head_after: str | None = None
    changes: dict[str, Any] | None = None
    shared_with: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)  # changed while its after snapshot was taken
    unsettled_before: list[str] = field(default_factory=list)  # changed while its before snapshot was taken
    not_checkpointed: str | None = None
    pruned: bool = False
    rewound_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "kind": self.kind, "tool": self.tool, "checkpoint": self.before,
                                "after": self.after, "began_at": self.began_at, "ended_at": self.ended_at}
        for key in ("call_id", "head_before", "head_after", "changes", "not_checkpointed", "rewound_to"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        for key in ("shared_with", "dropped", "unsettled", "unsettled_before"):
            if getattr(self, key):
                data[key] = getattr(self, key)
        if self.pruned:
            data["pruned"] = True
        return data


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def timeline(records: list[dict[str, Any]]) -> list[Entry]:
    entries: dict[str, Entry] = {}
    for record in records:
        event, ident = record["event"], record["id"]
        entry = entries.get(ident)
        if event == "before":
            if entry is None:
                entry = entries[ident] = Entry(ident)
            entry.tool, entry.before = _text(record.get("tool")), _text(record.get("tree"))
            entry.kind = _text(record.get("kind")) or "call"
            entry.call_id, entry.rewound_to = _text(record.get("call_id")), _text(record.get("rewound_to"))
            entry.began_at, entry.head_before = _number(record.get("at")), _text(record.get("head"))
            entry.unsettled_before = _strings(record.get("unsettled"))
        elif entry is None:
            continue
        elif event == "after":
            entry.after, entry.ended_at = _text(record.get("tree")), _number(record.get("at"))
            entry.head_after = _text(record.get("head"))
            changes = record.get("changes")
            entry.changes = changes if isinstance(changes, dict) else None
            entry.shared_with = _strings(record.get("shared_with"))
            entry.dropped, entry.unsettled = _strings(record.get("dropped")), _strings(record.get("unsettled"))
        elif event == "not_checkpointed":
            entry.not_checkpointed = _text(record.get("reason")) or "not checkpointed"
            entry.ended_at = _number(record.get("at"))
        elif event == "pruned":
            entry.pruned = True
    return list(entries.values())
