"""The audit log: one line per call with the decision and who made it, no contents, bounded by rotation."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import threading

import pytest

from helpers import running_command, wait_for
from peon.core.tool import ToolRisk
from peon.approval.policy import ApprovalRequest, Decision
from peon.supervisor.approval.audit import AuditLog, audit_entry

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
                            "limits": {"approval_timeout_seconds": 0.5, "max_output_bytes": 1024}},
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
        {"tool": "bash", "command_prefix": "sleep", "decision": "allow"}]}}, env=env, state_dir=state)
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


# -- the pure parts --------------------------------------------------------------------------------


def test_entry_keeps_only_descriptive_input_fields():
    request = ApprovalRequest("c9", "agent_claude", ToolRisk.DELEGATE, "delegate", "summary",
                              canonical_input='{"prompt":"p","timeout_seconds":5}')
    entry = audit_entry(session_id="s", call_id="c9", tool="agent_claude",
                        args={"prompt": "do things " * 500, "timeout_seconds": 5}, request=request,
                        decision=Decision(True, "approver", "r", "allow_once"),
                        reply={"ok": True, "value": {"output": "OUT", "exit_code": 0, "truncated": False}},
                        received_at=0.0, duration_ms=7)
    assert entry["time"] == "1970-01-01T00:00:00.000Z"
    assert entry["input"] == {"timeout_seconds": 5} and entry["input_omitted"] == ["prompt"]
    assert entry["outcome"] == {"ok": True, "exit_code": 0, "truncated": False}
    assert "OUT" not in json.dumps(entry)


def test_entry_for_input_that_is_not_an_object():
    entry = audit_entry(session_id="s", call_id="c", tool="bash", args=["ls"], request=None, decision=None,
                        reply={"ok": False, "error": {"code": "invalid_input", "message": "m"}}, received_at=1.0,
                        duration_ms=0)
    assert "input" not in entry and entry["decision"] is None
    assert entry["outcome"] == {"ok": False, "error": "invalid_input"}
    assert entry["input_sha256"] is not None


def test_long_commands_are_shortened():
    entry = audit_entry(session_id="s", call_id="c", tool="bash", args={"command": "x" * 5000}, request=None,
                        decision=None, reply={"ok": True, "value": {}}, received_at=1.0, duration_ms=0)
    assert entry["input"]["command"].endswith("[4000 more characters]")


def test_rotation_without_backups_starts_afresh(tmp_path):
    log = AuditLog(tmp_path, max_bytes=1024, backups=0)
    for i in range(30):
        log.record({"i": i, "pad": "x" * 100})
    assert os.listdir(tmp_path) == ["audit.jsonl"]
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["i"] == 29 and os.path.getsize(tmp_path / "audit.jsonl") <= 1024


def test_an_oversized_entry_gets_a_file_of_its_own(tmp_path):
    log = AuditLog(tmp_path, max_bytes=1024, backups=1)
    log.record({"small": 1})
    log.record({"big": "y" * 3000})
    log.record({"small": 2})
    assert json.loads((tmp_path / "audit.jsonl.1").read_text()) == {"big": "y" * 3000}
    assert json.loads((tmp_path / "audit.jsonl").read_text()) == {"small": 2}


def test_a_log_moved_or_replaced_is_reopened_by_path(tmp_path):
    log = AuditLog(tmp_path, max_bytes=1 << 20, backups=1)
    log.commit({"line": 1})
    os.rename(tmp_path / "audit.jsonl", tmp_path / "moved.jsonl")  # e.g. rotated by a log shipper
    log.commit({"line": 2})
    assert [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()] == [{"line": 2}]
    (tmp_path / "audit.jsonl").unlink()
    (tmp_path / "audit.jsonl").write_text("")  # a new file at the same path
    log.commit({"line": 3})
    assert [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()] == [{"line": 3}]
    (tmp_path / "audit.jsonl").unlink()
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "audit.jsonl").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="not a regular file"):
        log.commit({"line": 4})
    log.close()
    assert [json.loads(x) for x in (tmp_path / "moved.jsonl").read_text().splitlines()] == [{"line": 1}]
    assert (tmp_path / "elsewhere").read_text() == ""


def test_a_write_failure_is_reported_not_raised(tmp_path, capsys):
    log = AuditLog(tmp_path / "missing-dir", max_bytes=1024, backups=1)
    log.record({"x": 1})
    assert "cannot write the audit log" in capsys.readouterr().err


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


def test_commit_raises_and_syncs(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append(fd))
    AuditLog(tmp_path, max_bytes=1 << 20, backups=1, fsync=True).commit({"x": 1})
    AuditLog(tmp_path, max_bytes=1 << 20, backups=1, fsync=False).commit({"x": 2})
    assert len(synced) == 1
    with pytest.raises(OSError):
        AuditLog(tmp_path / "missing", max_bytes=1 << 20, backups=1).commit({"x": 3})


# -- whole lines or none, and rotation all or nothing ------------------------------------------------


def _lines(path) -> list[dict]:
    with open(path, "rb") as f:
        data = f.read()
    assert data == b"" or data.endswith(b"\n"), data[-80:]
    return [json.loads(line) for line in data.splitlines()]


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
        assert [entry["line"] for entry in _lines(mount / "audit.jsonl")] == [1, 4]
        log.close()
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_failed_sync_leaves_the_log_as_it_was(tmp_path, monkeypatch):
    log = AuditLog(tmp_path, max_bytes=1 << 20, backups=1, fsync=True)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    log.commit({"line": 1})

    def failing(fd):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(OSError):
        log.commit({"line": 2})
    assert [entry["line"] for entry in _lines(tmp_path / "audit.jsonl")] == [1]


@pytest.mark.parametrize("tail", [b'{"event":"decision","call_id":"c2","to', b"no newline at all"])
def test_a_partial_tail_is_cut_back_when_the_log_is_opened(tmp_path, capsys, tail):
    whole = b'{"event":"result","call_id":"c1"}\n' if tail.startswith(b"{") else b""
    (tmp_path / "audit.jsonl").write_bytes(whole + tail)
    log = AuditLog(tmp_path, max_bytes=1 << 20, backups=1)
    log.commit({"event": "decision", "call_id": "c3"})
    log.close()
    entries = _lines(tmp_path / "audit.jsonl")
    assert [entry.get("call_id") for entry in entries] == (["c1"] if whole else []) + [None, "c3"]
    assert entries[-2]["event"] == "repaired" and entries[-2]["cut_bytes"] == len(tail)
    assert f"cut {len(tail)} bytes back to its last complete line" in capsys.readouterr().err


def _contents(directory) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def _rotating_log(tmp_path) -> AuditLog:
    (tmp_path / "audit.jsonl").write_bytes(b'{"file":"current"}\n' + b'{"pad":"' + b"p" * 1000 + b'"}\n')
    for index in (1, 2, 3):
        (tmp_path / f"audit.jsonl.{index}").write_bytes(f'{{"file":"backup {index}"}}\n'.encode())
    return AuditLog(tmp_path, max_bytes=1024, backups=3)


def _fail_rename_at(monkeypatch, step: int, undo_fails: bool = False) -> list[tuple[str, str]]:
    """Make the ``step``-th rename fail (and every later one when ``undo_fails``); returns the renames tried."""
    tried: list[tuple[str, str]] = []
    real = os.rename

    def rename(source, target, *args, **kwargs):
        tried.append((os.path.basename(source), os.path.basename(target)))
        if len(tried) - 1 == step or (undo_fails and len(tried) - 1 > step):
            raise OSError(errno.EIO, "injected rename failure")
        return real(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", rename)
    return tried


@pytest.mark.parametrize("step", [0, 1, 2, 3])  # the oldest aside, .2 → .3, .1 → .2, the current → .1
def test_a_rotation_that_fails_at_any_rename_changes_nothing(tmp_path, monkeypatch, step):
    log = _rotating_log(tmp_path)
    before = _contents(tmp_path)
    tried = _fail_rename_at(monkeypatch, step)
    with pytest.raises(OSError, match="it was undone, the backups are as they were"):
        log.commit({"line": "new"})
    assert len(tried) > step
    assert _contents(tmp_path) == before  # nothing shifted, overwritten or dropped
    monkeypatch.undo()
    log.commit({"line": "new"})  # the same rotation, now whole
    after = _contents(tmp_path)
    assert after["audit.jsonl"] == b'{"line":"new"}\n'
    assert after["audit.jsonl.1"] == before["audit.jsonl"]
    assert after["audit.jsonl.2"] == before["audit.jsonl.1"]
    assert after["audit.jsonl.3"] == before["audit.jsonl.2"]
    assert sorted(after) == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2", "audit.jsonl.3"]


@pytest.mark.parametrize("step", [1, 2, 3])
def test_a_rotation_that_cannot_be_undone_still_loses_nothing(tmp_path, monkeypatch, step):
    log = _rotating_log(tmp_path)
    before = _contents(tmp_path)
    _fail_rename_at(monkeypatch, step, undo_fails=True)
    with pytest.raises(OSError, match="nothing is lost"):
        log.commit({"line": "new"})
    monkeypatch.undo()
    assert sorted(_contents(tmp_path).values()) == sorted(before.values())  # every file's content, somewhere
    log.commit({"line": "next"})  # a later rotation puts the oldest back first, then drops it
    after = _contents(tmp_path)
    assert after["audit.jsonl"] == b'{"line":"next"}\n'
    assert "audit.jsonl.dropping" not in after


def test_a_partial_tail_that_cannot_be_cut_is_ended_with_a_newline(tmp_path, capsys, monkeypatch):
    (tmp_path / "audit.jsonl").write_bytes(b'{"call_id":"c1"}\n{"call_id":"c2","to')
    real = os.ftruncate

    def append_only(fd, size):  # as on a file with chattr +a
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "ftruncate", append_only)
    log = AuditLog(tmp_path, max_bytes=1 << 20, backups=1)
    log.commit({"call_id": "c3"})
    monkeypatch.setattr(os, "ftruncate", real)
    log.close()
    lines = (tmp_path / "audit.jsonl").read_bytes().splitlines()
    assert lines[1] == b'{"call_id":"c2","to' and json.loads(lines[2]) == {"call_id": "c3"}
    assert "cannot be cut (Operation not permitted): it was ended with a newline" in capsys.readouterr().err
