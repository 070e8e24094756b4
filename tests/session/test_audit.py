"""The audit log through real sessions: one line per call with the decision and who made it, no contents,
bounded by rotation, the decision written before the call runs, and a call refused when its decision cannot
be audited. The log's own rules are tests/unit/test_audit_log.py."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import threading

import pytest

from helpers import jsonl_entries, running_command, stderr_until, wait_for
from peon.supervisor.approval.audit import AuditLog

DEFAULT_APPROVAL = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}


def read_log(state_dir, event: str | None = "result") -> list[dict]:
    """Every entry (of one event kind, by default the result lines), oldest first, across rotated files."""
    names = sorted((n for n in os.listdir(state_dir) if n.startswith("audit.jsonl")),
                   key=lambda n: -int(n.rpartition(".")[2]) if n[-1].isdigit() else 0)
    entries = []
    for name in names:
        with open(state_dir / name) as f:
            entries.extend(json.loads(line) for line in f)
    return [e for e in entries if event is None or e["event"] == event]


@pytest.fixture
def env(tmp_path):
    return {"XDG_CONFIG_HOME": str(tmp_path / "no-user-config")}


def test_every_decision_and_outcome_is_recorded(open_session, env, tmp_path, leftovers):
    release = threading.Event()

    def approver(request):
        command = json.loads(request["canonical_input"]).get("command", "")
        if command == "echo stuck":
            release.wait(30)
        return {"echo ask-allow": "allow_once", "echo ask-session": {"decision": "allow_session", "reason": "fine"},
                "echo ask-deny": {"decision": "deny", "reason": "nope"}}.get(command, "deny")

    rules = [{"tool": "bash", "command_prefix": "echo policy-allow", "decision": "allow"},
             {"tool": "bash", "command_prefix": "sleep", "decision": "allow"},
             {"tool": "bash", "command_prefix": "head", "decision": "allow"},
             {"tool": "bash", "command_prefix": "echo policy-deny", "decision": "deny"}]
    state = tmp_path / "audited"
    session = open_session({"approval": {**DEFAULT_APPROVAL, "rules": rules},
                            "limits": {"approval_timeout_seconds": 0.5, "max_output_bytes": 1024,
                                       "max_parallel_calls": 1}},  # a call queued behind the running one
                           env=env, approver=approver, state_dir=state)
    ids = {}
    try:
        ids["unknown"] = session.call("nope", {"x": 1}).call_id
        ids["invalid"] = session.call("bash", {"command": 5}).call_id
        ids["policy-allow"] = session.call("bash", {"command": "echo policy-allow"}).call_id
        ids["policy-deny"] = session.call("bash", {"command": "echo policy-deny"}).call_id
        ids["ask-allow"] = session.call("bash", {"command": "echo ask-allow"}).call_id
        ids["ask-session"] = session.call("bash", {"command": "echo ask-session"}).call_id
        ids["grant"] = session.call("bash", {"command": "echo ask-session"}).call_id
        ids["ask-deny"] = session.call("bash", {"command": "echo ask-deny"}).call_id
        ids["timeout"] = session.call("bash", {"command": "echo stuck"}).call_id
        ids["exit"] = session.call("bash", {"command": "sleep 0; exit 3"}).call_id  # not simple: asked, denied
        ids["timed-out"] = session.call("bash", {"command": "sleep 5", "timeout_seconds": 0.2}).call_id
        ids["truncated"] = session.call("bash", {"command": "head -c 5000 /dev/zero"}).call_id
        running = session.submit("bash", {"command": "sleep 30"})
        queued = session.submit("bash", {"command": "sleep 1"})
        queued.cancel()
        assert queued.result(10).error.code == "cancelled"
        ids["queued-cancel"] = queued.call_id
        assert wait_for(lambda: running_command(leftovers.alive(), ["sleep", "30"])), "the call did not start"
        running.cancel()
        assert running.result(10).value["cancelled"]
        ids["running-cancel"] = running.call_id
    finally:
        release.set()
    entries = {e["call_id"]: e for e in read_log(state)}
    assert len(entries) == len(ids)

    def check(name, by, allowed, outcome):
        entry = entries[ids[name]]
        decision = entry["decision"]
        if by is None:
            assert decision is None, (name, decision)
        else:
            assert (decision["by"], decision["allowed"]) == (by, allowed), (name, decision)
        for key, value in outcome.items():
            assert entry["outcome"].get(key) == value, (name, entry["outcome"])
        return entry

    unknown = check("unknown", None, None, {"ok": False, "error": "unknown_tool"})
    assert unknown["risk"] is None and unknown["tool"] == "nope"
    check("invalid", None, None, {"ok": False, "error": "invalid_input"})
    allowed = check("policy-allow", "policy", True, {"ok": True, "exit_code": 0, "truncated": False,
                                                     "timed_out": False, "cancelled": False})
    assert allowed["decision"]["rule"] == (
        'approval.rules[0] in overrides (tool = "bash", command_prefix = "echo policy-allow") says \'allow\' '
        '(every part allowed: `echo policy-allow`)')
    sandboxed = bool(session.info["sandbox"].get("active"))  # the OS sandbox is on by default where it can be
    assert (allowed["risk"], allowed["risk_reason"]) == (
        "process", "declared risk of bash" + (", inside the OS sandbox" if sandboxed else ""))
    assert allowed["input"] == {"command": "echo policy-allow"}
    check("policy-deny", "policy", False, {"ok": False, "error": "denied"})
    ask = check("ask-allow", "approver", True, {"ok": True})
    assert ask["decision"]["answer"] == "allow_once"
    session_grant = check("ask-session", "approver", True, {"ok": True})
    assert (session_grant["decision"]["answer"], session_grant["decision"]["scope"]) == ("allow_session", "call")
    assert "the approver said 'fine'" in session_grant["decision"]["rule"]
    grant = check("grant", "grant", True, {"ok": True})
    assert grant["decision"]["rule"].startswith("session grant (scope 'call'")
    denied = check("ask-deny", "approver", False, {"ok": False, "error": "denied"})
    assert "nope" in denied["decision"]["rule"]
    check("timeout", "timeout", False, {"ok": False, "error": "denied"})
    check("exit", "approver", False, {"ok": False})
    check("timed-out", "policy", True, {"ok": True, "timed_out": True, "exit_code": None, "signal": "SIGKILL"})
    check("truncated", "policy", True, {"ok": True, "truncated": True, "exit_code": 0})
    check("queued-cancel", None, None, {"ok": False, "error": "cancelled"})
    check("running-cancel", "policy", True, {"ok": True, "cancelled": True})
    for entry in entries.values():
        assert entry["time"].endswith("Z") and entry["duration_ms"] >= 0
        assert entry["session_id"] == session.session_id
    assert entries[ids["timed-out"]]["duration_ms"] >= 200


def test_no_approver_and_session_close_are_recorded(open_session, env, tmp_path, leftovers):
    state = tmp_path / "closing"
    session = open_session({"approval": {**DEFAULT_APPROVAL, "rules": [
        {"tool": "bash", "command_prefix": "sleep", "decision": "allow"}]},
        "limits": {"max_parallel_calls": 1}}, env=env, state_dir=state)  # the second call stays queued
    denied = session.call("bash", {"command": "echo hi"})
    running = session.submit("bash", {"command": "sleep 30"})
    waiting = session.submit("bash", {"command": "sleep 1"})
    assert wait_for(lambda: running_command(leftovers.alive(), ["sleep", "30"])), "the call did not start"
    session.close()
    assert waiting.result(10).error.code == "session_closed"
    entries = {e["call_id"]: e for e in read_log(state)}
    assert entries[denied.call_id]["decision"]["by"] == "no-approver"
    assert entries[waiting.call_id]["outcome"] == {"ok": False, "error": "session_closed"}
    assert entries[running.call_id]["outcome"]["cancelled"] is True


def test_the_log_holds_no_contents_or_output(open_session, env, tmp_path, workspace):
    pytest.importorskip("peon.tools.write")
    state = tmp_path / "private"
    (workspace / ".env").write_text("TOKEN=READ-SECRET-42\n")
    session = open_session({}, env=env, state_dir=state)  # the fixture allows every risk
    assert session.call("write", {"path": "out.txt", "content": "WRITTEN-SECRET-17\n", "mode": "create"}).ok
    assert session.call("read", {"path": ".env"}).value["content"] == "TOKEN=READ-SECRET-42\n"
    assert "OUTPUT-SECRET-99" in session.call("bash", {"command": "printf OUTPUT-; printf SECRET-99"}).value["output"]
    text = "".join((state / name).read_text() for name in os.listdir(state) if name.startswith("audit"))
    for secret in ("WRITTEN-SECRET-17", "READ-SECRET-42", "OUTPUT-SECRET-99"):
        assert secret not in text
    entries = read_log(state)
    write, read, bash = entries
    assert write["input"] == {"mode": "create", "path": "out.txt"} and write["input_omitted"] == ["content"]
    assert len(write["input_sha256"]) == 64
    assert read["risk"] == "filesystem" and ".env" in read["risk_reason"]
    assert bash["input"] == {"command": "printf OUTPUT-; printf SECRET-99"}


def test_the_log_is_rotated_and_bounded(open_session, env, tmp_path):
    state = tmp_path / "rotating"
    session = open_session({"audit": {"max_bytes": 2048, "backups": 2}}, env=env, state_dir=state)
    ids = [session.call("bash", {"command": f"echo call-{i}"}).call_id for i in range(24)]
    names = sorted(os.listdir(state))
    assert [n for n in names if n.startswith("audit")] == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    for name in ("audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"):
        assert 0 < os.path.getsize(state / name) <= 2048
    kept = [e["call_id"] for e in read_log(state)]
    assert kept == ids[-len(kept):]  # the newest calls, in order, with nothing missing in between
    decided = [e["call_id"] for e in read_log(state, "decision")]
    assert set(kept[1:]) <= set(decided)  # a kept result's decision line is kept (the oldest may be rotated away)
    assert len(kept) < len(ids)  # the oldest were dropped


# -- audit before acting ---------------------------------------------------------------------------------


def test_the_decision_line_is_written_before_the_call_runs(open_session, env, tmp_path):
    state = tmp_path / "before"
    # The command reads Peon's audit log: only outside the OS sandbox, which hides it from commands.
    session = open_session({"sandbox": {"mode": "off"}}, env=env, state_dir=state)  # the fixture allows every risk
    r = session.call("bash", {"command": f"grep -c 'token-before-run' {state / 'audit.jsonl'}"})
    assert r.ok and r.value["output"] == "1\n", r  # the running command found its own decision line
    (decision,) = read_log(state, "decision")
    assert decision["call_id"] == r.call_id and decision["decision"]["allowed"] is True
    assert "outcome" not in decision and decision["input"]["command"].startswith("grep -c 'token-before-run'")


def test_a_call_that_kills_its_supervisor_still_has_its_decision_line(open_session, env, tmp_path):
    state = tmp_path / "killed"
    session = open_session({"sandbox": {"mode": "off"}}, env=env, state_dir=state)  # the sandbox refuses the kill
    r = session.call("bash", {"command": f"kill -9 {session.supervisor_pid}; sleep 30"})
    assert r.error.code == "supervisor_died", r
    (decision,) = read_log(state, "decision")
    assert decision["call_id"] == r.call_id and decision["input"]["command"].startswith("kill -9")
    assert read_log(state) == []  # no result line: the supervisor died before it could write one


def _mount_tmpfs(path, size: str) -> None:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs CAP_SYS_ADMIN): {done.stderr.strip()}")


def _fill(directory) -> None:
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(100_000):  # bounded: the tmpfs is 256 KiB
            os.write(fd, b"\0" * 512)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    else:
        pytest.fail("the tmpfs never filled up")
    finally:
        os.close(fd)


@pytest.mark.parametrize("how", ["full", "read-only", "immutable"])
def test_calls_are_refused_when_their_decision_cannot_be_audited(open_session, env, tmp_path, workspace, how):
    mount = tmp_path / "audit-fs"
    state = mount / "state"
    if how == "immutable":
        state.mkdir(parents=True)
        (state / "audit.jsonl").write_text("")
        if subprocess.run(["chattr", "+i", str(state / "audit.jsonl")], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not supported on this file system")
    else:
        _mount_tmpfs(mount, "256k")
    try:
        session = open_session({"approval": {"process": "ask", "rules": [
            {"tool": "bash", "command_prefix": "touch", "decision": "allow"}]}}, env=env, state_dir=state)
        if how == "full":
            _fill(mount)
        elif how == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        r = session.call("bash", {"command": "touch made"})
        assert not r.ok and r.error.code == "audit_failed", r
        assert "could not be written to the audit log" in r.error.message and "audit.jsonl" in r.error.message
        assert not (workspace / "made").exists()
        (workspace / "notes.txt").write_text("x")
        assert session.call("read", {"path": "notes.txt"}).error.code == "audit_failed"  # every tool
        assert session.call("bash", {"command": "rm notes.txt"}).error.code == "denied"  # nothing to act on
        assert (workspace / "notes.txt").exists()
        # The condition lifted, calls run again.
        if how == "full":
            os.unlink(mount / "filler")
        elif how == "read-only":
            subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
        else:
            subprocess.run(["chattr", "-i", str(state / "audit.jsonl")], check=True)
        assert session.call("bash", {"command": "touch made"}).ok and (workspace / "made").exists()
        session.close()
    finally:
        if how == "immutable":
            subprocess.run(["chattr", "-i", str(state / "audit.jsonl")], capture_output=True)
        else:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


# -- whole lines or none, and rotation all or nothing ------------------------------------------------


def test_a_short_write_on_a_full_disk_leaves_the_log_as_it_was(tmp_path):
    mount = tmp_path / "small-fs"
    _mount_tmpfs(mount, "256k")
    try:
        log = AuditLog(mount, max_bytes=1 << 20, backups=1)
        log.commit({"line": 1})
        before = (mount / "audit.jsonl").read_bytes()
        _fill(mount)  # the log's page has room for a few KiB more, the file system for nothing else
        with pytest.raises(OSError) as raised:
            log.commit({"line": 2, "pad": "x" * 20_000})  # the kernel writes what fits in the page
        assert raised.value.errno == errno.ENOSPC
        assert (mount / "audit.jsonl").read_bytes() == before  # cut back: no fragment
        assert not log.record({"line": 3, "pad": "y" * 20_000})
        os.unlink(mount / "filler")
        log.commit({"line": 4})
        assert [entry["line"] for entry in jsonl_entries(mount / "audit.jsonl")] == [1, 4]
        log.close()
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


# -- a job's end, when the log cannot take it -------------------------------------------------------


def _break_log(how: str, mount, state) -> None:
    if how == "full":
        # A tmpfs takes a write into the log's last page even when full: the log is first padded (with a
        # whole line) to a page's end, so that the next line needs a page the file system no longer has.
        log = state / "audit.jsonl"
        head, tail = b'{"event":"padding","x":"', b'"}\n'
        pad = -os.stat(log).st_size % 4096
        pad += 4096 if pad < len(head) + len(tail) else 0
        with open(log, "ab") as f:
            f.write(head + b"x" * (pad - len(head) - len(tail)) + tail)
        assert os.stat(log).st_size % 4096 == 0
        _fill(mount)
    else:
        subprocess.run(["chattr", "+i", str(state / "audit.jsonl")], check=True)


def _mend_log(how: str, mount, state) -> None:
    if how == "full":
        os.unlink(mount / "filler")
    else:
        subprocess.run(["chattr", "-i", str(state / "audit.jsonl")], check=True)


def _log_fs(how: str, tmp_path):
    """A file system for the state directory: a small tmpfs to fill, or one where ``chattr +i`` works."""
    mount = tmp_path / "audit-fs"
    if how == "full":
        _mount_tmpfs(mount, "256k")
    else:
        mount.mkdir()
        probe = mount / "probe"
        probe.write_text("")
        if subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not supported on this file system")
        subprocess.run(["chattr", "-i", str(probe)], check=True)
    return mount, mount / "state"


@pytest.mark.parametrize("how", ["full", "immutable"])
def test_a_jobs_end_is_audited_once_the_log_can_take_it(open_session, env, tmp_path, workspace, capfd, how):
    mount, state = _log_fs(how, tmp_path)
    try:
        session = open_session({"approval": {"process": "allow"}}, env=env, state_dir=state)
        r = session.call("bash", {"command": "while [ ! -e go ]; do sleep 0.05; done; echo ended",
                                  "background": True})
        assert r.ok, r.error
        job = r.value["job_id"]
        _break_log(how, mount, state)
        (workspace / "go").touch()  # the job ends while the log can take nothing
        text = stderr_until(capfd, "is kept and written once the log can take it", timeout=20)
        assert "cannot write the audit log" in text, text
        assert [e["job_id"] for e in read_log(state, "job_ended")] == []
        _mend_log(how, mount, state)
        assert session.call("bash", {"command": "echo next"}).ok  # the next line the log takes
        events = [(e["event"], e.get("job_id") or e.get("call_id")) for e in read_log(state, None)]
        ended = events.index(("job_ended", job))
        assert events[ended - 1][0] != "job_ended" and ("job_started", job) in events[:ended], events
        next_decision = [i for i, (event, _) in enumerate(events) if event == "decision"][-1]
        assert ended < next_decision, events  # written before the line that found the log able again
        assert read_log(state, "job_ended")[0]["outcome"]["state"] == "exited"
        session.close()
    finally:
        subprocess.run(["chattr", "-i", str(state / "audit.jsonl")], capture_output=True)
        if how == "full":
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_jobs_end_the_log_never_takes_is_reported_lost_at_close(open_session, env, tmp_path, workspace, capfd):
    mount, state = _log_fs("immutable", tmp_path)
    try:
        session = open_session({"approval": {"process": "allow"}}, env=env, state_dir=state)
        r = session.call("bash", {"command": "while [ ! -e go ]; do sleep 0.05; done", "background": True})
        assert r.ok, r.error
        _break_log("immutable", mount, state)
        (workspace / "go").touch()
        stderr_until(capfd, "is kept and written once the log can take it", timeout=20)
        session.close()
        text = stderr_until(capfd, "are lost", timeout=20)
        assert f"job_ended {r.value['job_id']}" in text, text
    finally:
        subprocess.run(["chattr", "-i", str(state / "audit.jsonl")], capture_output=True)
