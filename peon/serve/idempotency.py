"""Retries without double execution, sans I/O: a bounded store of calls by idempotency key.

A ``tools/call`` may carry ``params._meta["peon/idempotencyKey"]`` (a string of 1 to 200 visible ASCII
characters). The first call with a key runs; a call with the same key, tool and arguments within the
window gets the first call's result instead of running again — at once when it has finished, or when
it finishes if it is still running. The same key with a different tool or different arguments is refused.

Promises:

* :meth:`IdempotencyStore.claim` answers every key with exactly one of :class:`Run` (run it, then
  :meth:`finish`), :class:`Replay` (its stored outcome), :class:`Follow` (wait for the running one),
  :class:`Conflict` or :class:`Full`; it never raises and never runs a key twice while its entry lives;
* at most ``max_entries`` keys are held; finished entries leave after ``window_seconds`` or, when room
  is needed, oldest first; running entries are never evicted (there are at most as many as calls in
  flight), so a full store of running calls refuses new keys instead of forgetting one;
* outcomes are whatever the caller stores: every outcome of a call that started is kept, including a
  cancellation, since its processes may have done part of their work — a retry never runs it again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from peon.mcp.tools import IDEMPOTENCY_KEY

MAX_KEY_LENGTH = 200
_KEY = re.compile(rf"^[\x21-\x7e]{{1,{MAX_KEY_LENGTH}}}$")

T = TypeVar("T")


def key_problem(value: Any) -> str | None:
    """Why a ``peon/idempotencyKey`` value is not usable, or ``None``."""
    if isinstance(value, str) and _KEY.match(value):
        return None
    return (f"{IDEMPOTENCY_KEY} must be a string of 1 to {MAX_KEY_LENGTH} visible ASCII characters "
            f"(e.g. a UUID), got {str(value)[:60]!r}")


def fingerprint(name: str, arguments: Any) -> str:
    canonical = json.dumps([name, arguments], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class Entry(Generic[T]):
    fingerprint: str
    outcome: T | None = None
    finished_at: float | None = None
    waiters: list[Callable[[T], None]] = field(default_factory=list)


@dataclass(frozen=True)
class Run:
    key: str


@dataclass(frozen=True)
class Replay(Generic[T]):
    outcome: T


@dataclass(frozen=True)
class Follow:
    key: str


@dataclass(frozen=True)
class Conflict:
    message: str


@dataclass(frozen=True)
class Full:
    message: str


Claim = Run | Replay[Any] | Follow | Conflict | Full


class IdempotencyStore(Generic[T]):
    def __init__(self, window_seconds: float, max_entries: int, clock: Callable[[], float]):
        self.window_seconds = window_seconds
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[str, Entry[T]] = OrderedDict()  # insertion order = age

    def __len__(self) -> int:
        return len(self._entries)

    def claim(self, key: str, fingerprint: str) -> Claim:
        self._expire()
        entry = self._entries.get(key)
        if entry is not None:
            if entry.fingerprint != fingerprint:
                return Conflict(f"{IDEMPOTENCY_KEY} {key[:60]!r} was already used for a different call (another tool "
                                "or other arguments) within the last "
                                f"{self.window_seconds:g} s; use a new key for a new call")
            if entry.finished_at is not None:
                return Replay(entry.outcome)
            return Follow(key)
        if len(self._entries) >= self.max_entries and not self._evict_one():
            return Full(f"{len(self._entries)} calls with a {IDEMPOTENCY_KEY} are still running, the most this "
                        "server remembers; retry when one has finished")
        self._entries[key] = Entry(fingerprint)
        return Run(key)

    def follow(self, key: str, waiter: Callable[[T], None]) -> None:
        """Call ``waiter`` with the outcome of the running call under ``key`` (at once if it is known)."""
        entry = self._entries.get(key)
        if entry is None:
            return
        if entry.finished_at is not None:
            assert entry.outcome is not None
            waiter(entry.outcome)
        else:
            entry.waiters.append(waiter)

    def unfollow(self, key: str, waiter: Callable[[T], None]) -> None:
        entry = self._entries.get(key)
        if entry is not None and waiter in entry.waiters:
            entry.waiters.remove(waiter)

    def finish(self, key: str, outcome: T) -> None:
        entry = self._entries.get(key)
        if entry is None or entry.finished_at is not None:
            return
        entry.outcome, entry.finished_at = outcome, self.clock()
        self._entries.move_to_end(key)  # the window counts from the end of the call
        waiters, entry.waiters = entry.waiters, []
        for waiter in waiters:
            waiter(outcome)

    def forget(self, key: str) -> None:
        """Drop a running entry whose call never started (so a retry may run it)."""
        entry = self._entries.get(key)
        if entry is not None and entry.finished_at is None and not entry.waiters:
            del self._entries[key]

    def _expire(self) -> None:
        now = self.clock()
        for key, entry in list(self._entries.items()):
            if entry.finished_at is not None and now - entry.finished_at > self.window_seconds:
                del self._entries[key]

    def _evict_one(self) -> bool:
        for key, entry in self._entries.items():
            if entry.finished_at is not None:
                del self._entries[key]
                return True
        return False
