"""Session grants without a session: each scope matches exactly what it says, the narrowest is reported, the
file is private and holds no input, and a corrupt, hostile or non-regular file means no grants."""

from __future__ import annotations

import os
import socket
import stat
import threading

import pytest

from peon.core.tool import ToolRisk
from peon.approval.policy import ApprovalRequest
from peon.supervisor.approval.grants import GrantStore


def req(tool="bash", risk=ToolRisk.PROCESS, canonical='{"command":"ls"}') -> ApprovalRequest:
    return ApprovalRequest(call_id="c", tool=tool, risk=risk, risk_reason="r", summary="s", canonical_input=canonical)


# -- pure matching and the file --------------------------------------------------------------------


def test_call_scope_matches_the_identical_call_only(tmp_path):
    store = GrantStore(tmp_path)
    store.add(req(), "call")
    assert store.find(req()) is not None
    assert store.find(req(canonical='{"command":"ls "}')) is None
    assert store.find(req(tool="sh")) is None
    assert store.find(req(risk=ToolRisk.DELEGATE)) is None


def test_tool_scope_matches_the_tool_at_that_risk(tmp_path):
    store = GrantStore(tmp_path)
    store.add(req("read", ToolRisk.FILESYSTEM, '{"path":".env"}'), "tool")
    assert store.find(req("read", ToolRisk.FILESYSTEM, '{"path":"id_rsa"}')).scope == "tool"
    assert store.find(req("write", ToolRisk.FILESYSTEM, '{"path":".env"}')) is None
    assert store.find(req("read", ToolRisk.PROCESS, '{"path":".env"}')) is None


def test_risk_scope_matches_every_tool_of_that_risk(tmp_path):
    store = GrantStore(tmp_path)
    store.add(req("bash"), "risk")
    assert store.find(req("agent_claude")).scope == "risk"
    assert store.find(req("write", ToolRisk.FILESYSTEM)) is None


def test_the_narrowest_grant_is_reported(tmp_path):
    store = GrantStore(tmp_path)
    store.add(req(), "risk")
    store.add(req(), "call")
    assert store.find(req()).scope == "call"


def test_grants_persist_privately_without_the_input(tmp_path):
    store = GrantStore(tmp_path)
    secret = '{"command":"echo SECRET-TOKEN-123"}'
    store.add(req(canonical=secret), "call")
    path = tmp_path / "grants.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "SECRET-TOKEN-123" not in path.read_text()
    assert sorted(os.listdir(tmp_path)) == ["grants.json"]  # no temporary file left behind
    again = GrantStore(tmp_path)
    assert again.find(req(canonical=secret)) is not None
    assert again.find(req()) is None


@pytest.mark.parametrize("content", [b"{not json", b'{"version": 99, "grants": []}', b'{"version": 1}',
                                     b'{"version": 1, "grants": [{"scope": "everything"}]}', b"[]"])
def test_a_corrupt_file_means_no_grants(tmp_path, capsys, content):
    (tmp_path / "grants.json").write_bytes(content)
    store = GrantStore(tmp_path)
    assert store.grants == [] and store.find(req()) is None
    assert "ignoring unreadable session grants" in capsys.readouterr().err
    store.add(req(), "call")  # and the next grant rewrites it whole
    assert GrantStore(tmp_path).find(req()) is not None


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "socket", "symlink", "symlink-to-fifo"])
def test_a_grants_file_that_is_not_a_regular_file_is_not_opened(tmp_path, capsys, kind):
    """Planted by a command in the state directory, none of these may block or redirect the supervisor."""
    path = tmp_path / "grants.json"
    real = tmp_path / "real.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("creating a device node needs root")
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "symlink":  # a valid grants file elsewhere: still not read through the link
        GrantStore(tmp_path).add(req(), "risk")
        os.replace(path, real)
        path.symlink_to(real)
    elif kind == "symlink-to-fifo":
        os.mkfifo(real)
        path.symlink_to(real)
    outcome = {}
    loader = threading.Thread(target=lambda: outcome.update(store=GrantStore(tmp_path)), daemon=True)
    loader.start()
    loader.join(10)
    assert not loader.is_alive(), "loading the grants hung"
    assert outcome["store"].grants == [] and outcome["store"].find(req()) is None
    err = capsys.readouterr().err
    assert "ignoring unreadable session grants" in err and "not a regular file" in err


@pytest.mark.parametrize("content, why", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"version": 1, "grants": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
    (b'{"version": 1, "grants": [' + b'{"a": ' * 3000 + b"1" + b"}" * 3000 + b"]}", "nested too deeply"),
    (b'"just a string"', "expected a JSON object"),
    (b" " * ((8 << 20) + 1), "the limit is 8388608"),
])
def test_a_corrupt_or_hostile_file_means_no_grants(tmp_path, capsys, content, why):
    (tmp_path / "grants.json").write_bytes(content)
    store = GrantStore(tmp_path)
    assert store.grants == []
    err = capsys.readouterr().err
    assert "ignoring unreadable session grants" in err and why in err, err
    store.add(req(), "call")  # the next grant replaces the file whole
    assert GrantStore(tmp_path).find(req()) is not None

