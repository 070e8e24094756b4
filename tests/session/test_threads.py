"""Threads Peon starts in a client's process leave the application's signals to its main thread."""

from __future__ import annotations

import signal

import psutil

from helpers import wait_for
from peon.core.threads import helper_thread


def test_a_session_reader_thread_leaves_ctrl_c_to_the_main_thread(session):
    reader = session._reader
    assert reader.is_alive()
    # The reader's mask, read from /proc: SigBlk of its task has SIGINT's bit set.
    assert _blocked(f"self/task/{reader.native_id}") & (1 << (signal.SIGINT - 1))


def _blocked(task: int | str) -> int:
    """The blocked-signal mask (``SigBlk``) of ``/proc/<task>``: a pid, or ``self/task/<tid>``."""
    with open(f"/proc/{task}/status") as status:
        return int(next(line for line in status if line.startswith("SigBlk:")).split()[1], 16)


def test_a_session_opened_from_a_helper_thread_leaves_its_processes_signals_unblocked(open_session):
    """A process inherits its parent thread's signal mask across fork and exec: opened from a thread that
    blocks SIGTERM and SIGCHLD, the supervisor could not be stopped nor reap, its forkserver could not be
    stopped, and a worker would not hear its forkserver die."""
    opened: list = []
    thread = helper_thread(lambda: opened.append(open_session()), name="opener")
    thread.start()
    thread.join(60)
    assert opened, "the session did not open from the helper thread"
    session = opened[0]
    # $PPID: the worker. It blocks every signal for a moment while it starts the command (glibc's
    # posix_spawn, until bash has exec'd), so its mask is read until that moment has passed (2 s at most).
    read_until_clear = ("for i in $(seq 100); do m=$(grep SigBlk: /proc/$PPID/status); "
                        "case $m in *0000000000000000) break;; esac; sleep 0.02; done; echo $m")
    result = session.call("bash", {"command": read_until_clear})
    assert result.ok and result.value["exit_code"] == 0, result
    assert int(result.value["output"].split()[1], 16) == 0, result.value["output"]
    title = f"peon-forkserver {session.workspace}"
    forkservers: list[int] = []
    assert wait_for(lambda: bool(forkservers.extend(_children_titled(session.supervisor_pid, title)) or forkservers),
                    30), f"no process titled {title!r} below {session.supervisor_pid}"
    assert len(forkservers) == 1, forkservers
    for pid in (session.supervisor_pid, *forkservers):
        assert _blocked(pid) == 0, (pid, hex(_blocked(pid)))


def _children_titled(pid: int, title: str) -> list[int]:
    found = []
    for child in psutil.Process(pid).children():
        try:
            # psutil splits a retitled command line on spaces when the title left no NUL at its end.
            if " ".join(part for part in child.cmdline() if part) == title:
                found.append(child.pid)
        except psutil.Error:  # an orphan the supervisor is reaping
            pass
    return found
