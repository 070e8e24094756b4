"""The asyncio channels over real socket pairs: the event loop watches a channel's socket once, not once
per message; a channel left readable while nobody reads it does not spin the loop; closing a channel
ends a receive that waits on it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from peon.core.framing import encode, frame
from peon.workers.channel import Channel, FrameChannel


def _counting(loop: asyncio.AbstractEventLoop, fd: int) -> tuple[Counter[str], Callable[[], None]]:
    """Count add_reader, remove_reader and reader callbacks for ``fd`` on ``loop``; returns the counts and
    an undo."""
    counts: Counter[str] = Counter()
    add, remove = loop.add_reader, loop.remove_reader

    def add_reader(watched: int, callback: Callable[..., Any], *args: Any) -> None:
        if watched == fd:
            counts["add"] += 1

            def counted(*a: Any) -> None:
                counts["callback"] += 1
                callback(*a)

            return add(watched, counted, *args)
        return add(watched, callback, *args)

    def remove_reader(watched: int) -> bool:
        if watched == fd:
            counts["remove"] += 1
        return remove(watched)

    loop.add_reader, loop.remove_reader = add_reader, remove_reader  # type: ignore[method-assign]

    def undo() -> None:
        loop.add_reader, loop.remove_reader = add, remove  # type: ignore[method-assign]

    return counts, undo


@contextlib.contextmanager
def _watched_pair(kind: type[Channel] | type[FrameChannel]) -> Iterator[tuple[Any, socket.socket, Counter[str]]]:
    """A channel of ``kind`` over one end of a socket pair, the other end, and the counts of how the
    running loop watches the channel's socket (:func:`_counting`); all closed and undone afterwards."""
    ours, theirs = socket.socketpair()
    channel = kind(ours)
    counts, undo = _counting(asyncio.get_running_loop(), ours.fileno())
    try:
        yield channel, theirs, counts
    finally:
        undo()
        channel.close()
        theirs.close()


def test_a_channel_is_watched_once_for_all_its_messages():
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        with _watched_pair(FrameChannel) as (channel, theirs, counts):
            for number in range(100):  # each message arrives while the receive waits for it
                loop.call_later(0.001, theirs.send, frame(b"message %d" % number))
                assert await channel.recv() == b"message %d" % number
            assert counts["add"] == 1 and counts["remove"] == 0, counts
            channel.close()
            assert counts["remove"] == 1, counts

    asyncio.run(scenario())


def test_a_channel_nobody_reads_does_not_spin_the_loop():
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        with _watched_pair(Channel) as (channel, theirs, counts):
            loop.call_later(0.001, theirs.send, encode({"op": "first"}))
            assert await channel.recv() == {"op": "first"}
            theirs.send(encode({"op": "second"}))  # readable, and nobody reads for a while
            await asyncio.sleep(0.2)
            assert counts["callback"] <= 2, counts  # level-triggered: once per loop turn if still watched
            assert await channel.recv() == {"op": "second"}
            theirs.close()
            assert await channel.recv() is None

    asyncio.run(scenario())


def test_closing_a_channel_ends_a_receive_that_waits_on_it():
    async def scenario() -> None:
        ours, theirs = socket.socketpair()
        channel = FrameChannel(ours)
        try:
            waiting = asyncio.create_task(channel.recv())
            await asyncio.sleep(0.01)
            assert not waiting.done()
            channel.close()
            assert await asyncio.wait_for(waiting, 5) is None
            assert await channel.recv() is None
        finally:
            theirs.close()

    asyncio.run(scenario())
