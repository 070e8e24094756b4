"""Tool registration through sessions: a third-party tool by import path and by entry point runs in a worker,
is warmed up in the forkserver, and reaches the approver; a registration failure stops the session. The
registry's rules are tests/unit/test_registry_rules.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from peon import RegistrationError

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_third_party_tool_by_import_path_runs_in_a_worker(open_session):
    session = open_session(env={"PYTHONPATH": str(FIXTURES)}, tools=["peon_test_tools:EchoTool"])
    r = session.call("echo", {"text": "hi"})
    assert r.ok and r.value["text"] == "hi"
    assert r.value["pid"] not in (session.supervisor_pid,)
    assert r.value["call_id"] == r.call_id


def test_a_tool_is_warmed_up_in_the_forkserver_and_again_in_its_standby(open_session):
    session = open_session(env={"PYTHONPATH": str(FIXTURES)}, tools=["peon_test_tools:WarmingTool"])
    r = session.call("warming", {})
    assert r.ok, r.error  # its warm-up raised: the call runs all the same
    worker, warmed = r.value["pid"], r.value["warmed"]
    assert {"pid": worker, "processes": False} in warmed, warmed  # its standby: no process started
    assert any(w["pid"] != worker and w["processes"] for w in warmed), warmed  # the forkserver, before it forked
    assert session.call("warming", {}).value["pid"] != worker  # a dedicated worker per call, warmed as well


def test_third_party_tool_by_entry_point(open_session, tmp_path):
    site = tmp_path / "site"
    dist = site / "peon_example-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: peon-example\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[peon.tools]\necho = peon_test_tools:EchoTool\n")
    session = open_session(env={"PYTHONPATH": f"{FIXTURES}:{site}"})
    assert "echo" in [t["name"] for t in session.tools()]
    assert session.call("echo", {"text": "ep"}).value["text"] == "ep"


def test_registration_failure_stops_the_session_with_a_clear_error(workspace, tmp_path, leftovers):
    import peon
    with pytest.raises(RegistrationError, match="already registered"):
        peon.Session(workspace, {"approval": {"process": "allow"}}, env=leftovers.env({"PYTHONPATH": str(FIXTURES)}),
                     tools=["peon_test_tools:DuplicateBash"], state_dir=tmp_path / "s")


def test_validation_errors_are_stable(session):
    r = session.call("bash", {"command": "x" * 10, "timeout_seconds": "soon"})
    assert r.error.code == "invalid_input"
    assert r.error.details == {"rule": "type", "pointer": "/timeout_seconds", "value": '"soon"'}


@pytest.mark.parametrize("tool, import_path, summary, reason, details", [
    ("hooked", "contract_tools:HookedTool", "hooked call for n1", "the hooks rate n1 as filesystem",
     {"name": "n1", "workspace": None}),
    ("preparing", "contract_tools:PreparingTool", "prepared call for n1", "prepare rates n1 as filesystem",
     {"name": "n1"}),
])
def test_each_form_of_the_contract_reaches_the_approver_and_the_worker(open_session, workspace, tool, import_path,
                                                                        summary, reason, details):
    """A tool written against the four hooks (``hooked``) is prepared from them, and one that overrides
    ``prepare`` alone (``preparing``) needs no ``approval_summary``: for both, the risk, its reason, the
    summary and the details reach the approver, the details reach the worker as approved, and the call
    runs with its own timeout."""
    from helpers import Recorder

    if "workspace" in details:
        details = {**details, "workspace": str(workspace)}
    approver = Recorder("allow_once")
    session = open_session({"approval": {"filesystem": "ask"}}, env={"PYTHONPATH": str(FIXTURES)},
                           tools=[import_path], approver=approver)
    r = session.call(tool, {"name": "n1", "seconds": 40})
    assert r.ok, r.error
    (request,) = approver.requests
    assert (request["risk"], request["risk_reason"], request["summary"]) == ("filesystem", reason, summary)
    assert request["details"] == details and r.value["approved"] == details
    assert 30 < r.value["remaining"] <= 40  # the call's own timeout, not limits.max_timeout_seconds
