"""Peon's processes abandoned for good — stopped, cut off from their session — end with the next session's
first worker start or ``peon doctor --clean``, whatever the containment; one its session still holds is
left alone. The abandoned processes here are stand-ins started by the test (titled as Peon's, stopped,
with a child below), since what leaves real ones is a race (a command stopping its worker as the last of
its forkserver, supervisor and client dies); the judgement itself is tests/unit/test_orphans.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from helpers import living, wait_for
from peon.workers import orphans, proctree

# A process titled ``title`` with a child (``sleep``), which prints both pids, then stops itself; with
# ``child_title``, its child is such a process instead (its parent the first, which does not stop).
STAND_IN = r"""
import os, signal, subprocess, sys, setproctitle
title, child_title = sys.argv[1], sys.argv[2]
setproctitle.setproctitle(title)
if child_title:
    child = subprocess.Popen([sys.executable, "-c", sys.argv[3], child_title, "", sys.argv[3]])
    child.wait()
else:
    child = subprocess.Popen(["sleep", "300"])
    print(os.getpid(), child.pid, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    child.wait()
"""


def start(title: str, child_title: str = "") -> tuple[subprocess.Popen[str], int, int]:
    process = subprocess.Popen([sys.executable, "-c", STAND_IN, title, child_title, STAND_IN],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    stopped, below = map(int, process.stdout.readline().split())
    assert wait_for(lambda: proctree.state(stopped) == "T", 10)
    return process, stopped, below


@pytest.fixture
def stand_ins():
    started: list[tuple[subprocess.Popen[str], int, int]] = []

    def make(title: str, child_title: str = "") -> tuple[int, int]:
        started.append(start(title, child_title))
        return started[-1][1:]

    yield make
    for process, *pids in started:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.kill()
        process.wait(10)


def test_a_stopped_worker_whose_session_is_gone_ends_with_its_tree(stand_ins):
    worker, below = stand_ins("peon-worker bash 0088e5cf04f2")  # its parent: this test, no Peon process
    ended = orphans.end_abandoned()
    assert any(line.startswith(f"{worker} peon-worker") for line in ended), ended
    assert wait_for(lambda: living([worker, below]) == [], 10), living([worker, below])


def test_a_stopped_worker_its_forkserver_holds_is_left_alone(stand_ins):
    worker, below = stand_ins("peon-forkserver /w", "peon-worker bash 1")
    assert f"{worker} peon-worker bash 1" not in orphans.end_abandoned()
    assert living([worker, below]) == [worker, below] and proctree.state(worker) == "T"


@pytest.mark.parametrize("containment", ["process-tree", "cgroup"])
def test_the_next_session_ends_what_an_abandoned_session_left(stand_ins, open_session, containment, leftovers):
    from helpers import CGROUP_SUPPORT

    if containment == "cgroup" and not CGROUP_SUPPORT.available:
        pytest.skip(f"cgroup v2 unusable here: {CGROUP_SUPPORT.reason}")
    worker, below = stand_ins("peon-worker bash 0088e5cf04f2")
    session = open_session({"runtime": {"containment": containment}})
    assert session.call("bash", {"command": "true"}).ok  # its first worker start looks
    assert wait_for(lambda: living([worker, below]) == [], 10), living([worker, below])
