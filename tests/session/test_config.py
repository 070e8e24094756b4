"""Configuration layers through a session: the supervisor resolves them from the session's environment and
workspace, refuses a loosening project and names a bad file; the default timeout. Loading alone is
tests/unit/test_config_layers.py."""

from __future__ import annotations

import time

import pytest

from peon.core.errors import ConfigError

DEEP = 5000


def test_a_session_reports_deep_nesting_as_config_invalid(open_session, workspace, tmp_path):
    (workspace / ".peon").mkdir()
    (workspace / ".peon" / "config.toml").write_text("[limits]\nx = " + "[" * DEEP + "]" * DEEP + "\n")
    with pytest.raises(ConfigError, match=r"invalid configuration in .*\.peon/config\.toml: tables and arrays nest"):
        open_session(env={"XDG_CONFIG_HOME": str(tmp_path / "none")})


# -- through a session -----------------------------------------------------------------------------


def test_the_supervisor_resolves_layers_from_the_sessions_env_and_workspace(open_session, workspace, tmp_path):
    xdg = tmp_path / "xdg"
    (xdg / "peon").mkdir(parents=True)
    (xdg / "peon" / "config.toml").write_text("[limits]\nmax_output_bytes = 8192\nread_max_bytes = 5000\n")
    (workspace / ".peon").mkdir()
    (workspace / ".peon" / "config.toml").write_text("[limits]\nread_max_bytes = 4000\n")
    session = open_session({"limits": {"max_timeout_seconds": 30.0}}, env={"XDG_CONFIG_HOME": str(xdg)})
    limits = session.info["config"]["limits"]
    assert (limits["max_output_bytes"], limits["read_max_bytes"], limits["max_timeout_seconds"]) == (8192, 4000, 30.0)
    kinds = [(layer["kind"], layer["source"]) for layer in session.info["config_layers"]]
    assert kinds == [("defaults", "defaults"), ("user", str(xdg / "peon" / "config.toml")),
                     ("project", str(workspace / ".peon" / "config.toml")), ("overrides", "overrides")]
    r = session.call("bash", {"command": "head -c 20000 /dev/zero | tr '\\0' x"})
    assert r.ok and r.value["truncated"] and r.value["output_kept_bytes"] <= 8192


def test_a_session_refuses_a_loosening_project(open_session, workspace, tmp_path):
    (workspace / ".peon").mkdir()
    (workspace / ".peon" / "config.toml").write_text('[agents.claude]\nexecutable = "/tmp/evil"\n')
    with pytest.raises(ConfigError, match=r"project configuration .*agents.claude.executable"):
        open_session(env={"XDG_CONFIG_HOME": str(tmp_path / "none")})


def test_a_session_names_a_bad_user_file(open_session, tmp_path):
    named = tmp_path / "user.toml"
    named.write_text("[limits]\nmax_output_bytes = 'big'\n")
    with pytest.raises(ConfigError,
                       match=rf"invalid configuration in {named}: key 'limits.max_output_bytes' must be an integer"):
        open_session(env={"PEON_CONFIG": str(named)})


# -- the default timeout ---------------------------------------------------------------------------


def test_the_default_timeout_applies_when_a_call_gives_none(open_session):
    requests = []
    session = open_session({"approval": {"process": "ask"}, "limits": {"default_timeout_seconds": 0.5}},
                           approver=lambda request: requests.append(request) or "allow_once")
    started = time.monotonic()
    r = session.call("bash", {"command": "sleep 30"})
    assert r.ok and r.value["timed_out"] is True and r.value["timeout_seconds"] == 0.5
    assert time.monotonic() - started < 10
    assert requests[-1]["details"]["timeout_seconds"] == 0.5  # the approver is told the timeout that applies
    r = session.call("bash", {"command": "sleep 1; echo slept", "timeout_seconds": 20})  # longer than the default
    assert r.ok and r.value["timed_out"] is False and r.value["output"] == "slept\n"
    assert r.value["timeout_seconds"] == 20 and requests[-1]["details"]["timeout_seconds"] == 20
    schema = {t["name"]: t for t in session.tools()}["bash"]["input_schema"]["properties"]["timeout_seconds"]
    assert "0.5 when omitted, at most 600" in schema["description"]


def test_a_default_above_the_maximum_is_clamped(open_session):
    session = open_session({"limits": {"max_timeout_seconds": 0.4}})
    r = session.call("bash", {"command": "sleep 30"})
    assert r.ok and r.value["timed_out"] is True and r.value["timeout_seconds"] == 0.4
    assert session.call("agent_claude", {"prompt": "x", "timeout_seconds": 5}).error.code == "adapter_unavailable"
