"""The output store: what recent calls and jobs wrote, kept within byte quotas.

Promise: every byte a job writes has an absolute offset — its position in everything that job wrote —
and :meth:`OutputStore.read` returns bytes by those offsets, so a reader that pages with
``next_offset`` never reads a byte twice nor skips one that is still retained. What is kept stays
bounded however much is written: one job keeps at most ``per_job_bytes`` (its newest bytes, the oldest
dropped first) and the whole store at most ``per_session_bytes`` (the oldest jobs' bytes evicted
first), plus at most one appended chunk while it is being trimmed. What was dropped is reported, never
hidden: a read from an offset that is gone starts at the oldest retained byte and says
``dropped_before``.

Where it is kept: in memory (no I/O, no clock) while a ring holds at most ``spill_bytes``; a ring given
a ``spill`` opener moves past that into a file the opener returns (an unnamed file, or one already
unlinked, read and written at ``offset % quota``: :func:`open_spill_file`), so a flood's kept output
costs page cache, not the process's memory. A ring whose file cannot be opened stays in memory (within
the same quotas); one whose file fails a write or a read drops what it held and says so
(``dropped_before``). A file ring that is emptied by eviction closes its file; :meth:`OutputRing.close`
closes it too. At most one file per ring is open, so a store holds at most
``per_session_bytes // spill_bytes + 2`` files with retained bytes.

A ring's own cost stays small (a session keeps the rings of up to 1024 ended jobs): an empty ring holds
no buffer, and a compacted one (:meth:`OutputRing.compact`, once its job has ended) keeps its chunks in a
tuple, not in a deque (~0.6 KiB even when empty).
"""

from __future__ import annotations

import errno
import os
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

SPILL_BYTES = 1 << 20  # a ring keeps up to this many bytes in memory before it moves to a file
MAX_SPILLED_RINGS = 64  # a store's spill threshold is at least per_session_bytes / this


def open_spill_file(directory: str | os.PathLike[str]) -> int:
    """A new, empty, unnamed file in ``directory`` for a ring, read-write, mode 0600, close-on-exec:
    ``O_TMPFILE`` where the file system has it, else a file created ``O_EXCL | O_NOFOLLOW`` and
    unlinked at once. Nothing of it stays on disk once it is closed (or its process is gone)."""
    try:
        return os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
    import tempfile  # only where the file system has no O_TMPFILE

    fd, path = tempfile.mkstemp(prefix=".output-", dir=directory)  # O_EXCL | O_NOFOLLOW, 0600, close-on-exec
    os.unlink(path)
    return fd


@dataclass(frozen=True)
class Page:
    data: bytes
    offset: int  # absolute offset of data[0]
    next_offset: int  # where the next read continues
    total_bytes: int  # everything the job wrote so far
    retained_from: int  # the oldest offset still retained
    dropped_before: int | None  # set when the requested offset was evicted: bytes below it are gone


class OutputRing:
    """One job's newest output within ``quota`` bytes, with absolute offsets: chunks in memory, or
    past ``spill_bytes`` (with a ``spill`` opener) a file holding the byte at offset ``o`` at ``o % quota``.
    The chunks are a deque while the ring changes; ``()`` while it is empty, a tuple once compacted."""

    __slots__ = ("_chunks", "_spill", "_spill_bytes", "fd", "quota", "retained", "start", "total")

    def __init__(self, quota: int, spill_bytes: int | None = None, spill: Callable[[], int] | None = None):
        if quota < 0:
            raise ValueError("quota must not be negative")
        self.quota = quota
        self._chunks: deque[bytes] | tuple[bytes, ...] = ()
        self.start = 0  # absolute offset of the first retained byte
        self.total = 0  # absolute offset one past the last byte written
        self.retained = 0
        self._spill = spill if spill is not None and spill_bytes is not None and spill_bytes < quota else None
        self._spill_bytes = spill_bytes or 0
        self.fd = -1  # the ring's file, once it has moved there

    def append(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self.fd < 0 and self._spill is not None and self.retained + len(data) > self._spill_bytes:
            self._move_to_file()
        if self.fd >= 0:
            self._write(data)
            return
        self.total += len(data)
        if len(data) > self.quota:  # keep only its tail
            data = data[len(data) - self.quota :] if self.quota else b""
            self.drop_oldest(self.retained)
            self.start = self.total - len(data)
        if data:
            if not isinstance(self._chunks, deque):
                self._chunks = deque(self._chunks)
            self._chunks.append(bytes(data))
            self.retained += len(data)
        self.drop_oldest(self.retained - self.quota)

    def _move_to_file(self) -> None:
        assert self._spill is not None
        try:
            fd = self._spill()
        except OSError:
            self._spill = None  # no file: the ring stays in memory, within its quota
            return
        self.fd, chunks, self._chunks = fd, self._chunks, ()
        position = self.start
        for chunk in chunks:  # the retained bytes at their places in the file (a wrap cannot happen: retained <= quota)
            if not self._pwrite(chunk, position):
                return
            position += len(chunk)

    def _pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> bool:
        """Write ``data`` (at most ``quota`` bytes) for absolute ``offset``; False (all dropped) on an error."""
        view = memoryview(data).cast("B")
        place = offset % self.quota
        try:
            while view:
                n = os.pwrite(self.fd, view[: self.quota - place], place)
                view, place = view[n:], (place + n) % self.quota
        except OSError:
            self._lose()
            return False
        return True

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        size = len(data)
        self.total += size
        if size > self.quota:
            data = memoryview(data).cast("B")[size - self.quota :]
            size = self.quota
        if not self._pwrite(data, self.total - size):
            return
        self.retained = min(self.retained + size, self.quota, self.total - self.start)
        self.start = self.total - self.retained

    def _lose(self) -> None:
        """The file failed: what it held is gone (reported as dropped), and so is the file."""
        self.start, self.retained = self.total, 0
        self.close()
        self._spill = None

    def close(self) -> None:
        """Close the ring's file (what it held is dropped); a ring in memory is left as it is."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            self.start, self.retained = self.total, 0
            os.close(fd)

    def compact(self) -> None:
        """Keep the chunks in a tuple, not a deque: for a ring no more is appended to (its job has ended).
        An append or an eviction after it still works (the chunks go back into a deque)."""
        if isinstance(self._chunks, deque):
            self._chunks = tuple(self._chunks)

    def skip_to(self, offset: int) -> None:
        """Count everything before ``offset`` as written and already dropped (the writer kept only
        what follows); only forward."""
        if offset > self.total:
            self.drop_oldest(self.retained)
            self.total = self.start = offset

    def drop_oldest(self, count: int) -> int:
        """Evict up to ``count`` of the oldest retained bytes; return how many went."""
        if self.fd >= 0:
            dropped = max(min(count, self.retained), 0)
            self.retained -= dropped
            self.start += dropped
            if not self.retained:
                self.close()  # an empty file ring gives its file back
            return dropped
        dropped = 0
        if count > 0 and self._chunks:
            chunks = self._chunks if isinstance(self._chunks, deque) else deque(self._chunks)
            while count > 0 and chunks:
                first = chunks[0]
                if len(first) <= count:
                    chunks.popleft()
                    taken = len(first)
                else:
                    chunks[0] = first[count:]
                    taken = count
                count -= taken
                dropped += taken
            self._chunks = chunks if chunks else ()  # an emptied ring gives its deque back
            self.retained -= dropped
            self.start += dropped
        if not self._chunks:
            self.start = self.total
        return dropped

    def read(self, offset: int, limit: int) -> Page:
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        file_data = self._read_file(max(offset, self.start), limit) if self.fd >= 0 else None
        dropped = self.start if offset < self.start else None  # after the read: a failed file drops its bytes
        begin = max(offset, self.start)
        end = min(begin + limit, self.total)
        if file_data is not None:
            data = file_data
        else:
            parts: list[bytes] = []
            position = self.start
            for chunk in self._chunks:
                chunk_end = position + len(chunk)
                if chunk_end > begin and position < end:
                    parts.append(chunk[max(begin - position, 0) : min(end - position, len(chunk))])
                if chunk_end >= end:
                    break
                position = chunk_end
            data = b"".join(parts)
        begin = min(begin, self.total)
        return Page(data, begin, begin + len(data), self.total, self.start, dropped)

    def _read_file(self, begin: int, limit: int) -> bytes:
        end = min(begin + limit, self.total)
        if end <= begin:
            return b""
        place, size = begin % self.quota, end - begin
        try:
            first = os.pread(self.fd, min(size, self.quota - place), place)
            data = first + os.pread(self.fd, size - len(first), 0) if len(first) < size else first
        except OSError:
            data = b""
        if len(data) != size:  # the file failed us (or was cut short): its bytes count as dropped
            self._lose()
            return b""
        return data


class OutputStore:
    """The rings of a session's jobs, oldest first, within a per-job and a per-session quota."""

    def __init__(self, per_job_bytes: int, per_session_bytes: int, spill: Callable[[], int] | None = None):
        self.per_job_bytes = per_job_bytes
        self.per_session_bytes = per_session_bytes
        self.spill = spill
        self.spill_bytes = max(SPILL_BYTES, per_session_bytes // MAX_SPILLED_RINGS)
        self._rings: OrderedDict[str, OutputRing] = OrderedDict()
        self.retained = 0

    def open(self, job_id: str) -> OutputRing:
        if job_id in self._rings:
            raise ValueError(f"job {job_id!r} already has output")
        ring = self._rings[job_id] = OutputRing(min(self.per_job_bytes, self.per_session_bytes),
                                                self.spill_bytes, self.spill)
        return ring

    def append(self, job_id: str, data: bytes) -> None:
        ring = self._rings[job_id]
        before = ring.retained
        ring.append(data)
        self.retained += ring.retained - before
        self._evict(keep=ring)

    def read(self, job_id: str, offset: int, limit: int) -> Page:
        ring = self._rings[job_id]
        before = ring.retained
        page = ring.read(offset, limit)
        self.retained += ring.retained - before  # a file that failed has dropped its bytes
        return page

    def _evict(self, keep: OutputRing) -> None:
        excess = self.retained - self.per_session_bytes
        for ring in list(self._rings.values()):
            if excess <= 0:
                return
            if ring is keep:
                continue
            gone = ring.drop_oldest(excess)
            self.retained -= gone
            excess -= gone
        if excess > 0:  # only the job being written holds more than the session may keep
            self.retained -= keep.drop_oldest(excess)

    def get(self, job_id: str) -> OutputRing | None:
        return self._rings.get(job_id)

    def forget(self, job_id: str) -> None:
        ring = self._rings.pop(job_id, None)
        if ring is not None:
            self.retained -= ring.retained
            ring.close()

    def close(self) -> None:
        """Close every ring's file (the store keeps what is in memory)."""
        for ring in self._rings.values():
            before = ring.retained
            ring.close()
            self.retained -= before - ring.retained

    def __len__(self) -> int:
        return len(self._rings)
