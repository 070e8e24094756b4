"""The output store: what recent calls and jobs wrote, kept in memory within byte quotas (sans I/O).

Promise (pure, no I/O, no clock): every byte a job writes has an absolute offset — its position in
everything that job wrote — and :meth:`OutputStore.read` returns bytes by those offsets, so a reader
that pages with ``next_offset`` never reads a byte twice nor skips one that is still retained. Memory
stays bounded however much is written: one job keeps at most ``per_job_bytes`` (its newest bytes, the
oldest dropped first) and the whole store at most ``per_session_bytes`` (the oldest jobs' bytes evicted
first), plus at most one appended chunk while it is being trimmed. What was dropped is reported, never
hidden: a read from an offset that is gone starts at the oldest retained byte and says
``dropped_before``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    data: bytes
    offset: int  # absolute offset of data[0]
    next_offset: int  # where the next read continues
    total_bytes: int  # everything the job wrote so far
    retained_from: int  # the oldest offset still retained
    dropped_before: int | None  # set when the requested offset was evicted: bytes below it are gone


class OutputRing:
    """One job's newest output within ``quota`` bytes, as chunks with absolute offsets."""

    def __init__(self, quota: int):
        if quota < 0:
            raise ValueError("quota must not be negative")
        self.quota = quota
        self._chunks: deque[bytes] = deque()
        self.start = 0  # absolute offset of the first retained byte
        self.total = 0  # absolute offset one past the last byte written
        self.retained = 0

    def append(self, data: bytes) -> None:
        if not data:
            return
        self.total += len(data)
        if len(data) > self.quota:  # keep only its tail
            data = data[len(data) - self.quota :] if self.quota else b""
            self.drop_oldest(self.retained)
            self.start = self.total - len(data)
        if data:
            self._chunks.append(bytes(data))
            self.retained += len(data)
        self.drop_oldest(self.retained - self.quota)

    def skip_to(self, offset: int) -> None:
        """Count everything before ``offset`` as written and already dropped (the writer kept only
        what follows); only forward."""
        if offset > self.total:
            self.drop_oldest(self.retained)
            self.total = self.start = offset

    def drop_oldest(self, count: int) -> int:
        """Evict up to ``count`` of the oldest retained bytes; return how many went."""
        dropped = 0
        while count > 0 and self._chunks:
            first = self._chunks[0]
            if len(first) <= count:
                self._chunks.popleft()
                taken = len(first)
            else:
                self._chunks[0] = first[count:]
                taken = count
            count -= taken
            dropped += taken
        self.retained -= dropped
        self.start += dropped
        if not self._chunks:
            self.start = self.total
        return dropped

    def read(self, offset: int, limit: int) -> Page:
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        dropped = self.start if offset < self.start else None
        begin = max(offset, self.start)
        end = min(begin + limit, self.total)
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


class OutputStore:
    """The rings of a session's jobs, oldest first, within a per-job and a per-session quota."""

    def __init__(self, per_job_bytes: int, per_session_bytes: int):
        self.per_job_bytes = per_job_bytes
        self.per_session_bytes = per_session_bytes
        self._rings: OrderedDict[str, OutputRing] = OrderedDict()
        self.retained = 0

    def open(self, job_id: str) -> OutputRing:
        if job_id in self._rings:
            raise ValueError(f"job {job_id!r} already has output")
        ring = self._rings[job_id] = OutputRing(min(self.per_job_bytes, self.per_session_bytes))
        return ring

    def append(self, job_id: str, data: bytes) -> None:
        ring = self._rings[job_id]
        before = ring.retained
        ring.append(data)
        self.retained += ring.retained - before
        self._evict(keep=ring)

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

    def __len__(self) -> int:
        return len(self._rings)
