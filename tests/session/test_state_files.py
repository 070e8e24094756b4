"""Files in a session's state directory that a command planted: a FIFO, a link or a device in place of
``grants.json`` or ``audit.jsonl`` never blocks the supervisor, is never written through, and costs
at most the grants (asked again) or the audit line (reported on stderr)."""

from __future__ import annotations

import os
import stat
import time

import pytest

from helpers import stderr_until

ASK_PROCESS = {"approval": {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}}


class Approver:
    def __init__(self):
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        return {"decision": "allow_session", "scope": "tool"}


def planted(state_dir, name: str, kind: str, tmp_path):
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("creating a device node needs root")
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    elif kind == "symlink":
        target = tmp_path / "victim.txt"
        target.write_text("untouched\n")
        path.symlink_to(target)
    return path


@pytest.mark.parametrize("kind", ["fifo", "device", "symlink"])
def test_a_planted_grants_file_neither_blocks_nor_grants(open_session, tmp_path, capfd, kind):
    state_dir = tmp_path / "state"
    planted(state_dir, "grants.json", kind, tmp_path)
    approver = Approver()
    started = time.monotonic()
    session = open_session(ASK_PROCESS, approver=approver, state_dir=state_dir)
    assert time.monotonic() - started < 30, "the session start waited on the planted file"
    assert session.call("bash", {"command": "echo one"}).ok
    assert len(approver.requests) == 1  # nothing was granted by the planted file: asked
    assert session.call("bash", {"command": "echo two"}).ok
    assert len(approver.requests) == 1  # the grant given now holds
    assert "ignoring unreadable session grants" in capfd.readouterr().err
    if kind == "symlink":
        assert (tmp_path / "victim.txt").read_text() == "untouched\n"  # the link was replaced, not written through
    assert stat.S_ISREG((state_dir / "grants.json").lstat().st_mode)


@pytest.mark.parametrize("kind", ["fifo", "device", "symlink"])
def test_a_planted_audit_log_neither_blocks_nor_is_written_through(open_session, tmp_path, capfd, kind):
    state_dir = tmp_path / "state"
    path = planted(state_dir, "audit.jsonl", kind, tmp_path)
    session = open_session(state_dir=state_dir)
    handle = session.submit("bash", {"command": "echo done"})
    result = handle.result(timeout=60)  # answered, whatever the log's fate
    assert result.ok or result.error.code not in ("supervisor_died", "worker_hung"), result.error
    assert "cannot write the audit log" in stderr_until(capfd, "cannot write the audit log")
    mode = path.lstat().st_mode
    assert {"fifo": stat.S_ISFIFO, "device": stat.S_ISCHR, "symlink": stat.S_ISLNK}[kind](mode)
    if kind == "symlink":
        assert (tmp_path / "victim.txt").read_text() == "untouched\n"


def test_a_fifo_as_the_users_secret_path_list_fails_the_read_instead_of_hanging(open_session, tmp_path, workspace):
    xdg = tmp_path / "xdg"
    (xdg / "peon").mkdir(parents=True)
    os.mkfifo(xdg / "peon" / "secret_paths.txt")
    (workspace / "notes.txt").write_text("hello\n")
    session = open_session(env={"XDG_CONFIG_HOME": str(xdg)})
    result = session.submit("read", {"path": "notes.txt"}).result(timeout=60)
    assert result.error.code == "config_invalid", result
    assert result.error.message == f"secret path list {xdg / 'peon' / 'secret_paths.txt'} is a FIFO, not a regular file"
    assert session.call("bash", {"command": "echo still serving"}).value["output"] == "still serving\n"
