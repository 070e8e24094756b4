"""Session grants through real sessions: scopes cover what they say, never override a deny policy, belong to
their state directory, and survive a supervisor killed with SIGKILL and restarted on the same state
directory. The grants' own rules are tests/unit/test_grant_scopes.py."""

from __future__ import annotations

import json
import os
import signal

import pytest

import peon
from helpers import wait_for

DEFAULT_APPROVAL = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}


# -- through sessions ------------------------------------------------------------------------------


class Approver:
    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        return self.answers.pop(0) if self.answers else "deny"


@pytest.fixture
def env(tmp_path):
    return {"XDG_CONFIG_HOME": str(tmp_path / "no-user-config")}


def test_allow_for_this_session_matches_the_identical_call_only(open_session, env):
    approver = Approver({"decision": "allow_session"})
    session = open_session({"approval": DEFAULT_APPROVAL}, env=env, approver=approver)
    assert session.call("bash", {"command": "echo a", "timeout_seconds": 9}).ok
    # Same canonical input (key order does not matter): covered, not asked.
    r = session.call("bash", {"timeout_seconds": 9, "command": "echo a"})
    assert r.ok and len(approver.requests) == 1
    # Anything else is asked (and denied by this approver).
    for args in ({"command": "echo a"}, {"command": "echo a", "timeout_seconds": 8},
                 {"command": "echo  a", "timeout_seconds": 9}):
        assert session.call("bash", args).error.details["by"] == "approver"
    assert len(approver.requests) == 4


def test_tool_scope_covers_every_call_of_the_tool(open_session, env, workspace):
    pytest.importorskip("peon.tools.write")
    approver = Approver({"decision": "allow_session", "scope": "tool"})
    session = open_session({"approval": DEFAULT_APPROVAL}, env=env, approver=approver)
    for command in ("echo 1", "echo 2", "true"):
        assert session.call("bash", {"command": command}).ok
    assert len(approver.requests) == 1
    r = session.call("write", {"path": "f.txt", "content": "x", "mode": "create"})  # another tool is asked
    assert r.error.details["by"] == "approver"
    assert len(approver.requests) == 2


def test_risk_scope_covers_every_call_of_that_risk(open_session, env, workspace):
    pytest.importorskip("peon.tools.write")
    approver = Approver({"decision": "allow_session", "scope": "risk"})
    session = open_session({"approval": DEFAULT_APPROVAL}, env=env, approver=approver)
    assert session.call("write", {"path": "a.txt", "content": "1", "mode": "create"}).ok
    assert session.call("write", {"path": "b.txt", "content": "2", "mode": "create"}).ok
    assert len(approver.requests) == 1
    assert session.call("bash", {"command": "true"}).error.details["by"] == "approver"  # process risk: asked


def test_grants_survive_a_supervisor_sigkill_and_restart(open_session, env, tmp_path, workspace):
    state_dir = tmp_path / "shared-state"
    first = Approver({"decision": "allow_session", "scope": "call"})
    session = open_session({"approval": DEFAULT_APPROVAL}, env=env, approver=first, state_dir=state_dir,
                           session_id="sticky-session")
    assert session.call("bash", {"command": "echo granted"}).ok
    os.kill(session.supervisor_pid, signal.SIGKILL)
    assert wait_for(lambda: not session.alive, 10)
    r = session.call("bash", {"command": "echo granted"})
    assert r.error.code in ("supervisor_died", "session_closed")

    second = Approver()  # denies whatever it is asked
    again = open_session({"approval": DEFAULT_APPROVAL}, env=env, approver=second, state_dir=state_dir,
                         session_id="sticky-session")
    assert again.supervisor_pid != session.supervisor_pid
    r = again.call("bash", {"command": "echo granted"})
    assert r.ok and r.value["output"] == "granted\n"
    assert second.requests == []
    assert again.call("bash", {"command": "echo other"}).error.details["by"] == "approver"
    assert len(second.requests) == 1
    grants = json.loads((state_dir / "grants.json").read_text())["grants"]
    assert [(g["tool"], g["scope"]) for g in grants] == [("bash", "call")]


def test_a_grant_never_overrides_a_deny_policy(open_session, env, tmp_path):
    state_dir = tmp_path / "state"
    approver = Approver({"decision": "allow_session", "scope": "risk"})
    open_session({"approval": DEFAULT_APPROVAL}, env=env, approver=approver, state_dir=state_dir,
                 session_id="s").call("bash", {"command": "true"})
    stricter = open_session({"approval": {**DEFAULT_APPROVAL, "process": "deny"}}, env=env, approver=approver,
                            state_dir=state_dir, session_id="s")
    r = stricter.call("bash", {"command": "true"})
    assert r.error.details["by"] == "policy"


def test_grants_belong_to_their_state_directory(open_session, env, tmp_path):
    approver = Approver({"decision": "allow_session", "scope": "tool"})
    open_session({"approval": DEFAULT_APPROVAL}, env=env, approver=approver,
                 state_dir=tmp_path / "one").call("bash", {"command": "true"})
    other = Approver()
    r = open_session({"approval": DEFAULT_APPROVAL}, env=env, approver=other,
                     state_dir=tmp_path / "two").call("bash", {"command": "true"})
    assert r.error.details["by"] == "approver" and len(other.requests) == 1


def test_peon_session_restart_uses_same_dir_by_session_id(tmp_path, leftovers, workspace, env):
    """The documented way to resume: same session_id and state_dir in a new peon.Session."""
    state_dir = tmp_path / "resume"
    config = {"approval": DEFAULT_APPROVAL}
    with peon.Session(workspace, config, session_id="r1", state_dir=state_dir, env=leftovers.env(env),
                      approver=Approver({"decision": "allow_session"})) as s:
        assert s.call("bash", {"command": "echo r"}).ok
    with peon.Session(workspace, config, session_id="r1", state_dir=state_dir, env=leftovers.env(env),
                      approver=Approver()) as s:
        assert s.call("bash", {"command": "echo r"}).ok
