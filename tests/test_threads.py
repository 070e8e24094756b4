"""Threads Peon starts in a client's process leave the application's signals to its main thread."""

from __future__ import annotations

import signal

from peon.threads import LEFT_TO_MAIN, helper_thread


def test_a_helper_thread_blocks_the_signals_the_main_thread_handles():
    seen: list[set[int]] = []
    thread = helper_thread(lambda: seen.append(set(signal.pthread_sigmask(signal.SIG_BLOCK, []))), name="t")
    thread.start()
    thread.join(10)
    assert seen and LEFT_TO_MAIN.issubset(seen[0]) and signal.SIGINT in seen[0]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the main thread's own mask is untouched


def test_a_session_reader_thread_leaves_ctrl_c_to_the_main_thread(session):
    reader = session._reader
    assert reader.is_alive()
    # The reader's mask, read from /proc: SigBlk of its task has SIGINT's bit set.
    with open(f"/proc/self/task/{reader.native_id}/status") as status:
        blocked = int(next(line for line in status if line.startswith("SigBlk:")).split()[1], 16)
    assert blocked & (1 << (signal.SIGINT - 1))
