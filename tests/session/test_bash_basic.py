"""bash: results, exit statuses, timeouts, validation."""

from __future__ import annotations


def test_exit_status_and_combined_output(session):
    r = session.call("bash", {"command": "echo out; echo err >&2; exit 3"})
    assert r.ok, r.error
    assert r.value["exit_code"] == 3
    assert r.value["signal"] is None
    assert r.value["output"] == "out\nerr\n"
    assert r.value["output_bytes"] == 8
    assert not r.value["truncated"] and not r.value["timed_out"] and not r.value["cancelled"]


def test_runs_in_workspace_with_stdin_devnull(session, workspace):
    r = session.call("bash", {"command": "pwd; cat; echo end"})
    assert r.value["output"] == f"{workspace.resolve()}\nend\n"


def test_timeout_is_a_result(session):
    r = session.call("bash", {"command": "sleep 30", "timeout_seconds": 0.3})
    assert r.ok
    assert r.value["timed_out"] is True
    assert r.value["exit_code"] is None and r.value["signal"] == "SIGKILL"
    assert r.value["duration_ms"] < 5000


def test_timeout_larger_than_maximum_is_clamped(open_session):
    session = open_session({"limits": {"max_timeout_seconds": 0.5}})
    r = session.call("bash", {"command": "sleep 30", "timeout_seconds": 1000})
    assert r.value["timed_out"] is True
    assert r.value["timeout_seconds"] == 0.5


def test_invalid_inputs_name_the_rule(session):
    cases = [
        ({"command": 1}, "type", "/command"),
        ({}, "required", ""),
        ({"command": "true", "extra": 1}, "additionalProperties", ""),
        ({"command": "true", "timeout_seconds": 0}, "exclusiveMinimum", "/timeout_seconds"),
        ({"command": "a\u0000b"}, "pattern", "/command"),
    ]
    for args, rule, pointer in cases:
        r = session.call("bash", args)
        assert not r.ok
        assert r.error.code == "invalid_input"
        assert r.error.details["rule"] == rule, (args, r.error)
        assert r.error.details["pointer"] == pointer
    r = session.call("bash", ["echo"])
    assert r.error.code == "invalid_input" and "JSON object" in r.error.message


def test_unknown_tool(session):
    r = session.call("nope", {})
    assert r.error.code == "unknown_tool"
