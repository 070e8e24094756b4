"""Approval through real sessions: the request the approver sees, every answer, failing closed (no
approver, errors, timeouts, cancellation), rules and project floors, and secret-like reads."""

from __future__ import annotations

import threading
import time

import pytest

from helpers import Recorder

from peon.approvers import Unattended

# The shipped per-risk table (the test fixture would otherwise allow everything).
DEFAULT_APPROVAL = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}




@pytest.fixture
def approving(open_session, tmp_path):
    """open a session with the default approval table, an isolated user config and an approver."""

    def factory(approver=None, approval=None, **config):
        table = {"approval": {**DEFAULT_APPROVAL, **(approval or {})}, **config}
        return open_session(table, env={"XDG_CONFIG_HOME": str(tmp_path / "no-user-config")}, approver=approver)

    return factory


def test_the_approver_sees_the_whole_request(approving, workspace):
    approver = Recorder("allow_once")
    session = approving(approver)
    r = session.call("bash", {"timeout_seconds": 5, "command": "echo hi"})
    assert r.ok and r.value["output"] == "hi\n"
    (request,) = approver.requests
    assert request["op"] == "approval_request" and len(request["request_id"]) >= 16
    assert request["call_id"] == r.call_id
    # The OS sandbox is on by default where the kernel allows it: the request says so, and how.
    sandboxed = bool(session.info["sandbox"].get("active"))
    reason = "declared risk of bash" + (", inside the OS sandbox" if sandboxed else "")
    assert (request["tool"], request["risk"], request["risk_reason"]) == ("bash", "process", reason)
    assert request["summary"] == "run in /bin/bash -lc: echo hi"
    details = dict(request["details"])
    assert details.pop("sandbox", {}).get("active", False) is sandboxed
    assert details == {"argv": ["/bin/bash", "-lc", "echo hi"], "cwd": str(workspace.resolve()),
                       "timeout_seconds": 5, "segments": [{"words": ["echo", "hi"]}]}
    assert request["sandboxed"] is sandboxed
    assert request["canonical_input"] == '{"command":"echo hi","timeout_seconds":5}'
    assert request["scopes"] == ["call", "tool", "risk"]
    assert request["timeout_seconds"] == 120.0  # limits.approval_timeout_seconds, so a prompt can give up too


def test_allow_once_allows_only_this_call(approving):
    approver = Recorder("allow_once", {"decision": "allow_once"}, "deny")
    session = approving(approver)
    assert session.call("bash", {"command": "true"}).ok
    assert session.call("bash", {"command": "true"}).ok
    r = session.call("bash", {"command": "true"})
    assert len(approver.requests) == 3
    assert r.error.code == "denied" and r.error.details["by"] == "approver"


def test_ask_without_an_approver_denies_at_once(approving):
    session = approving(None)
    started = time.monotonic()
    r = session.call("bash", {"command": "touch should-not-exist"})
    assert time.monotonic() - started < 10
    assert not r.ok and r.error.code == "denied"
    assert r.error.details == {"risk": "process", "by": "no-approver",
                               "rule": 'approval.process = "ask" in overrides, and this session has no approver'}
    assert "process risk" in r.error.message and 'approval.process = "ask"' in r.error.message


def test_deny_answer_carries_the_reason(approving, workspace):
    session = approving(Recorder({"decision": "deny", "reason": "not on a Friday"}))
    r = session.call("bash", {"command": "touch made"})
    assert r.error.code == "denied" and "not on a Friday" in r.error.message
    assert not (workspace / "made").exists()


@pytest.mark.parametrize("behaviour", ["raises", "returns None", "returns 42", "unknown decision", "unknown scope",
                                       "not JSON"])
def test_a_failing_approver_denies_and_the_session_goes_on(approving, behaviour):
    def broken(request):
        if behaviour == "raises":
            raise RuntimeError("approver crashed")
        return {"returns None": None, "returns 42": 42, "unknown decision": "sure",
                "unknown scope": {"decision": "allow_session", "scope": "forever"},
                "not JSON": {"decision": "allow_once", "reason": object()}}[behaviour]

    session = approving(Recorder(broken, "allow_once"))
    r = session.call("bash", {"command": "echo x"})
    assert r.error.code == "denied" and r.error.details["by"] == "approver-error", r.error
    assert session.call("bash", {"command": "echo x"}).ok


def test_an_approver_that_never_answers_is_denied_after_the_timeout(approving, tmp_path):
    release = threading.Event()
    asking: list[threading.Thread] = []

    def stuck(request):
        asking.append(threading.current_thread())  # the session's thread for this request, which sends the answer
        release.wait(30)
        return {"decision": "allow_session", "scope": "risk"}  # arrives far too late

    approver = Recorder(stuck, "allow_once", "deny")
    session = approving(approver, limits={"approval_timeout_seconds": 0.5})
    started = time.monotonic()
    r = session.call("bash", {"command": "echo late"})
    waited = time.monotonic() - started
    try:
        assert r.error.code == "denied" and r.error.details["by"] == "timeout"
        assert "limits.approval_timeout_seconds = 0.5" in r.error.message
        assert 0.4 < waited < 10
        assert session.call("bash", {"command": "echo next"}).ok  # the next call is asked and works
    finally:
        release.set()
    asking[0].join(10)  # it has sent the stale allow_session answer: the supervisor reads it before the next call...
    assert not asking[0].is_alive()
    r = session.call("bash", {"command": "echo again"})
    assert r.error.details["by"] == "approver"  # ...and granted nothing: this one was asked and denied
    assert len(approver.requests) == 3
    assert not (tmp_path / "state-0" / "grants.json").exists()


def test_cancelling_a_call_ends_its_wait_for_approval(approving):
    release = threading.Event()
    asked = threading.Event()

    def stuck(request):
        asked.set()
        release.wait(30)
        return "allow_once"

    session = approving(Recorder(stuck, "allow_once"), limits={"approval_timeout_seconds": 60.0})
    try:
        handle = session.submit("bash", {"command": "echo never"})
        assert asked.wait(10)
        started = time.monotonic()
        handle.cancel()
        r = handle.result(timeout=10)
        assert time.monotonic() - started < 5
        assert r.error.code == "cancelled"
        assert session.call("bash", {"command": "echo next"}).ok
    finally:
        release.set()


def test_deny_policy_never_asks(approving):
    approver = Recorder()
    session = approving(approver, approval={"process": "deny"})
    r = session.call("bash", {"command": "true"})
    assert r.error.details == {"risk": "process", "by": "policy", "rule": 'approval.process = "deny" in overrides'}
    assert approver.requests == []


def test_allow_policy_never_asks(approving):
    approver = Recorder()
    assert approving(approver, approval={"process": "allow"}).call("bash", {"command": "true"}).ok
    assert approver.requests == []


def test_command_prefix_rule_allows_only_the_simple_command(approving, workspace):
    (workspace / "keep").write_text("x")
    approver = Recorder("deny", "deny")
    rules = [{"tool": "bash", "command_prefix": "ls -a", "decision": "allow"}]
    session = approving(approver, approval={"rules": rules})
    assert session.call("bash", {"command": "ls -a ."}).ok
    assert approver.requests == []
    for smuggled in ("ls -a; rm keep", "ls -a $(rm keep)"):
        r = session.call("bash", {"command": smuggled})
        assert r.error.code == "denied"
    assert [q["canonical_input"] for q in approver.requests] == ['{"command":"ls -a; rm keep"}',
                                                                 '{"command":"ls -a $(rm keep)"}']
    assert (workspace / "keep").exists()


def test_a_project_floor_holds_against_allow_everything_overrides(open_session, workspace, tmp_path):
    (workspace / ".peon").mkdir()
    (workspace / ".peon" / "config.toml").write_text(
        '[[approval.rules]]\ntool = "bash"\ncommand_prefix = "rm"\ndecision = "deny"\n')
    (workspace / "keep").write_text("x")
    session = open_session(env={"XDG_CONFIG_HOME": str(tmp_path / "none")})  # fixture overrides allow everything
    assert session.call("bash", {"command": "echo fine"}).ok
    r = session.call("bash", {"command": "rm keep"})
    assert r.error.code == "denied" and r.error.details["by"] == "policy"
    assert r.error.details["rule"].startswith(f"approval.rules[0] in {workspace / '.peon' / 'config.toml'}")
    assert (workspace / "keep").exists()


def test_unattended_approver(approving):
    session = approving(Unattended(allow={"process"}))
    assert session.call("bash", {"command": "true"}).ok
    denied = approving(Unattended(tools={"read"})).call("bash", {"command": "true"})
    assert denied.error.details["by"] == "approver"
    assert "unattended run" in denied.error.message and "this call has process risk" in denied.error.message
    with pytest.raises(ValueError, match="unknown risk 'proces'"):
        Unattended(allow={"proces"})


def test_secret_like_read_asks_while_a_normal_read_does_not(approving, workspace):
    (workspace / "notes.txt").write_text("plain\n")
    (workspace / ".env").write_text("TOKEN=abc\n")
    approver = Recorder("deny", "allow_once")
    session = approving(approver)
    r = session.call("read", {"path": "notes.txt"})
    assert r.ok, r.error
    assert approver.requests == []
    r = session.call("read", {"path": ".env"})
    assert r.error.code == "denied" and r.error.details["risk"] == "filesystem"
    (request,) = approver.requests
    assert request["tool"] == "read" and request["risk"] == "filesystem"
    assert ".env" in request["risk_reason"]
    assert session.call("read", {"path": ".env"}).ok  # allowed once the second time
