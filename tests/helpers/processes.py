"""The processes a test proves things about: a session's workers by their process titles, the pids a command
recorded in the workspace, the check that they are gone, and the fork loop the containment tests run."""

from __future__ import annotations

from pathlib import Path

from helpers import living
from peon.workers import proctree

FORK_LOOP = (Path(__file__).parent.parent / "fixtures" / "forkloop.py").read_text()


def workers_of(session, prefix: str = "peon-worker") -> list[int]:
    return [p for p in proctree.descendants(session.supervisor_pid) if proctree.cmdline(p).startswith(prefix)]


def recorded_pids(workspace, name: str) -> list[int]:
    path = workspace / name
    assert path.exists(), f"the command did not record {name}"
    return [int(p) for p in path.read_text().split()]


def assert_gone(pids):
    assert pids, "nothing recorded: the test would prove nothing"
    assert living(pids) == [], f"still alive after the call returned: {living(pids)}"
