"""The audit log: JSON lines in the session's state directory, the decision written before the call runs.

Promises:

* a call that is handed to a worker first has a ``"event": "decision"`` line in ``audit.jsonl``,
  written with one ``write(2)`` (and ``fdatasync`` when ``audit.fsync`` is on) before the worker gets
  the call; if that line cannot be written — disk full, read-only, any error — the call does not run
  and is answered ``audit_failed``;
* group commit (:meth:`AuditLog.commit_grouped`, :meth:`AuditLog.record_grouped`): with ``audit.fsync``
  on, the lines of calls written at about the same time share one ``fdatasync``, run off the event
  loop, and each waits until an ``fdatasync`` that began after its own line was written has
  succeeded — so each line is durable before its caller goes on (the call runs, the result is sent),
  as if each had its own. Lines are appended in the order they are written, on the event loop. When
  that ``fdatasync`` fails, every line not yet durable is cut back (the file is truncated to what the
  last successful one covered) and each waiting line's caller gets the error: a decision line so
  refused refuses its call, as above. A log closed, rotated or reopened while lines wait is synced
  first, on the spot;
* every call that got a reply then gets exactly one ``"event": "result"`` line — allowed, denied,
  failed validation, unknown tool, cancelled while queued or closed with the session alike — saying
  when, which call and tool, the effective risk and why, whether it ran in the OS sandbox, the decision
  and who made it, how long it took and how it ended;
* a background job gets a ``"event": "job_started"`` line once its command has started and a
  ``"event": "job_ended"`` line when it ends (exited, stopped, timed out or killed with its session),
  naming the job, the call that started it and the command line (shortened);
* a line never holds file contents, tool output or free-form input: of the input only the fields in
  :data:`RECORDED_INPUT_FIELDS` are kept (strings shortened), the others are named in
  ``input_omitted``, and ``input_sha256`` identifies the exact input;
* a line is in the log whole or not at all: a write that fails or is short (a full disk) is cut
  back — the file is truncated to its size before the write — so the next line never lands on a
  fragment; a log found ending in a fragment when it is opened (a crash, or a cut that failed) is
  repaired first: cut back to its last newline, reported on stderr and in a ``"event": "repaired"``
  line (a file that cannot be cut, append-only say, gets a newline ending the fragment instead);
* the log is bounded: when a line would take ``audit.jsonl`` past ``audit.max_bytes`` the file is
  rotated (``audit.jsonl`` → ``audit.jsonl.1`` → … → ``audit.jsonl.<backups>``, the oldest dropped),
  all or nothing: the oldest backup is first moved aside (``audit.jsonl.dropping``), every rename goes
  to a free name, and a rotation that fails at any step is undone, so no backup is shifted,
  overwritten or dropped unless the whole rotation succeeded (the line is then refused like any
  line that cannot be written);
* the log stays open between lines while ``audit.jsonl`` is the file it opened (same device and
  inode, checked with one ``lstat`` before each line); a file moved, replaced or rotated away is
  reopened by path;
* a line that says what has already happened and cannot be refused — a job's ``job_started`` and
  ``job_ended`` (:data:`KEPT_EVENTS`) — and that the log cannot take when it is written (a full disk,
  an immutable or read-only log) is kept, in order, and written before the next line the log takes,
  at the latest when the session closes; past :data:`MAX_KEPT_LINES` lines or :data:`MAX_KEPT_BYTES`
  kept, a further one is counted instead and a ``"event": "lost"`` line says how many of each were
  lost; lines still kept when the log is closed are reported lost on stderr, in one line. None is
  lost silently;
* a failure to write a result line is reported on stderr and does not fail the call it describes
  (the call has already run); a decision line that cannot be written refuses the call. Anything but a
  regular file at ``audit.jsonl`` (a FIFO, a device, a symbolic link) is such a failure, found without
  opening it (:mod:`peon.core.statefile`), never a hang or a write through a link.

:func:`audit_entry` is pure; :class:`AuditLog` does the file work.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import sys
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping

from peon.approval.policy import ApprovalRequest, Decision
from peon.core.text import shorten_counted
from peon.core.statefile import RefusedFile, open_for_append, regular_status
from peon.approval.validation import canonical_json

from peon.supervisor.approval.grants import input_digest

FILE_NAME = "audit.jsonl"
DROPPING_SUFFIX = ".dropping"  # the oldest backup while a rotation runs: removed once it succeeded
TAIL_CHUNK_BYTES = 64 * 1024
# Input fields that say what a call does without carrying contents (a write's `content` and an agent's
# `prompt` are left out).
RECORDED_INPUT_FIELDS = frozenset({"command", "path", "name", "mode", "offset", "limit", "timeout_seconds",
                                   "expected_sha256", "job_id", "background", "cwd", "yield_seconds", "wait_seconds",
                                   "raw", "text", "eof", "tty", "rows", "cols", "screen"})
MAX_FIELD_CHARS = 1000
# Lines of what has already happened and cannot be refused: kept when the log cannot take them, and
# written once it can (a decision line is never kept: its call is refused instead).
KEPT_EVENTS = frozenset({"job_started", "job_ended"})
MAX_KEPT_LINES = 1024
MAX_KEPT_BYTES = 1 << 20
# Outcome facts copied from a tool's result value when present (never its output).
AUDIT_CHANGED_PATHS = 20
OUTCOME_FIELDS = ("exit_code", "signal", "timed_out", "cancelled", "truncated", "job_id", "state")


def _shorten(value: Any) -> Any:
    return shorten_counted(value, MAX_FIELD_CHARS) if isinstance(value, str) else value


def _encode(entry: Mapping[str, Any]) -> bytes:
    return (json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")


def _timestamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def decision_entry(*, session_id: str, call_id: str, tool: str, args: Any, request: ApprovalRequest,
                   decision: Decision, received_at: float) -> dict[str, Any]:
    """The line written before an allowed call is handed to a worker."""
    return _common("decision", session_id, call_id, tool, args, request, decision, received_at)


def audit_entry(*, session_id: str, call_id: str, tool: str, args: Any, request: ApprovalRequest | None,
                decision: Decision | None, reply: Mapping[str, Any], received_at: float,
                duration_ms: int) -> dict[str, Any]:
    """The line written when a call is answered."""
    entry = _common("result", session_id, call_id, tool, args, request, decision, received_at)
    entry["duration_ms"] = duration_ms
    outcome: dict[str, Any] = {"ok": bool(reply.get("ok"))}
    if reply.get("ok"):
        value = reply.get("value")
        if isinstance(value, Mapping):
            outcome.update({k: value[k] for k in OUTCOME_FIELDS if k in value})
    else:
        outcome["error"] = (reply.get("error") or {}).get("code")
    outcome.update(changes_of(reply))
    entry["outcome"] = outcome
    return entry


def changes_of(holder: Any) -> dict[str, Any]:
    """The checkpointed ``changes`` a result carries, as its audit line records them: the counts, the
    checkpoint and up to :data:`AUDIT_CHANGED_PATHS` paths (``peon changes`` has the rest)."""
    changes = holder.get("changes") if isinstance(holder, Mapping) else None
    if not isinstance(changes, Mapping):
        return {}
    kept = {k: v for k, v in changes.items() if k != "files" and not isinstance(v, (list, dict))}
    files = changes.get("files")
    if isinstance(files, list):
        kept["paths"] = [_shorten(item.get("path")) for item in files[:AUDIT_CHANGED_PATHS]
                         if isinstance(item, Mapping)]
    return {"changes": kept}


def network_entry(*, session_id: str, attempt: Mapping[str, Any], now: float) -> dict[str, Any]:
    """A ``network`` line: one connection attempt through the egress proxy, as it ended
    (:func:`peon.approval.network_policy.attempt_record`: host, port, address, decision, bytes each way,
    duration)."""
    entry: dict[str, Any] = {"event": "network", "time": _timestamp(now), "session_id": session_id}
    entry.update({key: _shorten(value) for key, value in attempt.items()})
    return entry


def job_entry(*, event: str, session_id: str, job: Mapping[str, Any], now: float) -> dict[str, Any]:
    """A ``job_started`` or ``job_ended`` line; ``job`` is :meth:`peon.core.jobs.JobInfo.to_dict` plus ``call_id``."""
    entry: dict[str, Any] = {"event": event, "time": _timestamp(now), "session_id": session_id,
                             "call_id": job.get("call_id"), "tool": job.get("tool"), "job_id": job.get("job_id"),
                             "command": _shorten(job.get("command"))}
    if event == "job_ended":
        entry["outcome"] = {k: job.get(k) for k in ("state", "exit_code", "signal", "timed_out", "output_bytes")}
        entry["outcome"].update(changes_of(job))
    return entry


def _common(event: str, session_id: str, call_id: str, tool: str, args: Any, request: ApprovalRequest | None,
            decision: Decision | None, received_at: float) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "event": event,
        "time": _timestamp(received_at),
        "session_id": session_id,
        "call_id": call_id,
        "tool": tool,
        "risk": request.risk.value if request else None,
        "risk_reason": request.risk_reason if request else None,
        "sandboxed": request.sandboxed if request else None,
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
    return entry


@dataclass
class _Waiting:
    """A line written and not yet known durable, and whoever waits for it to be."""

    generation: int  # which opening of the log it was written to
    end: int  # the file's size once it was written
    done: asyncio.Future[None]


class AuditLog:
    def __init__(self, state_dir: Path, max_bytes: int, backups: int, fsync: bool = False):
        self.path = Path(state_dir) / FILE_NAME
        self.max_bytes = max_bytes
        self.backups = backups
        self.fsync = fsync
        self._fd = -1  # audit.jsonl as last opened, and its (device, inode)
        self._open_id: tuple[int, int] | None = None
        # Lines of KEPT_EVENTS the log could not take yet (the line, its event, its job), oldest first;
        # and how many of each event were dropped past the bound.
        self._kept: deque[tuple[bytes, str, str]] = deque()
        self._kept_bytes = 0
        self._lost: Counter[str] = Counter()
        # Group commit: the lines waiting for an fdatasync, what the last successful one covered.
        self._generation = 0  # counts the openings of the log
        self._durable = 0  # the size of the open log known to be on disk
        self._waiting: list[_Waiting] = []
        self._flusher: asyncio.Task[None] | None = None
        self._sync_thread: ThreadPoolExecutor | None = None
        self.syncs = 0  # fdatasync calls made (group commit makes one for several lines)
        # What a line shows of what it records: the session's redaction (a hash where a secret was).
        self.redact: Callable[[Mapping[str, Any]], Mapping[str, Any]] = lambda entry: entry

    def commit(self, entry: Mapping[str, Any]) -> None:
        """Write ``entry`` before acting on it: one ``write(2)`` of the whole line (``fdatasync`` too
        when ``audit.fsync`` is on). Raises ``OSError`` (or ``ValueError``) if the line is not written
        whole; the caller must then not act. The kept lines the log could not take before are written
        first."""
        line = _encode(self.redact(entry))
        self._write_kept()
        self._write(line, self.fsync)

    async def commit_grouped(self, entry: Mapping[str, Any]) -> None:
        """:meth:`commit`, its ``fdatasync`` shared with the lines written meanwhile (group commit): the
        line is written at once, and this returns once it is durable — an ``fdatasync`` begun after
        it was written succeeded. Raises like :meth:`commit` (the line is then cut back, and so is every
        line not yet durable with it); the caller must then not act."""
        line = _encode(self.redact(entry))
        self._write_kept()
        self._write(line, False)
        if not self.fsync:
            return
        waiting = _Waiting(self._generation, os.fstat(self._fd).st_size,
                           asyncio.get_running_loop().create_future())
        self._waiting.append(waiting)
        if self._flusher is None or self._flusher.done():
            # A task, so the lines written by the calls ready to run now join this fdatasync.
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        await asyncio.shield(waiting.done)

    async def record_grouped(self, entry: Mapping[str, Any]) -> bool:
        """Best effort, like :meth:`record`, with :meth:`commit_grouped`'s shared ``fdatasync``."""
        try:
            await self.commit_grouped(entry)
        except (OSError, ValueError) as exc:
            print(f"peon-supervisor: cannot write the audit log {self.path}: {exc}", file=sys.stderr)
            return False
        return True

    async def _flush(self) -> None:
        """Sync the open log off the event loop until no line waits; each round covers every line
        written before it began."""
        loop = asyncio.get_running_loop()
        while self._waiting:
            generation, fd = self._generation, self._fd
            if fd < 0:  # closed meanwhile: close() settled what waited
                return
            error: OSError | None = None
            try:
                copy = os.dup(fd)  # the log may be closed or rotated while this syncs: this one stays valid
            except OSError as exc:  # out of descriptors, say: nothing is vouched for
                self._cut_back(exc)
                continue
            try:
                covered = os.fstat(copy).st_size
                if self._sync_thread is None:
                    self._sync_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="peon-audit")
                self.syncs += 1
                await loop.run_in_executor(self._sync_thread, os.fdatasync, copy)
            except OSError as exc:
                error = exc
            finally:
                os.close(copy)
            if generation != self._generation:
                continue  # closed, rotated or reopened meanwhile: close() synced and settled those lines
            if error is None:
                self._durable = max(self._durable, covered)
                self._settle(lambda waiting: waiting.end <= self._durable)
            else:
                self._cut_back(error)

    def _settle(self, durable: Any, error: OSError | None = None) -> None:
        """Tell the lines that ``durable`` says are on disk (or all of them, failed, given ``error``)."""
        keep = []
        for waiting in self._waiting:
            if error is None and not durable(waiting):
                keep.append(waiting)
            elif not waiting.done.done():
                if error is None:
                    waiting.done.set_result(None)
                else:
                    waiting.done.set_exception(OSError(error.errno, error.strerror or str(error)))
        self._waiting = keep

    def _cut_back(self, error: OSError) -> None:
        """An ``fdatasync`` failed: no line past what the last successful one covered is durable. They
        are cut back, so the log holds only lines whose callers went on, and each waiting caller
        learns why."""
        self._settle(None, error)  # first: closing below syncs what still waits
        try:
            size = os.fstat(self._fd).st_size
            os.ftruncate(self._fd, self._durable)
            cut = f"cut the {size - self._durable} bytes not yet on disk back"
        except OSError as exc:  # repaired (to its last newline) when it is next opened
            cut = f"the lines not yet on disk could not be cut back ({exc.strerror})"
            self._close_fd()
        print(f"peon-supervisor: syncing the audit log {self.path} failed ({error.strerror or error}): {cut}",
              file=sys.stderr)

    def _sync_now(self) -> None:
        """Before the open log is closed: sync the lines that wait, here and now, and tell them."""
        if not self._waiting or self._fd < 0:
            return
        try:
            self.syncs += 1
            os.fdatasync(self._fd)
        except OSError as exc:
            self._settle(None, exc)
            try:
                os.ftruncate(self._fd, self._durable)
            except OSError:
                pass  # repaired (to its last newline) when it is next opened
            print(f"peon-supervisor: syncing the audit log {self.path} failed ({exc.strerror or exc}) as it "
                  "was closed: the lines not yet on disk were cut back", file=sys.stderr)
            return
        self._settle(lambda waiting: True)

    @property
    def kept(self) -> int:
        """How many lines wait to be written (the log could not take them yet)."""
        return len(self._kept)

    def _write_kept(self) -> None:
        """Write the kept lines in order, then the line that says how many were lost past the bound;
        ``OSError`` at the first the log cannot take (it and those after it stay kept)."""
        while self._kept:
            line, _, _ = self._kept[0]
            self._write(line, False)  # the line after them syncs them with it
            self._kept.popleft()
            self._kept_bytes -= len(line)
        if self._lost:
            self._write(_encode({"event": "lost", "time": _timestamp(time.time()), "count": sum(self._lost.values()),
                                 "events": dict(sorted(self._lost.items())),
                                 "reason": f"the audit log could not take them, and {MAX_KEPT_LINES} lines or "
                                           f"{MAX_KEPT_BYTES} bytes were already kept for it"}), False)
            self._lost.clear()

    def _keep(self, entry: Mapping[str, Any]) -> bool:
        """Keep ``entry`` (one of :data:`KEPT_EVENTS`) for when the log can take it; False when the
        bound is reached (it is then counted as lost)."""
        line = _encode(self.redact(entry))
        event = str(entry.get("event"))
        if len(self._kept) >= MAX_KEPT_LINES or self._kept_bytes + len(line) > MAX_KEPT_BYTES:
            self._lost[event] += 1
            return False
        self._kept.append((line, event, str(entry.get("job_id"))))
        self._kept_bytes += len(line)
        return True

    def _write(self, line: bytes, sync: bool) -> None:
        """Append ``line`` whole (see the module's promises), opening or rotating the log as needed."""
        try:
            # Never opened unless a regular file (a FIFO planted here must not block the supervisor).
            info = regular_status(self.path)
        except RefusedFile as exc:
            self._close_fd()
            raise OSError(str(exc)) from None
        if info is not None and info.st_size and info.st_size + len(line) > self.max_bytes:
            self._rotate()
            info = None
        if info is None or (info.st_dev, info.st_ino) != self._open_id:
            self._close_fd()
            try:
                fd = open_for_append(self.path)
            except RefusedFile as exc:
                raise OSError(str(exc)) from None
            opened = os.fstat(fd)
            self._fd, self._open_id = fd, (opened.st_dev, opened.st_ino)
            self._generation += 1
            self._repair_tail(opened.st_size)
            self._durable = os.fstat(fd).st_size  # what was there before: not this session's to vouch for
        self._append(line, sync)

    def _append(self, line: bytes, sync: bool | None = None) -> None:
        """One ``write(2)`` of ``line`` (and ``fdatasync`` when ``sync``, by default ``audit.fsync``); on
        any failure the file is cut back to its size before, so no fragment is left for the next line
        to be appended to."""
        fd = self._fd
        before = os.fstat(fd).st_size
        try:
            written = os.write(fd, line)
            if written != len(line):  # a short write (a full disk): the line is not in the log whole
                raise OSError(errno.ENOSPC, f"short write to {self.path} ({written} of {len(line)} bytes)")
            if self.fsync if sync is None else sync:
                self.syncs += 1
                os.fdatasync(fd)
                self._durable = before + written  # and every line before it, on the same file
                self._settle(lambda waiting: waiting.generation == self._generation)
        except OSError as exc:
            try:
                os.ftruncate(fd, before)
            except OSError as cut:  # reopened and repaired before the next line
                self._close_fd()
                raise OSError(exc.errno, f"{exc.strerror or exc}; and the part written could not be "
                                         f"cut back ({cut.strerror}): it is cut when the log is next opened") from exc
            raise

    def _repair_tail(self, size: int) -> None:
        """A log that does not end with a newline (a line cut short by a crash, or a cut back that
        failed) is cut back to its last newline, and says so, before anything is appended to it."""
        if size == 0:
            return
        reader = os.open(f"/proc/self/fd/{self._fd}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.pread(reader, 1, size - 1) == b"\n":
                return
            keep, end = 0, size
            while end > 0:
                start = max(0, end - TAIL_CHUNK_BYTES)
                newline = os.pread(reader, end - start, start).rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                end = start
        finally:
            os.close(reader)
        try:
            os.ftruncate(self._fd, keep)
        except OSError as exc:  # an append-only file, say: end the fragment, so the next line stands alone
            self._append(b"\n")
            print(f"peon-supervisor: the audit log {self.path} ended in a partial line of {size - keep} bytes "
                  f"that cannot be cut ({exc.strerror}): it was ended with a newline", file=sys.stderr)
            return
        print(f"peon-supervisor: the audit log {self.path} ended in a partial line: cut {size - keep} "
              f"bytes back to its last complete line", file=sys.stderr)
        self._append(_encode({"event": "repaired", "time": _timestamp(time.time()), "cut_bytes": size - keep,
                              "reason": "the log ended in a partial line (a write cut short); it was cut back "
                                        "to its last complete line"}))

    def close(self) -> None:
        """The session's end: the kept lines are written if the log takes them now, else reported lost
        on stderr in one line; then the file is closed."""
        if self._kept or self._lost:
            try:
                self._write_kept()
                if self.fsync and self._fd >= 0:
                    os.fdatasync(self._fd)
            except (OSError, ValueError) as exc:
                lines = [f"{event} {job}" for _, event, job in self._kept]
                lost = len(lines) + sum(self._lost.values())
                shown = ", ".join(lines[:20]) + (f", and {lost - 20} more" if lost > 20 else "")
                print(f"peon-supervisor: {lost} audit line(s) the log {self.path} could not take are lost "
                      f"({exc}): {shown or 'counted past the bound'}", file=sys.stderr)
                self._kept.clear()
                self._kept_bytes = 0
                self._lost.clear()
        self._close_fd()

    def _close_fd(self) -> None:
        """Close the open log; the lines that wait for an ``fdatasync`` get one first."""
        self._sync_now()
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._open_id = -1, None
        self._generation += 1

    def record(self, entry: Mapping[str, Any]) -> bool:
        """Best effort: write ``entry``; a failure is reported on stderr, and a line of
        :data:`KEPT_EVENTS` is kept to be written once the log can take it. Returns whether it was
        written now."""
        try:
            self.commit(entry)
        except (OSError, ValueError) as exc:
            kept = entry.get("event") in KEPT_EVENTS and self._keep(entry)
            then = ("; it is kept and written once the log can take it" if kept
                    else "; it is counted as lost" if entry.get("event") in KEPT_EVENTS else "")
            print(f"peon-supervisor: cannot write the audit log {self.path}: {exc}{then}", file=sys.stderr)
            return False
        return True

    def _backup(self, index: int) -> Path:
        return self.path.with_name(f"{FILE_NAME}.{index}")

    def _rotate(self) -> None:
        """All or nothing: every rename goes to a free name (the oldest backup first moved aside), and
        one that fails undoes those before it; the oldest is removed only once all succeeded."""
        self._close_fd()
        if self.backups == 0:
            os.unlink(self.path)
            return
        aside = self.path.with_name(FILE_NAME + DROPPING_SUFFIX)
        oldest = self._backup(self.backups)
        if aside.exists() and not oldest.exists():  # an earlier rotation could not undo its first step
            os.rename(aside, oldest)
        moves = [(oldest, aside)] if oldest.exists() else []
        moves += [(self._backup(i), self._backup(i + 1)) for i in range(self.backups - 1, 0, -1)
                  if self._backup(i).exists()]
        moves.append((self.path, self._backup(1)))
        done: list[tuple[Path, Path]] = []
        try:
            for source, target in moves:
                os.rename(source, target)
                done.append((source, target))
        except OSError as exc:
            stuck = []
            for source, target in reversed(done):
                try:
                    os.rename(target, source)
                except OSError:
                    stuck.append(f"{target.name} (was {source.name})")
            how = (f"; undoing it failed too, nothing is lost but these names moved: {', '.join(stuck)}"
                   if stuck else "; it was undone, the backups are as they were")
            raise OSError(exc.errno, f"cannot rotate {self.path}: {exc.strerror or exc}{how}") from exc
        if done and done[0][1] == aside:
            try:
                os.unlink(aside)
            except OSError:
                pass  # dropped at the next rotation
