"""The audit log: one JSON line per call in the session's state directory.

Promises:

* every call that got a reply gets exactly one line in ``audit.jsonl`` — allowed, denied, failed
  validation, unknown tool, cancelled while queued or closed with the session alike — saying when, which
  call and tool, the effective risk and why, the decision and who made it, how long it took and how
  it ended;
* a line never holds file contents, tool output or free-form input: of the input only the fields in
  :data:`RECORDED_INPUT_FIELDS` are kept (strings shortened), the others are named in
  ``input_omitted``, and ``input_sha256`` identifies the exact input;
* the log is bounded: when a line would take ``audit.jsonl`` past ``audit.max_bytes`` the file is
  rotated (``audit.jsonl`` → ``audit.jsonl.1`` → … → ``audit.jsonl.<backups>``, the oldest dropped);
* a failure to write the log is reported on stderr and does not fail the call it describes; anything
  but a regular file at ``audit.jsonl`` (a FIFO, a device, a symbolic link) is such a failure, found
  without opening it (:mod:`peon.statefile`), never a hang or a write through a link.

:func:`audit_entry` is pure; :class:`AuditLog` does the file work.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from peon.statefile import RefusedFile, open_for_append, regular_size
from peon.validation import canonical_json

from .approval import ApprovalRequest, Decision
from .grants import input_digest

FILE_NAME = "audit.jsonl"
# Input fields that say what a call does without carrying contents (a write's `content` and an agent's
# `prompt` are left out).
RECORDED_INPUT_FIELDS = frozenset({"command", "path", "name", "mode", "offset", "limit", "timeout_seconds",
                                   "expected_sha256"})
MAX_FIELD_CHARS = 1000
# Outcome facts copied from a tool's result value when present (never its output).
OUTCOME_FIELDS = ("exit_code", "signal", "timed_out", "cancelled", "truncated")


def _shorten(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
        return value[:MAX_FIELD_CHARS] + f"... [{len(value) - MAX_FIELD_CHARS} more characters]"
    return value


def _timestamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def audit_entry(*, session_id: str, call_id: str, tool: str, args: Any, request: ApprovalRequest | None,
                decision: Decision | None, reply: Mapping[str, Any], received_at: float,
                duration_ms: int) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "time": _timestamp(received_at),
        "session_id": session_id,
        "call_id": call_id,
        "tool": tool,
        "risk": request.risk.value if request else None,
        "risk_reason": request.risk_reason if request else None,
    }
    if isinstance(args, Mapping):
        entry["input"] = {k: _shorten(v) for k, v in sorted(args.items()) if k in RECORDED_INPUT_FIELDS
                          and (v is None or isinstance(v, (str, int, float, bool)))}
        entry["input_omitted"] = sorted(str(k) for k in args if k not in entry["input"])
    try:
        entry["input_sha256"] = input_digest(request.canonical_input if request else canonical_json(args))
    except (TypeError, ValueError):
        entry["input_sha256"] = None
    entry["decision"] = None if decision is None else {
        "allowed": decision.allowed, "by": decision.by, "rule": _shorten(decision.rule),
        "answer": decision.answer, "scope": decision.scope,
    }
    entry["duration_ms"] = duration_ms
    outcome: dict[str, Any] = {"ok": bool(reply.get("ok"))}
    if reply.get("ok"):
        value = reply.get("value")
        if isinstance(value, Mapping):
            outcome.update({k: value[k] for k in OUTCOME_FIELDS if k in value})
    else:
        outcome["error"] = (reply.get("error") or {}).get("code")
    entry["outcome"] = outcome
    return entry


class AuditLog:
    def __init__(self, state_dir: Path, max_bytes: int, backups: int):
        self.path = Path(state_dir) / FILE_NAME
        self.max_bytes = max_bytes
        self.backups = backups

    def record(self, entry: Mapping[str, Any]) -> None:
        line = (json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")
        try:
            # Never opened unless a regular file (a FIFO planted here must not block the supervisor).
            size = regular_size(self.path) or 0
            if size and size + len(line) > self.max_bytes:
                self._rotate()
            fd = open_for_append(self.path)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except (OSError, RefusedFile) as exc:
            print(f"peon-supervisor: cannot write the audit log {self.path}: {exc}", file=sys.stderr)

    def _rotate(self) -> None:
        if self.backups == 0:
            os.unlink(self.path)
            return
        for index in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{FILE_NAME}.{index}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{FILE_NAME}.{index + 1}"))
        os.replace(self.path, self.path.with_name(f"{FILE_NAME}.1"))
