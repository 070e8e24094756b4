"""Deadlines and cancellation as explicit objects.

Promise: a :class:`Deadline` is an absolute point on ``CLOCK_MONOTONIC``, which every process on the
machine shares, so the supervisor can compute it and a worker can enforce it without translation.
A :class:`CancelToken` is set at most once; whoever holds it can ask whether, why and since when the
call was cancelled, or wait for it.
"""

from __future__ import annotations

import math
import time


class Deadline:
    """An absolute monotonic time after which the call must stop."""

    __slots__ = ("at",)

    def __init__(self, at: float):
        if math.isnan(at):
            raise ValueError("deadline must be a number")
        self.at = at

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def __repr__(self) -> str:
        return f"Deadline(in {self.at - time.monotonic():.3f}s)"


class CancelToken:
    """Set once when the call is cancelled; tools poll :attr:`cancelled` or ``await wait()``."""

    def __init__(self) -> None:
        import asyncio  # here: a client loads this module (through the tool contract) and runs no event loop

        self._event = asyncio.Event()
        self.reason: str | None = None
        self.cancelled_at: float | None = None

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def cancel(self, reason: str = "cancelled by the client") -> None:
        if self.reason is None:
            self.reason = reason
            self.cancelled_at = time.monotonic()
            self._event.set()

    async def wait(self) -> str:
        await self._event.wait()
        assert self.reason is not None
        return self.reason
