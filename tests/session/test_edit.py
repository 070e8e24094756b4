"""``edit`` through a real session (supervisor + workers), with both path resolvers."""

from __future__ import annotations

import hashlib
import os
import stat
import unicodedata

import pytest

from helpers import Recorder, expect_error, expect_ok
from peon.core.paths import TEMP_PREFIX


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def one(old: str, new: str, **extra) -> dict:
    return {"old_string": old, "new_string": new, **extra}


@pytest.fixture
def asking(open_session, resolver_env):
    """A session (per resolver) that asks about every call, with a recording approver."""
    approver = Recorder()
    session = open_session({"approval": {"read_only": "ask", "filesystem": "ask"}}, env=resolver_env,
                           approver=approver)
    return session, approver


def test_edit_replaces_keeps_mode_and_returns_sha_and_diff(fs_session, workspace):
    target = workspace / "app.py"
    target.write_text("def main():\n    print('hi')\n\nmain()\n")
    os.chmod(target, 0o751)
    before = target.read_bytes()
    value = expect_ok(fs_session, "edit", {"path": "./app.py", "edits": [one("print('hi')", "print('bye')")],
                                           "expected_sha256": sha(before).upper()})
    after = target.read_bytes()
    assert after == b"def main():\n    print('bye')\n\nmain()\n"
    assert value["sha256"] == sha(after) and value["previous_sha256"] == sha(before) and value["bytes"] == len(after)
    assert value["path"] == "app.py" and value["replacements"] == 1 and value["line_ending"] == "lf"
    assert value["diff"] == ("--- a/app.py\n+++ b/app.py\n@@ -1,4 +1,4 @@\n def main():\n-    print('hi')\n"
                             "+    print('bye')\n \n main()\n")
    assert (value["lines_added"], value["lines_removed"], value["diff_truncated"]) == (1, 1, False)
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert not [p for p in workspace.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_crlf_file_keeps_its_line_endings(fs_session, workspace):
    target = workspace / "win.txt"
    target.write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    value = expect_ok(fs_session, "edit", {"path": "win.txt", "edits": [one("alpha\nbeta\n", "ALPHA\nBETA\nextra\n")]})
    assert target.read_bytes() == b"ALPHA\r\nBETA\r\nextra\r\ngamma\r\n" and value["line_ending"] == "crlf"


def test_all_or_nothing_and_errors_name_the_edit(fs_session, workspace):
    target = workspace / "f.txt"
    target.write_text("one\ntwo\none\n")
    error = expect_error(fs_session, "edit", {"path": "f.txt", "edits": [one("two", "2"), one("one", "1")]},
                         "ambiguous")
    assert error.details == {"edit": 1, "occurrences": 2, "lines": [1, 3]}
    error = expect_error(fs_session, "edit", {"path": "f.txt", "edits": [one("two", "2"), one("thre", "3")]},
                         "not_found")
    assert error.details["edit"] == 1 and error.details["closest_line"] in (1, 3)
    assert target.read_text() == "one\ntwo\none\n"
    value = expect_ok(fs_session, "edit", {"path": "f.txt", "edits": [one("two", "2"), one("one", "1",
                                                                                            replace_all=True)]})
    assert target.read_text() == "1\n2\n1\n" and value["replacements"] == 3


def test_stale_when_the_file_changed_since_it_was_read(fs_session, workspace):
    target = workspace / "f.txt"
    target.write_text("v1\n")
    read = expect_ok(fs_session, "read", {"path": "f.txt"})
    target.write_text("v2 by the user's editor\n")
    error = expect_error(fs_session, "edit", {"path": "f.txt", "edits": [one("v", "w")],
                                              "expected_sha256": read["sha256"]}, "stale")
    assert error.details == {"expected_sha256": read["sha256"], "actual_sha256": sha(b"v2 by the user's editor\n")}
    assert target.read_text() == "v2 by the user's editor\n"


def test_approval_shows_the_diff_and_a_change_after_it_is_stale(asking, workspace):
    session, approver = asking
    target = workspace / "f.txt"
    target.write_text("keep\nold line\nkeep\n")
    expect_ok(session, "edit", {"path": "f.txt", "edits": [one("old line", "new line")]})
    (request,) = approver.requests
    assert request["risk"] == "filesystem" and request["details"]["path"] == "f.txt"
    assert "-old line\n+new line\n" in request["details"]["diff"]
    assert request["details"]["sha256"] == sha(b"keep\nold line\nkeep\n")

    def edit_meanwhile(request):  # the user's editor saves while the approver looks at the diff
        target.write_text("keep\nnew line\nold line\nkeep\n")
        return "allow_once"

    approver.answers.append(edit_meanwhile)
    error = expect_error(session, "edit", {"path": "f.txt", "edits": [one("new line\n", "")]}, "stale")
    assert "changed after its diff was shown" in error.message
    assert target.read_text() == "keep\nnew line\nold line\nkeep\n"


def test_symlinked_file_is_rated_and_edited_by_its_resolved_path(asking, workspace):
    session, approver = asking
    (workspace / "config").mkdir()
    real = workspace / "config" / ".env"
    real.write_text("TOKEN=old\n")
    os.symlink("config/.env", workspace / "settings.txt")
    approver.otherwise = "deny"
    expect_error(session, "edit", {"path": "settings.txt", "edits": [one("old", "new")]}, "denied")
    (request,) = approver.requests
    assert request["details"]["path"] == "config/.env" and request["details"]["typed_path"] == "settings.txt"
    assert "secret-like path" in request["risk_reason"] and "'settings.txt' resolves to 'config/.env'" in \
        request["risk_reason"]
    approver.otherwise = "allow_once"
    expect_ok(session, "edit", {"path": "settings.txt", "edits": [one("old", "new")]})
    assert real.read_text() == "TOKEN=new\n" and os.path.islink(workspace / "settings.txt")


def test_unicode_normalisation_is_refused_with_a_hint(fs_session, workspace):
    target = workspace / "menu.txt"
    target.write_text(unicodedata.normalize("NFD", "crème brûlée\n"))
    error = expect_error(fs_session, "edit", {"path": "menu.txt", "edits": [one("crème brûlée", "tea")]}, "not_found")
    assert error.details["rule"] == "unicode_normalization" and "NFC" in error.details["hint"]
    expect_ok(fs_session, "edit", {"path": "menu.txt", "edits": [one(unicodedata.normalize("NFD", "crème"), "tea")]})
    assert target.read_text().startswith("tea ")


def test_refusals_before_anything_is_written(fs_session, workspace, tmp_path):
    (workspace / "bin.dat").write_bytes(b"\xff\xfe")
    (tmp_path / "outside.txt").write_text("x")
    os.symlink("../outside.txt", workspace / "out.txt")
    expect_error(fs_session, "edit", {"path": "bin.dat", "edits": [one("a", "b")]}, "not_utf8")
    expect_error(fs_session, "edit", {"path": "missing.txt", "edits": [one("a", "b")]}, "not_found")
    expect_error(fs_session, "edit", {"path": "out.txt", "edits": [one("x", "y")]}, "outside_workspace")
    expect_error(fs_session, "edit", {"path": "bin.dat", "edits": []}, "invalid_input")
    assert (tmp_path / "outside.txt").read_text() == "x"


def test_a_50_mib_file(open_session, workspace):
    session = open_session({"limits": {"max_timeout_seconds": 120}})
    line = b"0123456789abcdef" * 4 + b"\n"  # 65 bytes
    body = line * (50 * (1 << 20) // len(line))
    target = workspace / "big.log"
    target.write_bytes(body[: len(body) // 2] + b"THE MIDDLE LINE\n" + body[len(body) // 2:])
    value = expect_ok(session, "edit", {"path": "big.log", "edits": [one("THE MIDDLE LINE\n", "the middle line\n")]})
    data = target.read_bytes()
    assert len(data) > 50_000_000 and data.count(b"the middle line\n") == 1 and value["sha256"] == sha(data)
    assert "-THE MIDDLE LINE\n+the middle line\n" in value["diff"] and not value["diff_truncated"]
