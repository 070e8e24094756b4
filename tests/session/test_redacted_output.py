"""Secrets never reach the client through a session: the session environment's secret-like variables, the
workspace's .env values and well-known credential formats are redacted in results, progress, job output,
the output store, approval requests and the audit log, while commands run with the real values (fake
credentials in the real formats only). The detector's own rules are tests/unit/test_redaction.py."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import pytest

from helpers import Recorder

TOKEN = "ghp_" + "Zx9Yw8Vu7T" * 3 + "s6R5q4"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
BEARER = "f00dcafe1234deadbeef5678abcd"
KEY_BODY = "MIIEowIBAAKCAQEAx7Vq3Nb5tPqRsT2uVwXyZ0a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"
DEFAULT_APPROVAL = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}


@pytest.fixture
def env(tmp_path):
    return {"XDG_CONFIG_HOME": str(tmp_path / "no-user-config"), "GITHUB_TOKEN": TOKEN}


def audit_text(state_dir) -> str:
    return "".join((state_dir / name).read_text() for name in os.listdir(state_dir) if name.startswith("audit"))


def whole_output(session, job_id: str) -> str:
    """Everything the output store holds of a job."""
    page = session.call("job_output", {"job_id": job_id, "offset": 0, "limit": 1 << 20}).value
    return str(page["output"])


def test_the_environment_token_never_reaches_the_client(open_session, env, tmp_path):
    state = tmp_path / "state"
    session = open_session({}, env=env, state_dir=state)
    for command in ("echo $GITHUB_TOKEN", "env", "printenv", "printenv GITHUB_TOKEN"):
        r = session.call("bash", {"command": command})
        assert r.ok and TOKEN not in json.dumps(r.value), command
        assert "«redacted:env:GITHUB_TOKEN:" in r.value["output"]
        assert r.value["redacted"]["kinds"]["env:GITHUB_TOKEN"] >= 1 and r.value["redacted"]["count"] >= 1
        assert TOKEN not in whole_output(session, r.value["job_id"])
    # The same value, the same marker: the agent can tell it is the one variable.
    first = session.call("bash", {"command": "echo $GITHUB_TOKEN"}).value["output"]
    assert session.call("bash", {"command": "echo $GITHUB_TOKEN"}).value["output"] == first
    # The command ran with the real value.
    digest = session.call("bash", {"command": "printf %s \"$GITHUB_TOKEN\" | sha256sum"}).value["output"]
    assert digest.startswith(hashlib.sha256(TOKEN.encode()).hexdigest())
    assert TOKEN not in audit_text(state)


def test_session_info_says_whether_redaction_is_on_and_what_scans(open_session, env):
    assert open_session({}, env=env).info["redaction"] == {"enabled": True, "allow": [], "engine": "hyperscan"}
    off = open_session({"redaction": {"enabled": False}}, env=env).info["redaction"]
    assert off["enabled"] is False


def test_a_token_printed_in_two_halves_is_caught_in_results_and_progress(open_session, env):
    session = open_session({}, env=env)
    events: list[dict] = []
    half = len(TOKEN) // 2
    command = f"printf %s {TOKEN[:half]}; sleep 0.3; printf '%s\\n' {TOKEN[half:]}; sleep 0.3"
    r = session.call("bash", {"command": command}, on_progress=events.append)
    assert r.ok and r.value["output"].startswith("«redacted:env:GITHUB_TOKEN:")
    assert events, "no progress was reported"
    shown = json.dumps(events)
    assert TOKEN[:half] not in shown and TOKEN[half:] not in shown and TOKEN[:8] not in shown
    assert TOKEN not in whole_output(session, r.value["job_id"])


def test_a_background_job_printing_the_token(open_session, env, tmp_path):
    state = tmp_path / "state"
    session = open_session({}, env=env, state_dir=state)
    half = len(TOKEN) // 2
    started = session.call("bash", {"command": f"printf %s {TOKEN[:half]}; sleep 0.3; echo {TOKEN[half:]}; "
                                               "echo $GITHUB_TOKEN; sleep 0.2", "background": True})
    assert started.ok
    job_id = started.value["job_id"]
    deadline = time.monotonic() + 20
    while session.call("job_list", {}).value["jobs"][-1]["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    page = session.call("job_output", {"job_id": job_id, "wait_seconds": 1}).value
    assert TOKEN not in json.dumps(page) and TOKEN[:half] not in page["output"]
    assert page["output"].count("«redacted:env:GITHUB_TOKEN:") == 2
    assert TOKEN not in audit_text(state)


def test_credentials_in_files_and_formats_are_redacted(open_session, env, workspace):
    (workspace / ".env").write_text(f"AWS_ACCESS_KEY_ID={AWS_ID}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\n")
    (workspace / "key.pem").write_text(f"-----BEGIN RSA PRIVATE KEY-----\n{KEY_BODY}\n{KEY_BODY}\n"
                                       "-----END RSA PRIVATE KEY-----\n")
    (workspace / "notes.txt").write_text(f"db: postgres://app:n0t-a-real-Pa55@db.internal:5432/app\njwt: {JWT}\n")
    session = open_session({}, env=env)
    r = session.call("bash", {"command": "cat .env key.pem notes.txt; echo $AWS_SECRET_ACCESS_KEY"})
    out = r.value["output"]
    for secret in (AWS_ID, AWS_SECRET, KEY_BODY, "n0t-a-real-Pa55", JWT):
        assert secret not in out, secret
    assert "postgres://app:«redacted:url_password:" in out and "@db.internal:5432/app" in out
    assert "«redacted:private_key:" in out and "«redacted:jwt:" in out
    kinds = r.value["redacted"]["kinds"]
    assert {"private_key", "url_password", "jwt"} <= set(kinds)
    assert any(kind.startswith(("file:AWS_", "aws_")) for kind in kinds)
    # grep's results too (the file is not secret-like: no approval is asked for reading it)
    found = session.call("grep", {"pattern": "postgres"})
    assert found.ok and "n0t-a-real-Pa55" not in json.dumps(found.value)


def test_a_literal_bearer_token_is_redacted_where_shown_and_used_as_given(open_session, env, tmp_path):
    state = tmp_path / "state"
    approver = Recorder("allow_once")
    session = open_session({"approval": DEFAULT_APPROVAL}, env=env, state_dir=state, approver=approver)
    command = f"h='Authorization: Bearer {BEARER}'; printf %s \"$h\" | sha256sum"
    r = session.call("bash", {"command": command})
    assert r.ok and r.value["output"].startswith(hashlib.sha256(f"Authorization: Bearer {BEARER}".encode()).hexdigest())
    (request,) = approver.requests
    assert BEARER not in json.dumps(request) and "Bearer «redacted:bearer_token:" in request["summary"]
    log = audit_text(state)
    assert BEARER not in log and "«redacted:bearer_token:" in log


def test_a_secret_file_read_as_approved_is_returned_and_audited_redacted(open_session, env, workspace, tmp_path):
    state = tmp_path / "state"
    (workspace / ".env").write_text(f"API_TOKEN={TOKEN}x\n")
    approver = Recorder("allow_once")
    session = open_session({"approval": DEFAULT_APPROVAL}, env=env, state_dir=state, approver=approver)
    r = session.call("read", {"path": ".env"})
    assert r.ok and r.value["content"] == f"API_TOKEN={TOKEN}x\n"  # the approval said so
    assert len(approver.requests) == 1 and "secret-like path" in approver.requests[0]["risk_reason"]
    assert TOKEN not in audit_text(state)
    # the same bytes through bash were not approved as such
    assert TOKEN not in session.call("bash", {"command": "cat .env"}).value["output"]


def test_redaction_can_be_turned_off(open_session, env):
    session = open_session({"redaction": {"enabled": False}}, env=env)
    r = session.call("bash", {"command": "echo $GITHUB_TOKEN"})
    assert r.value["output"] == TOKEN + "\n" and "redacted" not in r.value


def test_an_allow_pattern_keeps_a_value(open_session, env):
    session = open_session({"redaction": {"allow": {"env:GITHUB_TOKEN": [".*"]}}}, env=env)
    r = session.call("bash", {"command": f"echo $GITHUB_TOKEN {JWT}"})
    assert r.value["output"].startswith(TOKEN) and JWT not in r.value["output"]


GUARD = """\
import json, sys
data = json.load(sys.stdin)
command = data["tool_input"].get("command", "")
open(sys.argv[1], "w").write(command)
if "ghp_" in command:
    print("Blocked: a GitHub token on the command line: " + command, file=sys.stderr)
    sys.exit(2)
"""


def test_a_before_call_hook_judges_the_real_input_and_its_reason_is_redacted(open_session, env, tmp_path):
    """A hook is the user's program deciding on what will run: it is sent the command as it is (a guard
    looking for tokens on a command line must see them); what it answers reaches the agent redacted."""
    guard, seen = tmp_path / "guard.py", tmp_path / "seen.txt"
    guard.write_text(GUARD)
    config = tmp_path / "no-user-config" / "peon" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[[hooks]]\nevent = "before_call"\nmatcher = "Bash"\n'
                      f"command = {json.dumps([sys.executable, str(guard), str(seen)])}\n")
    session = open_session({}, env=env)
    r = session.call("bash", {"command": f"echo {TOKEN}"})
    assert seen.read_text() == f"echo {TOKEN}"
    assert r.error is not None and r.error.code == "denied" and r.error.details["by"] == "hook"
    assert TOKEN not in r.error.message and TOKEN not in json.dumps(r.error.details)
    assert "Blocked: a GitHub token on the command line: echo «redacted:env:GITHUB_TOKEN:" in r.error.message
