"""Approval that understands shell, through real sessions and real bash: every bypass of a command
rule is denied or asked and has no effect; compound commands of allowed parts run without asking;
git's repository-configured programs never run unasked; grants never widen; sandboxed calls."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import helpers

DEFAULT_APPROVAL = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}
FIXTURES = Path(__file__).parent.parent / "fixtures"


class Recorder(helpers.Recorder):
    """Records requests and answers from a script, then denies."""

    def __init__(self, *answers: object) -> None:
        super().__init__(*answers, otherwise="deny")

    def commands(self) -> list[str]:
        return [json.loads(r["canonical_input"])["command"] for r in self.requests]


@pytest.fixture
def approving(open_session, tmp_path):
    def factory(rules=(), approver=None, env=None, **approval):
        table = {"approval": {**DEFAULT_APPROVAL, **approval, "rules": list(rules)}}
        return open_session(table, env={"XDG_CONFIG_HOME": str(tmp_path / "no-user-config"), **(env or {})},
                            approver=approver)

    return factory


def bash(prefix: str, decision: str) -> dict:
    return {"tool": "bash", "command_prefix": prefix, "decision": decision}


# -- deny rules hold -----------------------------------------------------------------------------------

BYPASSES = {  # command -> the file it would create
    "touch b; true": "b", "true && touch c": "c", "/usr/bin/touch d": "d", "command touch e": "e",
    "FOO=1 touch f": "f", "false || touch g": "g", "echo x | xargs touch": "x", "(touch h)": "h",
    "env nice timeout 5 touch i": "i", "bash -c 'touch j'": "j", "echo $(touch k)": "k",
    "find . -maxdepth 0 -exec touch l \\;": "l", "eval touch m": "m", "T=touch; $T n": "n",
    "t$'ouc'h o": "o", "touch >/dev/null p": "p",
}


def test_a_deny_rule_stops_every_way_of_writing_the_command(approving, workspace):
    session = approving([bash("touch", "deny")], process="allow")
    assert session.call("bash", {"command": "echo fine > fine.txt"}).ok  # the policy allows other commands
    for command, made in BYPASSES.items():
        r = session.call("bash", {"command": command})
        assert not r.ok and r.error.code == "denied", (command, r)
        assert r.error.details["by"] == "policy" and "touch" in r.error.details["rule"], r.error
        assert not (workspace / made).exists(), command
    assert sorted(os.listdir(workspace)) == ["fine.txt"]


def test_an_ask_rule_asks_for_every_way_of_writing_the_command(approving, workspace):
    approver = Recorder()
    session = approving([bash("touch", "ask")], approver=approver, process="allow")
    for command in BYPASSES:
        r = session.call("bash", {"command": command})
        assert r.error.code == "denied" and r.error.details["by"] == "approver", (command, r)
    assert approver.commands() == list(BYPASSES)
    assert os.listdir(workspace) == []


# -- allow rules: every part, nothing more --------------------------------------------------------------


@pytest.fixture
def tools_bin(tmp_path, leftovers):
    """A directory on the session's PATH (bash -l reads the session HOME's .profile) with a stand-in
    `pytest` that prints many lines."""
    directory = tmp_path / "bin"
    directory.mkdir()
    fake = directory / "pytest"
    fake.write_text("#!/bin/sh\nfor i in $(seq 1 40); do echo \"line $i\"; done\necho 'error line' >&2\n")
    fake.chmod(0o755)
    if shutil.which("make") is None:  # a stand-in for machines without make
        (directory / "make").write_text("#!/bin/sh\necho built > built.txt\n")
        (directory / "make").chmod(0o755)
    (leftovers.home / ".profile").write_text(f'PATH="{directory}:$PATH"\n')
    return directory


def test_compound_commands_of_allowed_parts_run_without_asking(approving, workspace, tools_bin):
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "src").mkdir()
    (workspace / "src" / "Makefile").write_text("all:\n\techo built > built.txt\n")
    approver = Recorder()
    rules = [bash(p, "allow") for p in ("cd", "make", "pytest", "tail", "git status", "git diff")]
    session = approving(rules, approver=approver)
    r = session.call("bash", {"command": "cd src && make"})
    assert r.ok and r.value["exit_code"] == 0, r
    assert (workspace / "src" / "built.txt").read_text() == "built\n"
    r = session.call("bash", {"command": "pytest 2>&1 | tail -20"})
    assert r.ok and r.value["output"].splitlines()[-1] == "error line" and len(r.value["output"].splitlines()) == 20
    r = session.call("bash", {"command": "git status && git diff"})
    assert r.ok and r.value["exit_code"] == 0, r
    assert approver.requests == []
    # ... and one part more is asked about (and denied by this approver), with nothing done.
    r = session.call("bash", {"command": "cd src && make && touch extra"})
    assert r.error.details["by"] == "approver"
    assert "no allow rule covers `touch extra`" in r.error.details["rule"]
    assert approver.commands() == ["cd src && make && touch extra"]
    assert not (workspace / "src" / "extra").exists()


def test_an_allowed_command_that_writes_outside_the_workspace_is_asked(approving, workspace, tmp_path):
    outside = tmp_path / "outside.txt"
    (workspace / "link").symlink_to(tmp_path)  # a symlink the repository ships
    approver = Recorder()
    session = approving([bash("echo", "allow"), bash("cd", "allow")], approver=approver)
    assert session.call("bash", {"command": "echo in > inside.txt"}).ok
    for command in (f"echo out > {outside}", "echo out > link/outside.txt", f"cd {tmp_path} && echo out > outside.txt",
                    "echo out > ../outside.txt"):
        r = session.call("bash", {"command": command})
        assert r.error.details["by"] == "approver", (command, r)
    assert len(approver.requests) == 4 and not outside.exists()
    assert (workspace / "inside.txt").read_text() == "in\n"


def test_git_diff_output_is_asked_and_writes_nothing(approving, workspace, tmp_path):
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "f.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(workspace), "add", "f.txt"], check=True)
    (workspace / "f.txt").write_text("b\n")
    target = tmp_path / "any" / "path"
    target.parent.mkdir()
    approver = Recorder()
    session = approving([bash("git diff", "allow")], approver=approver)
    assert session.call("bash", {"command": "git diff"}).value["output"].endswith("+b\n")  # allowed: runs
    r = session.call("bash", {"command": f"git diff --output={target}"})
    assert r.error.details["by"] == "approver"
    assert "--output" in r.error.details["rule"]
    assert not target.exists()


def write_fsmonitor(workspace: Path, marker: Path) -> None:
    hook = workspace / "monitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    subprocess.run(["git", "-C", str(workspace), "config", "core.fsmonitor", str(hook)], check=True)


def test_git_status_with_a_repository_fsmonitor_is_asked_and_the_program_never_runs(approving, workspace, tmp_path):
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    approver = Recorder("allow_once")
    session = approving([bash("git status", "allow")], approver=approver)
    assert session.call("bash", {"command": "git status"}).ok and approver.requests == []  # clean repo: allowed
    marker = tmp_path / "fsmonitor-ran"
    write_fsmonitor(workspace, marker)  # what an agent's `write` to .git/config can do
    # Proof that git status runs it: allowed once by the approver, the marker appears...
    assert session.call("bash", {"command": "git status"}).ok
    assert marker.exists() and len(approver.requests) == 1
    marker.unlink()
    # ...and unattended (the approver denies) it never runs.
    r = session.call("bash", {"command": "git status"})
    assert r.error.code == "denied" and "core.fsmonitor" in r.error.details["rule"], r.error
    assert not marker.exists()


def test_an_included_config_and_a_nested_repository_are_checked_too(approving, workspace, tmp_path):
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    nested = workspace / "vendor" / "lib"
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    marker = tmp_path / "ran"
    write_fsmonitor(nested, marker)
    (workspace / "extra.cfg").write_text(f"[core]\n\tpager = touch {marker}\n")
    session = approving([bash("git status", "allow"), bash("cd", "allow")])
    r = session.call("bash", {"command": "cd vendor/lib && git status"})
    assert r.error.code == "denied" and "core.fsmonitor" in r.error.details["rule"], r.error
    subprocess.run(["git", "-C", str(workspace), "config", "include.path", "../extra.cfg"], check=True)
    r = session.call("bash", {"command": "git status"})
    assert r.error.code == "denied" and "core.pager" in r.error.details["rule"], r.error
    assert not marker.exists()


# -- grants and what the approver sees ------------------------------------------------------------------


def test_a_session_grant_for_one_command_never_covers_another_part(approving, workspace):
    approver = Recorder({"decision": "allow_session", "scope": "call"})
    session = approving(approver=approver)
    assert session.call("bash", {"command": "git status"}).ok  # granted (no repository: git exits 128)
    assert session.call("bash", {"command": "git status"}).ok
    assert len(approver.requests) == 1  # the grant covers the identical call
    r = session.call("bash", {"command": "git status; touch widened"})
    assert r.error.details["by"] == "approver" and len(approver.requests) == 2
    assert not (workspace / "widened").exists()


def test_the_approval_request_shows_the_parsed_segments(approving):
    approver = Recorder()
    session = approving(approver=approver)
    session.call("bash", {"command": "FOO=1 env cd src && make > out 2>&1; echo $(date)"})
    (request,) = approver.requests
    details = request["details"]
    assert details["segments"] == [
        {"words": ["cd", "src"], "wrappers": ["env"], "assignments": ["FOO"],
         "notes": ["it sets FOO for the command (which can change what it runs)"]},
        {"words": ["make"], "redirects": [">out", ">&1"]},
        {"words": ["date"], "origin": "command substitution"},
        {"words": ["echo", "$(date)"]},  # a word computed at run time, shown as written
    ]
    assert details["dynamic"] == ["it uses command substitution ($(date))"]
    assert request["sandboxed"] is bool(session.info["sandbox"].get("active"))  # on by default where it can be


# -- sandboxed calls -------------------------------------------------------------------------------------


def test_process_sandboxed_decides_sandboxed_process_calls(open_session, workspace, tmp_path):
    approver = Recorder()
    state = tmp_path / "sandbox-state"
    # bash outside the OS sandbox (mode = "off"), beside a tool whose calls run inside it.
    session = open_session({"approval": {**DEFAULT_APPROVAL, "process_sandboxed": "allow"}, "sandbox": {"mode": "off"}},
                           env={"XDG_CONFIG_HOME": str(tmp_path / "none"), "PYTHONPATH": str(FIXTURES)},
                           tools=["peon_test_tools:SandboxedProcessTool"], approver=approver, state_dir=state)
    r = session.call("sandboxed_touch", {"path": "made"})
    assert r.ok and (workspace / "made").exists() and approver.requests == []
    r = session.call("bash", {"command": "touch not-sandboxed"})  # approval.process still asks
    assert r.error.details["by"] == "approver" and not (workspace / "not-sandboxed").exists()
    lines = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines()]
    results = [line for line in lines if line["event"] == "result"]
    assert [(line["tool"], line["sandboxed"]) for line in results] == [("sandboxed_touch", True), ("bash", False)]
    assert results[0]["decision"]["rule"].startswith('approval.process_sandboxed = "allow"')


def test_the_approver_is_told_the_call_is_sandboxed(open_session, workspace, tmp_path):
    approver = Recorder("allow_once")
    session = open_session({"approval": {**DEFAULT_APPROVAL, "process_sandboxed": "ask", "process": "allow"}},
                           env={"XDG_CONFIG_HOME": str(tmp_path / "none"), "PYTHONPATH": str(FIXTURES)},
                           tools=["peon_test_tools:SandboxedProcessTool"], approver=approver)
    assert session.call("sandboxed_touch", {"path": "x"}).ok
    (request,) = approver.requests
    assert request["sandboxed"] is True and request["risk"] == "process"
    from peon.approvers import render_request

    assert "sandbox: the call runs inside the OS sandbox" in render_request(request)[0]
