"""A supervisor launched ahead of its session (``peon.client.spawn``): the session adopts it when it was started
for the same workspace and environment, abandons it otherwise, and nothing of an abandoned or orphaned
launch is left (no process, no runtime directory)."""

from __future__ import annotations

import argparse
import os

import peon
import peon.cli.mcp
import peon.mcp.stdio
from peon.client.spawn import launch


def test_a_session_adopts_the_supervisor_launched_for_it(workspace, tmp_path, leftovers):
    env = leftovers.env()
    early = launch(workspace, env)
    with peon.Session(workspace, {"approval": {"read_only": "allow"}}, state_dir=tmp_path / "state", env=env,
                      launch=early) as session:
        assert session.supervisor_pid == early.process.pid
        (workspace / "f.txt").write_text("adopted\n")
        result = session.call("read", {"path": "f.txt"})
        assert result.ok and "adopted" in str(result.value), result
        early.abandon()  # adopted: abandoning is a no-op and the session goes on
        assert session.call("read", {"path": "f.txt"}).ok
    assert early.process.poll() is not None


def test_a_launch_for_another_environment_or_workspace_is_abandoned(workspace, tmp_path, leftovers):
    other = tmp_path / "other"
    other.mkdir()
    for ahead in (launch(workspace, leftovers.env({"PEON_LAUNCH_TEST": "1"})), launch(other, leftovers.env())):
        with peon.Session(workspace, state_dir=tmp_path / "state", env=leftovers.env(), launch=ahead) as session:
            assert session.supervisor_pid != ahead.process.pid
            assert ahead.process.returncode is not None  # killed and reaped when the session refused it
            assert session.call("bash", {"command": "true"}).error.code == "denied"  # no approver
    assert not leftovers.alive()


def test_an_abandoned_launch_leaves_nothing_and_an_orphaned_one_exits(workspace, leftovers):
    early = launch(workspace, leftovers.env())
    early.abandon()
    early.abandon()
    assert early.process.returncode is not None

    orphan = launch(workspace, leftovers.env())
    orphan.sock.close()  # as when the process that launched it dies before any session adopts it
    assert orphan.process.wait(30) == 2
    orphan.abandon()
    assert not leftovers.alive()


def test_a_session_that_cannot_start_kills_the_launch_it_adopted(workspace, tmp_path, leftovers):
    early = launch(workspace, leftovers.env())
    try:
        peon.Session(workspace, {"limits": {"max_input_bytes": "many"}}, state_dir=tmp_path / "state",
                     env=leftovers.env(), launch=early)
    except peon.ConfigError as exc:
        assert "max_input_bytes" in exc.message
    else:
        raise AssertionError("a bad configuration was accepted")
    assert early.process.returncode is not None
    assert not leftovers.alive()


def test_peon_mcp_serves_with_the_supervisor_it_launched_first(workspace, tmp_path, leftovers, monkeypatch):
    for name, value in leftovers.env().items():  # the environment peon mcp runs with: tagged, a clean HOME
        monkeypatch.setenv(name, value)
    for name in [name for name in os.environ if name.startswith("XDG_")]:
        monkeypatch.delenv(name)
    launched, served = [], []
    real_launch = peon.client.spawn.launch

    def recording_launch(*args, **kwargs):
        launched.append(real_launch(*args, **kwargs))
        return launched[-1]

    def serve(session_factory, identity):  # what the real server does first: open the session
        with session_factory(approver=None) as session:
            served.append(session.supervisor_pid)
        return 0

    monkeypatch.setattr(peon.client.spawn, "launch", recording_launch)
    monkeypatch.setattr(peon.mcp.stdio, "serve", serve)
    options = argparse.Namespace(workspace=str(workspace), config=None, allow=None)
    assert peon.cli.mcp.cmd_mcp(options) == 0
    assert [early.process.pid for early in launched] == served
    assert not leftovers.alive()
