"""``RemoteSession`` waits for a ``peon serve`` that answers 503 "not ready" (its session is starting): it
asks again after the server's ``Retry-After``, within ``ready_timeout``, and then gives up."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from peon.client import remote


def not_ready(session: remote.AsyncRemoteSession, times: int) -> list[float]:
    asked: list[float] = []

    async def connect_once():
        asked.append(time.monotonic())
        if len(asked) <= times:
            raise remote._NotReady("not ready: starting: the session's supervisor is not ready yet", 0.05)
        return "connection"

    session._connect_once = connect_once  # type: ignore[method-assign]
    return asked


def test_a_server_still_starting_is_asked_again_until_ready():
    session = remote.AsyncRemoteSession("http://127.0.0.1:9/mcp", ready_timeout=10)
    asked = not_ready(session, 3)
    assert asyncio.run(session._connect()) == "connection"
    assert len(asked) == 4 and all(b - a >= 0.04 for a, b in itertools.pairwise(asked))


def test_a_server_never_ready_fails_within_the_bound():
    session = remote.AsyncRemoteSession("http://127.0.0.1:9/mcp", ready_timeout=0.3)
    asked = not_ready(session, 1000)
    started = time.monotonic()
    with pytest.raises(remote._NotReady, match="not ready"):
        asyncio.run(session._connect())
    assert time.monotonic() - started < 2 and 2 <= len(asked) < 1000
