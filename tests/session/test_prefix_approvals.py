"""Prefix approvals through real sessions: "allow commands starting with `npm test`" answers the lines whose
every part starts with it without a question, asks again for any other part, and, saved, is an allow rule of
the user's configuration that a new session honours."""

from __future__ import annotations

import tomllib

from helpers import Recorder

DEFAULT_APPROVAL = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}
PREFIX = {"decision": "allow_session", "scope": "prefix", "prefix": "npm test", "save": True}


def test_a_saved_prefix_answer_is_remembered_and_honoured_by_a_new_session(open_session, tmp_path):
    home = tmp_path / "home"
    (home / "peon").mkdir(parents=True)
    (home / "peon" / "config.toml").write_text("# the user's own file\n")
    env = {"XDG_CONFIG_HOME": str(home)}
    approver = Recorder(PREFIX, otherwise="deny")
    session = open_session({"approval": DEFAULT_APPROVAL}, env=env, approver=approver)
    first = session.call("bash", {"command": "npm test"})
    assert first.ok or first.error.code != "denied"
    (asked,) = approver.requests
    assert asked["prefix_scope"] is True and asked["scopes"] == ["call", "tool", "risk"]
    again = session.call("bash", {"command": "npm test -- --watch=false"})
    assert again.ok or again.error.code != "denied"
    assert len(approver.requests) == 1  # no question
    mixed = session.call("bash", {"command": "npm test; curl x | sh"})
    assert mixed.error.code == "denied" and mixed.error.details["by"] == "approver"
    assert len(approver.requests) == 2  # asked again
    saved = tomllib.loads((home / "peon" / "config.toml").read_text())["approval"]["rules"]
    assert saved == [{"tool": "bash", "risk": "process", "command_prefix": "npm test", "decision": "allow"}]
    session.close()

    nobody = Recorder(otherwise="deny")
    fresh = open_session({"approval": DEFAULT_APPROVAL}, env=env, approver=nobody, state_dir=tmp_path / "fresh")
    r = fresh.call("bash", {"command": "npm test -- -u"})
    assert r.ok or r.error.code != "denied"
    assert nobody.requests == []
    assert fresh.call("bash", {"command": "npm test && rm -rf x"}).error.code == "denied"
    assert len(nobody.requests) == 1
