"""Start-up and close: a session that cannot start leaves nothing behind (no process, no cgroup), a
client that gives up on a starting supervisor kills it and everything below it, and cleaning the same
cgroups from several threads at once never raises."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

import peon
import peon.client.session
from helpers import CGROUP_SUPPORT, wait_for
from peon.core.errors import SessionError
from peon.workers import cgroup

FIXTURES = Path(__file__).parent.parent / "fixtures"
needs_cgroup = pytest.mark.skipif(not CGROUP_SUPPORT.available,
                                  reason=f"cgroup v2 unavailable: {CGROUP_SUPPORT.reason}")


def session_cgroups(session_id: str) -> list[str]:
    parent = CGROUP_SUPPORT.parent
    prefix = cgroup.session_cgroup_name(session_id, 0).rsplit("-", 1)[0] + "-"
    return [name for name in os.listdir(parent) if name.startswith(prefix)]


@needs_cgroup
def test_a_supervisor_that_fails_during_start_leaves_no_cgroup(workspace, tmp_path, leftovers):
    session_id = uuid.uuid4().hex
    with pytest.raises(SessionError) as raised:
        peon.Session(workspace, {"runtime": {"containment": "cgroup"}}, session_id=session_id,
                     state_dir=tmp_path / "state", env=leftovers.env({"PYTHONPATH": str(FIXTURES)}),
                     tools=["peon_test_tools:BadSchemaTool"])
    assert "cannot describe itself" in raised.value.message
    assert session_cgroups(session_id) == []
    assert wait_for(lambda: not leftovers.alive(), 10), leftovers.alive()


def test_a_client_that_gives_up_on_a_starting_supervisor_kills_everything_below_it(workspace, tmp_path, leftovers,
                                                                                   monkeypatch):
    monkeypatch.setattr(peon.client.session, "START_TIMEOUT_SECONDS", 3.0)
    session_id = uuid.uuid4().hex
    with pytest.raises(SessionError) as raised:
        peon.Session(workspace, session_id=session_id, state_dir=tmp_path / "state",
                     env=leftovers.env({"PYTHONPATH": str(FIXTURES)}), tools=["peon_hang_on_import:Anything"])
    assert raised.value.code.value == "supervisor_died"
    assert "did not start" in raised.value.message
    # The supervisor hung while importing a tool, after that import had started a process of its own.
    assert wait_for(lambda: not leftovers.alive(), 10), leftovers.alive()
    if CGROUP_SUPPORT.available:
        assert session_cgroups(session_id) == []


@needs_cgroup
def test_cleaning_one_cgroup_tree_from_many_threads_at_once_never_raises(tmp_path):
    for round_ in range(10):
        root = cgroup.Cgroup.create(CGROUP_SUPPORT.parent / f"peon-race-{uuid.uuid4().hex[:12]}")
        procs = []
        for name in ("a", "b", "b/c", "b/c/d"):
            group = cgroup.Cgroup.create(root.path / name)
            proc = subprocess.Popen(["sleep", "1000"])
            group.add(proc.pid)
            procs.append(proc)
        barrier = threading.Barrier(6)
        outcomes: list[object] = []

        def clean(barrier=barrier, outcomes=outcomes, root=root) -> None:
            barrier.wait()
            try:
                outcomes.append(root.kill_and_remove())
            except Exception as exc:  # what this test is about
                outcomes.append(exc)

        threads = [threading.Thread(target=clean) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        for proc in procs:
            proc.wait(10)
        assert outcomes == [True] * 6, (round_, outcomes)
        assert not root.path.exists()


def test_close_racing_an_unresponsive_supervisor(open_session, monkeypatch, leftovers):
    monkeypatch.setattr(peon.client.session, "CLOSE_TIMEOUT_SECONDS", 1.0)
    session = open_session()
    assert session.call("bash", {"command": "true"}).ok
    os.kill(session.supervisor_pid, 19)  # SIGSTOP: close() gives up on it while the reader sees it go
    session.close()
    assert wait_for(lambda: not leftovers.alive(), 10), leftovers.alive()


