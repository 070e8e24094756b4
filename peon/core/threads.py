"""The threads Peon starts in its client's process (a session's reader, an approval prompt, the remote
client's event loop, ``peon mcp``'s session start).

Promise: such a thread blocks the asynchronous signals an application handles (:data:`LEFT_TO_MAIN`),
so the kernel delivers them to a thread that does not block them — the main thread, where Python runs
signal handlers. A process-directed ``SIGINT`` that lands on a helper thread only sets Python's flag,
and a main thread blocked in ``Event.wait()`` would never see it: Ctrl-C would not interrupt a waiting
``peon call``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

LEFT_TO_MAIN = frozenset({
    signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
    signal.SIGALRM, signal.SIGCHLD, signal.SIGWINCH,
})


def helper_thread(target: Callable[..., Any], *, name: str | None = None, args: tuple[Any, ...] = (),
                  daemon: bool = True) -> threading.Thread:
    """A thread (not started) that runs ``target(*args)`` with :data:`LEFT_TO_MAIN` blocked."""

    def run() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, LEFT_TO_MAIN)
        target(*args)

    return threading.Thread(target=run, name=name, daemon=daemon)
