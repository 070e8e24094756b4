"""The audit log written directly, without a session: entries keep only descriptive fields, rotation and
oversized entries, a log moved or replaced reopened by path, failures reported not raised, and whole lines or
none — a partial tail cut back, a rotation all or nothing."""

from __future__ import annotations

import errno
import json
import os

import pytest

from helpers import jsonl_entries
from peon.core.tool import ToolRisk
from peon.approval.policy import ApprovalRequest, Decision
from peon.supervisor.approval.audit import AuditLog, audit_entry


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


def test_commit_raises_and_syncs(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append(fd))
    AuditLog(tmp_path, max_bytes=1 << 20, backups=1, fsync=True).commit({"x": 1})
    AuditLog(tmp_path, max_bytes=1 << 20, backups=1, fsync=False).commit({"x": 2})
    assert len(synced) == 1
    with pytest.raises(OSError):
        AuditLog(tmp_path / "missing", max_bytes=1 << 20, backups=1).commit({"x": 3})


def test_a_failed_sync_leaves_the_log_as_it_was(tmp_path, monkeypatch):
    log = AuditLog(tmp_path, max_bytes=1 << 20, backups=1, fsync=True)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    log.commit({"line": 1})

    def failing(fd):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(OSError):
        log.commit({"line": 2})
    assert [entry["line"] for entry in jsonl_entries(tmp_path / "audit.jsonl")] == [1]


@pytest.mark.parametrize("tail", [b'{"event":"decision","call_id":"c2","to', b"no newline at all"])
def test_a_partial_tail_is_cut_back_when_the_log_is_opened(tmp_path, capsys, tail):
    whole = b'{"event":"result","call_id":"c1"}\n' if tail.startswith(b"{") else b""
    (tmp_path / "audit.jsonl").write_bytes(whole + tail)
    log = AuditLog(tmp_path, max_bytes=1 << 20, backups=1)
    log.commit({"event": "decision", "call_id": "c3"})
    log.close()
    entries = jsonl_entries(tmp_path / "audit.jsonl")
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



# -- a job's lines, when the log cannot take them ----------------------------------------------------


def _job_line(event: str, job: str) -> dict:
    return {"event": event, "job_id": job, "call_id": f"call-{job}"}


def _events(path) -> list[tuple[str, str | None]]:
    return [(entry["event"], entry.get("job_id") or entry.get("call_id")) for entry in jsonl_entries(path)]


def test_a_job_line_the_log_cannot_take_is_kept_and_written_before_the_next_line(tmp_path, capsys):
    state = tmp_path / "state"  # missing: no line can be written
    log = AuditLog(state, max_bytes=1 << 20, backups=1)
    assert not log.record(_job_line("job_started", "job-1"))
    assert not log.record(_job_line("job_ended", "job-1"))
    assert not log.record({"event": "result", "call_id": "c1"})  # a result line is not kept: reported only
    err = capsys.readouterr().err
    assert err.count("it is kept and written once the log can take it") == 2, err
    assert log.kept == 2
    state.mkdir()
    log.commit({"event": "decision", "call_id": "c2"})
    assert _events(state / "audit.jsonl") == [("job_started", "job-1"), ("job_ended", "job-1"), ("decision", "c2")]
    assert log.kept == 0
    log.close()


def test_job_lines_past_the_bound_are_counted_and_said_lost(tmp_path, capsys, monkeypatch):
    from peon.supervisor.approval import audit

    monkeypatch.setattr(audit, "MAX_KEPT_LINES", 2)
    state = tmp_path / "state"
    log = AuditLog(state, max_bytes=1 << 20, backups=1)
    for n in range(1, 5):
        log.record(_job_line("job_ended", f"job-{n}"))
    assert log.kept == 2 and "it is counted as lost" in capsys.readouterr().err
    state.mkdir()
    log.record({"event": "result", "call_id": "c1"})
    entries = jsonl_entries(state / "audit.jsonl")
    assert [e.get("job_id") for e in entries[:2]] == ["job-1", "job-2"]
    assert entries[2]["event"] == "lost" and entries[2]["count"] == 2 and entries[2]["events"] == {"job_ended": 2}
    assert entries[3] == {"event": "result", "call_id": "c1"}
    log.close()


def test_kept_lines_are_written_at_close_or_reported_lost_in_one_line(tmp_path, capsys):
    state = tmp_path / "state"
    log = AuditLog(state, max_bytes=1 << 20, backups=1)
    log.record(_job_line("job_ended", "job-7"))
    state.mkdir()
    log.close()  # the log can take it now
    assert _events(state / "audit.jsonl") == [("job_ended", "job-7")]
    capsys.readouterr()
    gone = AuditLog(tmp_path / "never", max_bytes=1 << 20, backups=1)
    gone.record(_job_line("job_started", "job-8"))
    gone.record(_job_line("job_ended", "job-8"))
    capsys.readouterr()
    gone.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "2 audit line(s)" in lines[0] and "are lost" in lines[0], lines
    assert "job_started job-8, job_ended job-8" in lines[0]
    assert gone.kept == 0
