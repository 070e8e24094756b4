"""A thread Peon starts in a client's process blocks the signals the main thread handles."""

from __future__ import annotations

import signal

from peon.core.threads import LEFT_TO_MAIN, helper_thread


def test_a_helper_thread_blocks_the_signals_the_main_thread_handles():
    seen: list[set[int]] = []
    thread = helper_thread(lambda: seen.append(set(signal.pthread_sigmask(signal.SIG_BLOCK, []))), name="t")
    thread.start()
    thread.join(10)
    assert seen and LEFT_TO_MAIN.issubset(seen[0]) and signal.SIGINT in seen[0]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the main thread's own mask is untouched

