"""Process-tree helpers the deadline relies on: the groups listed ahead of a kill, and a process's state
watched through its stopping and its end. The limits watchdog's sampling is tests/unit/test_watchdog.py."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys

import pytest

from helpers import wait_for, written
from peon.workers import proctree

# A child in a new session that forks a grandchild into a session of its own, then both sleep.
ESCAPING_TREE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    open("grandchild.pid", "w").write(f"{os.getpid()}\\n")
    time.sleep(1000)
open("child.pid", "w").write(f"{os.getpid()}\\n")
time.sleep(1000)
"""


def test_groups_below_lists_every_escaped_group_but_the_callers(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", ESCAPING_TREE], cwd=tmp_path, start_new_session=True)
    try:
        assert wait_for(lambda: written(tmp_path / "child.pid") and written(tmp_path / "grandchild.pid"))
        grandchild = int((tmp_path / "grandchild.pid").read_text())
        groups = proctree.groups_below(os.getpid(), until=math.inf)
        assert {child.pid, grandchild} <= groups
        assert os.getpgid(0) not in groups
        assert proctree.groups_below(os.getpid(), until=0.0) == set()  # past its time: lists nothing
    finally:
        grandchildren = [int((tmp_path / "grandchild.pid").read_text())] if written(tmp_path / "grandchild.pid") else []
        for group in (child.pid, *grandchildren):  # each leads its own session
            proctree.signal_group(group, signal.SIGKILL)
        child.wait()


def test_a_member_that_left_its_group_before_the_group_was_killed_is_killed_all_the_same(tmp_path, monkeypatch):
    """The group's SIGKILL misses a process that ran ``setsid`` between its listing and the ``killpg``:
    played here by a ``killpg`` that reaches nobody. The next listing finds it alive and kills it itself."""
    child = subprocess.Popen([sys.executable, "-c", ESCAPING_TREE], cwd=tmp_path, start_new_session=True)
    missed: list[int] = []
    try:
        assert wait_for(lambda: written(tmp_path / "child.pid") and written(tmp_path / "grandchild.pid"))
        grandchild = int((tmp_path / "grandchild.pid").read_text())
        monkeypatch.setattr(proctree, "signal_group", lambda group, sig: missed.append(group))
        assert proctree.kill_tree(child.pid, timeout=5.0) == []
        assert missed == [grandchild]  # its group was "killed" once, and it was then killed by pid
        assert wait_for(lambda: proctree.state(grandchild) in (None, "Z", "X"))
    finally:
        monkeypatch.undo()
        grandchildren = [int((tmp_path / "grandchild.pid").read_text())] if written(tmp_path / "grandchild.pid") else []
        for group in (child.pid, *grandchildren):
            proctree.signal_group(group, signal.SIGKILL)
        child.wait()


def test_a_state_watch_reads_a_process_through_its_stopping_its_end_and_a_misleading_name(tmp_path):
    # The executable's name becomes the process name: ")" and a state letter in it must not be read
    # as the state.
    fake = tmp_path / "a) T b"
    fake.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(fake), "30"])
    try:
        watch = proctree.StateWatch(child.pid)
        assert wait_for(lambda: watch.state() == "S", 10), watch.state()
        os.kill(child.pid, signal.SIGSTOP)
        assert wait_for(lambda: watch.state() == "T", 10), watch.state()
        os.kill(child.pid, signal.SIGKILL)
        assert wait_for(lambda: watch.state() == "Z", 10), watch.state()  # dead, not yet reaped
        child.wait(timeout=10)
        assert watch.state() is None  # reaped: whatever reuses the pid, this descriptor says gone
        watch.close()
        assert watch.state() is None
    finally:
        child.kill()
        child.wait(timeout=10)


def test_a_state_watch_of_a_process_that_is_gone_cannot_be_made():
    child = subprocess.Popen(["/bin/true"])
    child.wait(timeout=10)
    with pytest.raises(OSError):
        proctree.StateWatch(child.pid)
