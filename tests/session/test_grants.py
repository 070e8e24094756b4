"""Session grants: scopes match exactly what they say, the file is private and atomic, and grants
survive a supervisor killed with SIGKILL and restarted on the same state directory."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import threading

import pytest

import peon
from helpers import wait_for
from peon.core.tool import ToolRisk
from peon.approval.policy import ApprovalRequest
from peon.supervisor.approval.grants import GrantStore

DEFAULT_APPROVAL = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}


def req(tool="bash", risk=ToolRisk.PROCESS, canonical='{"command":"ls"}') -> ApprovalRequest:
    return ApprovalRequest(call_id="c", tool=tool, risk=risk, risk_reason="r", summary="s", canonical_input=canonical)


# -- pure matching and the file --------------------------------------------------------------------


def test_call_scope_matches_the_identical_call_only(tmp_path):
    store = GrantStore(tmp_path)
    store.add(req(), "call")
    assert store.find(req()) is not None
    assert store.find(req(canonical='{"command":"ls "}')) is None
    assert store.find(req(tool="sh")) is None
    assert store.find(req(risk=ToolRisk.DELEGATE)) is None


def test_tool_scope_matches_the_tool_at_that_risk(tmp_path):
    store = GrantStore(tmp_path)
    store.add(req("read", ToolRisk.FILESYSTEM, '{"path":".env"}'), "tool")
    assert store.find(req("read", ToolRisk.FILESYSTEM, '{"path":"id_rsa"}')).scope == "tool"
    assert store.find(req("write", ToolRisk.FILESYSTEM, '{"path":".env"}')) is None
    assert store.find(req("read", ToolRisk.PROCESS, '{"path":".env"}')) is None


def test_risk_scope_matches_every_tool_of_that_risk(tmp_path):
    store = GrantStore(tmp_path)
    store.add(req("bash"), "risk")
    assert store.find(req("agent_claude")).scope == "risk"
    assert store.find(req("write", ToolRisk.FILESYSTEM)) is None


def test_the_narrowest_grant_is_reported(tmp_path):
    store = GrantStore(tmp_path)
    store.add(req(), "risk")
    store.add(req(), "call")
    assert store.find(req()).scope == "call"


def test_grants_persist_privately_without_the_input(tmp_path):
    store = GrantStore(tmp_path)
    secret = '{"command":"echo SECRET-TOKEN-123"}'
    store.add(req(canonical=secret), "call")
    path = tmp_path / "grants.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "SECRET-TOKEN-123" not in path.read_text()
    assert sorted(os.listdir(tmp_path)) == ["grants.json"]  # no temporary file left behind
    again = GrantStore(tmp_path)
    assert again.find(req(canonical=secret)) is not None
    assert again.find(req()) is None


@pytest.mark.parametrize("content", [b"{not json", b'{"version": 99, "grants": []}', b'{"version": 1}',
                                     b'{"version": 1, "grants": [{"scope": "everything"}]}', b"[]"])
def test_a_corrupt_file_means_no_grants(tmp_path, capsys, content):
    (tmp_path / "grants.json").write_bytes(content)
    store = GrantStore(tmp_path)
    assert store.grants == [] and store.find(req()) is None
    assert "ignoring unreadable session grants" in capsys.readouterr().err
    store.add(req(), "call")  # and the next grant rewrites it whole
    assert GrantStore(tmp_path).find(req()) is not None


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "socket", "symlink", "symlink-to-fifo"])
def test_a_grants_file_that_is_not_a_regular_file_is_not_opened(tmp_path, capsys, kind):
    """Planted by a command in the state directory, none of these may block or redirect the supervisor."""
    path = tmp_path / "grants.json"
    real = tmp_path / "real.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("creating a device node needs root")
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "symlink":  # a valid grants file elsewhere: still not read through the link
        GrantStore(tmp_path).add(req(), "risk")
        os.replace(path, real)
        path.symlink_to(real)
    elif kind == "symlink-to-fifo":
        os.mkfifo(real)
        path.symlink_to(real)
    outcome = {}
    loader = threading.Thread(target=lambda: outcome.update(store=GrantStore(tmp_path)), daemon=True)
    loader.start()
    loader.join(10)
    assert not loader.is_alive(), "loading the grants hung"
    assert outcome["store"].grants == [] and outcome["store"].find(req()) is None
    err = capsys.readouterr().err
    assert "ignoring unreadable session grants" in err and "not a regular file" in err


@pytest.mark.parametrize("content, why", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"version": 1, "grants": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
    (b'{"version": 1, "grants": [' + b'{"a": ' * 3000 + b"1" + b"}" * 3000 + b"]}", "nested too deeply"),
    (b'"just a string"', "expected a JSON object"),
    (b" " * ((8 << 20) + 1), "the limit is 8388608"),
])
def test_a_corrupt_or_hostile_file_means_no_grants(tmp_path, capsys, content, why):
    (tmp_path / "grants.json").write_bytes(content)
    store = GrantStore(tmp_path)
    assert store.grants == []
    err = capsys.readouterr().err
    assert "ignoring unreadable session grants" in err and why in err, err
    store.add(req(), "call")  # the next grant replaces the file whole
    assert GrantStore(tmp_path).find(req()) is not None


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
