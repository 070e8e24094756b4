"""Turns, first come first served: how many of the session's calls may hold something at once, and in
which order the others get it (a slot to run in, the approver's attention, the file-changing turn).

Promise: a :class:`Turns` of ``size`` has at most ``size`` turns held at once; the others wait in the
order they joined. :meth:`Turns.join` is synchronous, so that order is the order of the calls to it —
whatever the event loop schedules between them. :meth:`Turn.wait` returns once the turn is held, or
at once when its call is cancelled, which leaves the line; :meth:`Turn.release` gives a turn back (or
leaves the line) exactly once, however often it is called, and the next in line then holds it. No
turn is held by a call that is gone: whoever joins releases, in a ``finally``.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Turn:
    """One place in a :class:`Turns` line, then the turn itself."""

    def __init__(self, turns: Turns) -> None:
        self._turns = turns
        self._granted: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._released = False

    @property
    def held(self) -> bool:
        return self._granted.done() and not self._released

    async def wait(self, cancelled: asyncio.Event) -> bool:
        """Wait until this turn is held: True; False (and out of the line) when ``cancelled`` is set first."""
        if not self._granted.done() and not cancelled.is_set():
            waiter: asyncio.Future[object] = asyncio.ensure_future(cancelled.wait())
            try:
                await asyncio.wait({self._granted, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
        if cancelled.is_set():
            self.release()
            return False
        return self._granted.done()

    def release(self) -> None:
        """Give the turn back, or leave the line; the next in line moves up. Idempotent."""
        if self._released:
            return
        self._released = True
        self._turns.give_back(self, held=self._granted.done())


class Turns:
    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a line needs at least one turn")
        self.size = size
        self.held = 0
        self._line: deque[Turn] = deque()

    def join(self) -> Turn:
        """A place at the end of the line (the turn itself at once, when one is free)."""
        turn = Turn(self)
        self._line.append(turn)
        self._advance()
        return turn

    def give_back(self, turn: Turn, *, held: bool) -> None:
        """(:meth:`Turn.release`.) A turn given back, or a place left."""
        if held:
            self.held -= 1
        else:
            try:
                self._line.remove(turn)
            except ValueError:
                pass
        self._advance()

    def _advance(self) -> None:
        while self.held < self.size and self._line:
            turn = self._line.popleft()
            self.held += 1
            turn._granted.set_result(None)

    @property
    def waiting(self) -> int:
        return len(self._line)
