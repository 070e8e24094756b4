"""Connections that stall before their request is complete (slowloris), for ``peon serve``.

Promises:

* a connection has ``header_seconds`` from its opening (or from the end of its previous response) to
  send a complete request head; past that it is closed, whatever it has sent;
* at most ``max_pending`` connections wait for a request head at once — a request head is where the
  token is, so these are the unauthenticated ones — and a new one beyond that closes the one waiting
  longest, so stalled connections can never crowd out ``/healthz``, ``/readyz``, ``/metrics`` or a
  client that sends its request;
* the request body has its own bound: :func:`peon.serve.app.read_body` waits at most ``body_seconds``
  for each part of it (408 beyond).

:class:`PendingHeads` is the decision (which connections to shed), without I/O; :func:`guarded_protocol`
applies it to uvicorn's h11 protocol.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


class PendingHeads:
    """Connections waiting for their request head, oldest first, bounded by ``limit``."""

    def __init__(self, limit: int):
        self.limit = limit
        self._waiting: collections.OrderedDict[int, Callable[[], None]] = collections.OrderedDict()
        self.shed = 0  # connections closed to make room

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, key: int, close: Callable[[], None]) -> list[Callable[[], None]]:
        """Record a connection that waits; returns the closers of the oldest ones beyond the limit."""
        self._waiting.pop(key, None)
        self._waiting[key] = close
        excess: list[Callable[[], None]] = []
        while len(self._waiting) > self.limit:
            _, oldest = self._waiting.popitem(last=False)
            excess.append(oldest)
            self.shed += 1
        return excess

    def discard(self, key: int) -> None:
        self._waiting.pop(key, None)


def guarded_protocol(header_seconds: float, max_pending: int,
                     on_stalled: Callable[[str], None] = lambda _: None) -> tuple[type[H11Protocol], PendingHeads]:
    """uvicorn's h11 protocol with the head deadline and the cap; ``on_stalled`` hears each closing
    (``"timeout"`` or ``"shed"``)."""
    pending = PendingHeads(max_pending)

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_done()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not None and self.cycle is not before:
                self._head_done()  # a request head arrived: the request is the app's to bound

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                self._await_head()

        def _await_head(self) -> None:
            self._head_done()
            self._head_timer = self.loop.call_later(header_seconds, self._close_stalled, "timeout")
            for close in pending.add(id(self), lambda: self._close_stalled("shed")):
                close()

        def _head_done(self) -> None:
            pending.discard(id(self))
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _close_stalled(self, why: str) -> None:
            self._head_done()
            if not self.transport.is_closing():
                on_stalled(why)
                self.transport.close()

    return GuardedH11Protocol, pending
