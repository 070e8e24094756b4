"""The session's egress proxy run on a thread of its own for a test, on a free port of the loopback, with the
resolver the test gives it (names never reach a real resolver); stopped, and its listener closed, when the
``with`` block ends."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from peon.supervisor.egress import Proxy


@contextlib.contextmanager
def running_proxy(entries: Iterable[str], resolve: Any, **options: Any) -> Iterator[tuple[Proxy, int]]:
    """(the proxy, its port) while the block runs."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    proxy = Proxy(listener, tuple(entries), resolve, **options)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    serving = asyncio.run_coroutine_threadsafe(proxy.serve(), loop)
    try:
        yield proxy, listener.getsockname()[1]
    finally:
        serving.cancel()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.2), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        listener.close()
