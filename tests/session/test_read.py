"""read through a real session (supervisor + workers), with both path resolvers."""

from __future__ import annotations

import hashlib
import os
import stat
import time

import pytest

from helpers import expect_error, expect_ok

TEXT = "aé€😀z".encode()  # a@0, é@1-2, €@3-5, 😀@6-9, z@10; 11 bytes
BOUNDARIES = [0, 1, 3, 6, 10, 11]
CHARACTER_AT = {1: 1, 2: 1, 3: 3, 4: 3, 5: 3, 6: 6, 7: 6, 8: 6, 9: 6}  # byte -> start of its character
WIDTH = {1: 2, 3: 3, 6: 4}


def ok(session, args):
    return expect_ok(session, "read", args)


def err(session, args, code):
    return expect_error(session, "read", args, code)


def test_read_whole_file_in_both_containments(session, workspace):
    (workspace / "src").mkdir()
    (workspace / "src" / "main.rs").write_text("fn main() {}\n")
    value = ok(session, {"path": "src/main.rs"})
    assert value == {"path": "src/main.rs", "content": "fn main() {}\n", "offset": 0, "bytes": 13,
                     "total_bytes": 13, "truncated": False, "truncated_by": None, "next_offset": None,
                     "sha256": hashlib.sha256(b"fn main() {}\n").hexdigest()}
    assert ok(session, {"path": "./src//../src/main.rs"})["path"] == "src/main.rs"


def test_ranges_and_truncated(fs_session, workspace):
    (workspace / "f.txt").write_bytes(b"0123456789")
    v = ok(fs_session, {"path": "f.txt", "offset": 2, "limit": 3})
    assert (v["content"], v["offset"], v["bytes"], v["total_bytes"]) == ("234", 2, 3, 10)
    assert v["truncated"] and v["truncated_by"] == "limit" and v["next_offset"] == 5
    v = ok(fs_session, {"path": "f.txt", "offset": 7, "limit": 3})
    assert v["content"] == "789" and not v["truncated"] and v["truncated_by"] is None and v["next_offset"] is None
    v = ok(fs_session, {"path": "f.txt", "offset": 7, "limit": 100})
    assert v["content"] == "789" and not v["truncated"]
    v = ok(fs_session, {"path": "f.txt", "offset": 4, "limit": 0})
    assert v["content"] == "" and v["truncated"] and v["next_offset"] == 4
    v = ok(fs_session, {"path": "f.txt", "offset": 10})
    assert v["content"] == "" and v["bytes"] == 0 and not v["truncated"]


def test_offset_beyond_end_and_negative_values(fs_session, workspace):
    (workspace / "f.txt").write_bytes(b"0123456789")
    e = err(fs_session, {"path": "f.txt", "offset": 11}, "invalid_input")
    assert "offset 11 is beyond the end of 'f.txt', which has 10 bytes" in e.message
    assert e.details["total_bytes"] == 10
    for field in ("offset", "limit"):
        e = err(fs_session, {"path": "f.txt", field: -1}, "invalid_input")
        assert e.details["rule"] == "minimum" and e.details["pointer"] == f"/{field}"
        e = err(fs_session, {"path": "f.txt", field: 1.5}, "invalid_input")
        assert e.details["rule"] == "type"
    e = err(fs_session, {"path": "f.txt", "offset": 2**63}, "invalid_input")
    assert e.details["rule"] == "maximum"
    err(fs_session, {"path": "f.txt", "extra": 1}, "invalid_input")


def test_empty_file_and_bom(fs_session, workspace):
    (workspace / "empty").write_bytes(b"")
    v = ok(fs_session, {"path": "empty"})
    assert v["content"] == "" and v["total_bytes"] == 0 and not v["truncated"]
    (workspace / "bom").write_bytes(b"\xef\xbb\xbfx")
    assert ok(fs_session, {"path": "bom"})["content"] == "\ufeffx"


# -- UTF-8 boundaries ---------------------------------------------------------------------------------------


def test_every_range_on_character_boundaries_is_returned_exactly(fs_session, workspace):
    (workspace / "t.txt").write_bytes(TEXT)
    for start in BOUNDARIES:
        for end in BOUNDARIES:
            if end < start:
                continue
            v = ok(fs_session, {"path": "t.txt", "offset": start, "limit": end - start})
            assert v["content"].encode() == TEXT[start:end], (start, end)
            assert v["truncated"] == (end < len(TEXT))


INSIDE = [b for b, lead in sorted(CHARACTER_AT.items()) if b != lead]  # 2, 4, 5, 7, 8, 9


def test_offset_inside_a_character_is_an_error_naming_it(fs_session, workspace):
    (workspace / "t.txt").write_bytes(TEXT)
    for offset in INSIDE:
        lead = CHARACTER_AT[offset]
        e = err(fs_session, {"path": "t.txt", "offset": offset}, "not_utf8")
        assert e.details == {"offset": offset, "reason": "starts_inside_character", "character_offset": lead}
        where = f"offset {offset} is byte {offset - lead + 1} of the {WIDTH[lead]}-byte character at offset {lead}"
        assert where in e.message
        assert f"start at offset {lead} or {lead + WIDTH[lead]}" in e.message


def test_limit_ending_inside_a_character_is_an_error_naming_it(fs_session, workspace):
    (workspace / "t.txt").write_bytes(TEXT)
    for end in INSIDE:
        lead = CHARACTER_AT[end]
        for start in (0, 1 if lead > 1 else 0):
            e = err(fs_session, {"path": "t.txt", "offset": start, "limit": end - start}, "not_utf8")
            assert e.details == {"offset": end, "reason": "ends_inside_character", "character_offset": lead}
            ends = f"the {WIDTH[lead]}-byte character at offset {lead} ends at offset {lead + WIDTH[lead]}"
            assert ends in e.message
            assert f"use limit {lead - start} or {lead + WIDTH[lead] - start}" in e.message


INVALID = [
    (b"ok\xffok", 2, 0xFF),
    (b"\xc0\xafx", 0, 0xC0),  # overlong encoding of '/'
    (b"a\x80b", 1, 0x80),  # a lone continuation byte
    (b"ab\xed\xa0\x80", 2, 0xED),  # an encoded surrogate
    (b"\xf4\x90\x80\x80", 0, 0xF4),  # above U+10FFFF
    (b"a\xe2\x82Zzz", 1, 0xE2),  # a character cut short inside the file
]


def test_invalid_bytes_are_located(fs_session, workspace):
    for i, (data, offset, byte) in enumerate(INVALID):
        (workspace / f"bad{i}").write_bytes(data)
        e = err(fs_session, {"path": f"bad{i}"}, "not_utf8")
        assert e.details["offset"] == offset and e.details["byte"] == byte and e.details["reason"] == "invalid_byte"
        assert f"at offset {offset}: byte 0x{byte:02x}" in e.message
        # a range that avoids the bad byte is fine
        if offset > 0:
            assert ok(fs_session, {"path": f"bad{i}", "limit": offset})["content"].encode() == data[:offset]


def test_file_ending_inside_a_character(fs_session, workspace):
    (workspace / "cut").write_bytes(b"ab\xe2\x82")
    e = err(fs_session, {"path": "cut"}, "not_utf8")
    assert e.details == {"offset": 2, "reason": "incomplete_at_end_of_file"}
    assert "ends with an incomplete 3-byte UTF-8 character at offset 2" in e.message


def test_configured_maximum_cuts_on_a_character_boundary(open_session, workspace, resolver_env):
    session = open_session({"limits": {"read_max_bytes": 8}}, env=resolver_env)
    (workspace / "t.txt").write_bytes(TEXT)
    for args in ({"path": "t.txt"}, {"path": "t.txt", "limit": 1000}):
        v = ok(session, args)
        assert v["content"] == "aé€" and v["bytes"] == 6 and v["total_bytes"] == 11
        assert v["truncated"] and v["truncated_by"] == "read_max_bytes" and v["next_offset"] == 6
    v = ok(session, {"path": "t.txt", "offset": 6})
    assert v["content"] == "😀z" and not v["truncated"]
    v = ok(session, {"path": "t.txt", "offset": 1, "limit": 2})
    assert v["content"] == "é" and v["truncated_by"] == "limit"
    (workspace / "big.txt").write_bytes(b"x" * 20)
    v = ok(session, {"path": "big.txt"})
    assert v["bytes"] == 8 and v["truncated_by"] == "read_max_bytes" and v["next_offset"] == 8


def test_character_longer_than_the_maximum(open_session, workspace):
    session = open_session({"limits": {"read_max_bytes": 3}})
    (workspace / "emoji").write_bytes("😀".encode())
    e = err(session, {"path": "emoji"}, "too_large")
    assert "offset 0" in e.message and "read_max_bytes" in e.message


# -- containment and file kinds ------------------------------------------------------------------------------


def test_symlinks_out_are_refused(fs_session, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("OUTSIDE")
    sibling = tmp_path / "ws-sibling"  # shares the workspace's name as a prefix
    sibling.mkdir()
    (sibling / "secret").write_text("SIBLING")
    os.symlink("../outside", workspace / "dir-out")
    os.symlink(str(outside), workspace / "dir-abs")
    os.symlink("../outside/secret", workspace / "file-out")
    os.symlink(str(outside / "secret"), workspace / "file-abs")
    os.symlink("../ws-sibling/secret", workspace / "sibling")
    os.symlink("file-out", workspace / "chain")
    for path in ("dir-out/secret", "dir-abs/secret", "file-out", "file-abs", "sibling", "chain",
                 "../outside/secret", "../ws-sibling/secret"):
        e = err(fs_session, {"path": path}, "outside_workspace")
        assert "leaves the workspace" in e.message, e.message


def test_symlinks_inside_work(fs_session, workspace):
    (workspace / "real").mkdir()
    (workspace / "real" / "f").write_text("content")
    os.symlink("real", workspace / "dir-link")
    os.symlink("dir-link/f", workspace / "chain-1")
    os.symlink("chain-1", workspace / "chain-2")
    for path in ("dir-link/f", "chain-1", "chain-2"):
        assert ok(fs_session, {"path": path})["content"] == "content"


@pytest.mark.timeout(60)
def test_fifo_and_devices_behind_symlinks_never_hang(fs_session, workspace, tmp_path):
    os.mkfifo(workspace / "fifo")
    os.symlink("fifo", workspace / "fifo-link")
    os.symlink("/dev/zero", workspace / "zero-abs")
    os.symlink("../../../../../../../../dev/zero", workspace / "zero-rel")
    started = time.monotonic()
    for path in ("fifo", "fifo-link"):
        e = err(fs_session, {"path": path}, "not_a_regular_file")
        assert "FIFO" in e.message
    for path in ("zero-abs", "zero-rel"):
        err(fs_session, {"path": path}, "outside_workspace")
    try:
        os.mknod(workspace / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        pass
    else:
        os.symlink("zero", workspace / "zero-link")
        for path in ("zero", "zero-link"):
            assert "character device" in err(fs_session, {"path": path}, "not_a_regular_file").message
    err(fs_session, {"path": "."}, "invalid_path")
    (workspace / "dir").mkdir()
    assert "directory" in err(fs_session, {"path": "dir"}, "not_a_regular_file").message
    assert time.monotonic() - started < 30


def test_sparse_2gib_file_slice_at_1gib(fs_session, workspace):
    size, offset = 2 << 30, 1 << 30
    with open(workspace / "sparse.bin", "wb") as f:
        f.truncate(size)
        f.seek(offset + 100)
        f.write(b"MARK")
    v = ok(fs_session, {"path": "sparse.bin", "offset": offset, "limit": 65536})
    assert v["total_bytes"] == size and v["bytes"] == 65536 and len(v["content"]) == 65536
    assert v["content"][100:104] == "MARK" and v["content"].count("\0") == 65536 - 4
    assert v["truncated"] and v["truncated_by"] == "limit" and v["next_offset"] == offset + 65536
    assert v["sha256"] is None  # over SHA256_MAX_FILE_BYTES: only the slice is read, nothing is hashed


# -- sha256: read, then write with expected_sha256 -------------------------------------------------------------


def test_sha256_of_the_whole_file_then_write_with_it(fs_session, workspace):
    from peon.tools.read import SHA256_MAX_FILE_BYTES

    # Whatever the range, sha256 describes the whole file.
    data = ("line of text\n" * 30000).encode()
    (workspace / "f.txt").write_bytes(data)
    whole = hashlib.sha256(data).hexdigest()
    for args in ({"path": "f.txt"}, {"path": "f.txt", "offset": 13, "limit": 26}, {"path": "f.txt", "limit": 0},
                 {"path": "f.txt", "offset": len(data)}):
        assert ok(fs_session, args)["sha256"] == whole, args
    assert ok(fs_session, {"path": "f.txt", "offset": 13, "limit": 26})["content"] == "line of text\n" * 2
    (workspace / "empty").write_bytes(b"")
    assert ok(fs_session, {"path": "empty"})["sha256"] == hashlib.sha256(b"").hexdigest()

    # read, then write with its sha256: succeeds; an external change in between: stale.
    (workspace / "g.txt").write_text("version 1\n")
    first = ok(fs_session, {"path": "g.txt"})
    done = expect_ok(fs_session, "write", {"path": "g.txt", "content": "version 2\n", "mode": "replace",
                                            "expected_sha256": first["sha256"]})
    second = ok(fs_session, {"path": "g.txt"})
    assert second["content"] == "version 2\n" and second["sha256"] == done["sha256"] != first["sha256"]
    (workspace / "g.txt").write_text("changed by someone else\n")
    e = expect_error(fs_session, "write", {"path": "g.txt", "content": "version 3\n", "mode": "replace",
                                            "expected_sha256": second["sha256"]}, "stale")
    assert e.details["actual_sha256"] == hashlib.sha256(b"changed by someone else\n").hexdigest()
    assert (workspace / "g.txt").read_text() == "changed by someone else\n"

    # Files up to the bound are hashed, larger ones are not (only their range is read).
    for name, size in (("at-bound", SHA256_MAX_FILE_BYTES), ("over-bound", SHA256_MAX_FILE_BYTES + 1)):
        with open(workspace / name, "wb") as f:
            f.truncate(size)
    v = ok(fs_session, {"path": "at-bound", "offset": 100, "limit": 10})
    zeros = hashlib.sha256()
    chunk = bytes(1 << 20)
    for _ in range(SHA256_MAX_FILE_BYTES >> 20):
        zeros.update(chunk)
    assert v["sha256"] == zeros.hexdigest() and v["content"] == "\0" * 10
    v = ok(fs_session, {"path": "over-bound", "offset": 100, "limit": 10})
    assert v["sha256"] is None and v["content"] == "\0" * 10


def test_invalid_paths(fs_session):
    cases = {"": "invalid_path", "/etc/passwd": "invalid_path", "a\u0000b": "invalid_path",
             "a/../../x": "outside_workspace", "..": "outside_workspace", "dir/": "invalid_path"}
    for path, code in cases.items():
        e = err(fs_session, {"path": path}, code)
        assert repr(path) in e.message, e.message
    e = err(fs_session, {"path": "nope.txt"}, "not_found")
    assert e.message == "path 'nope.txt' does not exist"


# -- risk ----------------------------------------------------------------------------------------------------


def test_secret_like_reads_ask_and_others_do_not(open_session, workspace):
    requests = []

    def approver(request):
        requests.append(request)
        return "allow_once"

    session = open_session({"approval": {"read_only": "allow", "filesystem": "ask"}}, approver=approver)
    (workspace / ".env").write_text("TOKEN=1\n")
    (workspace / "notes.txt").write_text("hi\n")
    assert ok(session, {"path": "notes.txt"})["content"] == "hi\n"
    assert requests == []
    assert ok(session, {"path": ".env"})["content"] == "TOKEN=1\n"
    assert len(requests) == 1
    request = requests[0]
    assert request["tool"] == "read" and request["risk"] == "filesystem"
    assert "secret-like path" in request["risk_reason"] and "'.env'" in request["risk_reason"]
    assert "config/secret_paths.txt:" in request["risk_reason"]


def test_credential_files_ask_and_negative_controls_do_not(open_session, workspace):
    session = open_session({"approval": {"read_only": "allow", "filesystem": "deny"}})
    (workspace / ".docker").mkdir()
    for name in (".my.cnf", ".s3cfg", ".dockercfg", ".docker/config.json", "vault.kdbx", "server.ppk",
                 "secrets.yml", "office.ovpn", "wg0.conf", ".gitconfig", "wallet.dat",
                 "README.md", "id_rsa.pub", ".env.example", "environment.md", "secrets.md"):
        (workspace / name).write_text("x")
    for name in (".my.cnf", ".s3cfg", ".dockercfg", ".docker/config.json", "vault.kdbx", "server.ppk",
                 "secrets.yml", "office.ovpn", "wg0.conf", ".gitconfig", "wallet.dat"):
        e = err(session, {"path": name}, "denied")
        assert "secret-like path" in e.message, name
    for name in ("README.md", "id_rsa.pub", ".env.example", "environment.md", "secrets.md"):
        assert ok(session, {"path": name})["content"] == "x", name


def test_secret_like_read_is_denied_without_approver(open_session, workspace):
    session = open_session({"approval": {"read_only": "allow", "filesystem": "ask"}})
    (workspace / "id_rsa").write_text("KEY")
    r = session.call("read", {"path": "id_rsa"})
    assert r.error.code == "denied" and "secret-like" in r.error.message


def test_user_extends_the_secret_list(open_session, workspace, tmp_path):
    config_home = tmp_path / "xdg"
    (config_home / "peon").mkdir(parents=True)
    (config_home / "peon" / "secret_paths.txt").write_text("# mine\n*.private\n!.env.ci\n")
    session = open_session({"approval": {"read_only": "allow", "filesystem": "deny"}},
                           env={"XDG_CONFIG_HOME": str(config_home)})
    (workspace / "notes.private").write_text("x")
    (workspace / ".env.ci").write_text("CI=1")
    r = session.call("read", {"path": "notes.private"})
    assert r.error.code == "denied" and "'*.private'" in r.error.message
    assert str(config_home / "peon" / "secret_paths.txt") + ":2" in r.error.message
    assert ok(session, {"path": ".env.ci"})["content"] == "CI=1"


def test_invalid_user_secret_list_is_a_config_error(open_session, workspace, tmp_path):
    config_home = tmp_path / "xdg"
    (config_home / "peon").mkdir(parents=True)
    (config_home / "peon" / "secret_paths.txt").write_text("/etc/shadow\n")
    session = open_session(env={"XDG_CONFIG_HOME": str(config_home)})
    (workspace / "a").write_text("x")
    r = session.call("read", {"path": "a"})
    assert r.error.code == "config_invalid" and "secret_paths.txt:1" in r.error.message


def test_tool_is_listed_with_output_schema(fs_session):
    tool = next(t for t in fs_session.tools() if t["name"] == "read")
    assert tool["risk"] == "read_only"
    assert tool["output_schema"]["required"][:3] == ["path", "content", "offset"]
