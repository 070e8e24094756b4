"""``apply_patch`` through a real session: every file rated before anything is written, all files or none."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers import Recorder, expect_error, expect_ok
from helpers.files import snapshot
from peon.core.paths import TEMP_PREFIX


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patch(*body: str) -> str:
    return "*** Begin Patch\n" + "".join(line + "\n" for line in body) + "*** End Patch\n"


def test_one_patch_adds_updates_moves_and_deletes(fs_session, workspace):
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("import os\n\ndef main():\n    return 1\n")
    os.chmod(workspace / "src" / "app.py", 0o750)
    (workspace / "old_name.txt").write_text("keep me\nchange me\n")
    (workspace / "obsolete.txt").write_text("bye\n")
    value = expect_ok(fs_session, "apply_patch", {"patch": patch(
        "*** Add File: src/new_module.py", "+VALUE = 42",
        "*** Update File: src/app.py", "@@ def main():", "-    return 1", "+    return 2",
        "*** Update File: old_name.txt", "*** Move to: src/new_name.txt", " keep me", "-change me", "+changed",
        "*** Delete File: obsolete.txt")})
    assert (workspace / "src" / "new_module.py").read_text() == "VALUE = 42\n"
    assert (workspace / "src" / "app.py").read_text() == "import os\n\ndef main():\n    return 2\n"
    assert stat.S_IMODE((workspace / "src" / "app.py").stat().st_mode) == 0o750
    assert (workspace / "src" / "new_name.txt").read_text() == "keep me\nchanged\n"
    assert not (workspace / "old_name.txt").exists() and not (workspace / "obsolete.txt").exists()
    assert value["files"] == [
        {"path": "src/new_module.py", "action": "add", "move_to": None, "sha256": sha(b"VALUE = 42\n")},
        {"path": "src/app.py", "action": "update", "move_to": None,
         "sha256": sha((workspace / "src" / "app.py").read_bytes())},
        {"path": "old_name.txt", "action": "move", "move_to": "src/new_name.txt", "sha256": sha(b"keep me\nchanged\n")},
        {"path": "obsolete.txt", "action": "delete", "move_to": None, "sha256": None},
    ] and value["fuzzy_hunks"] == 0
    assert not [p for p in (workspace / "src").iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_a_patch_failing_on_its_third_file_changes_nothing(fs_session, workspace):
    (workspace / "a.txt").write_text("a1\n")
    (workspace / "b.txt").write_text("b1\n")
    (workspace / "c.txt").write_text("c1\n")
    before = snapshot(workspace)
    error = expect_error(fs_session, "apply_patch", {"patch": patch(
        "*** Update File: a.txt", "-a1", "+a2",
        "*** Delete File: b.txt",
        "*** Update File: c.txt", "-not in the file", "+c2",
        "*** Add File: d.txt", "+d")}, "not_found")
    assert error.details["path"] == "c.txt" and error.details["rule"] == "context"
    assert snapshot(workspace) == before


def test_added_and_moved_files_get_their_missing_directories(fs_session, workspace):
    """`*** Add File: pkg/sub/mod.py` in an empty workspace succeeds; a move into a new directory too; each
    directory made is reported once, and a patch that fails makes none."""
    value = expect_ok(fs_session, "apply_patch", {"patch": patch(
        "*** Add File: pkg/sub/mod.py", "+A = 1", "*** Add File: pkg/sub/__init__.py", "+")})
    assert value["created_directories"] == ["pkg", "pkg/sub"]
    assert (workspace / "pkg" / "sub" / "mod.py").read_text() == "A = 1\n"
    value = expect_ok(fs_session, "apply_patch", {"patch": patch(
        "*** Update File: pkg/sub/mod.py", "*** Move to: lib/core/mod.py", "-A = 1", "+A = 2")})
    assert value["created_directories"] == ["lib", "lib/core"] and not (workspace / "pkg" / "sub" / "mod.py").exists()
    before = snapshot(workspace)
    expect_error(fs_session, "apply_patch", {"patch": patch(
        "*** Add File: fresh/dir/a.py", "+a", "*** Update File: lib/core/mod.py", "-not in the file", "+x")},
        "not_found")
    assert snapshot(workspace) == before and not (workspace / "fresh").exists()


def test_an_install_failing_midway_puts_back_the_files_already_changed(fs_session, workspace):
    """The third file's destination appears between staging and install (a racing create): the first two,
    already installed, are restored."""
    (workspace / "a.txt").write_text("a1\n")
    (workspace / "b.txt").write_text("b1\n")
    (workspace / "sub").mkdir()
    before = snapshot(workspace)
    os.chmod(workspace / "sub", 0o555)  # the add into sub/ fails at install (EACCES), after a and b changed
    try:
        if os.geteuid() == 0:
            pytest.skip("root ignores directory permissions")
        expect_error(fs_session, "apply_patch", {"patch": patch(
            "*** Update File: a.txt", "-a1", "+a2", "*** Delete File: b.txt", "*** Add File: sub/c.txt", "+c")},
            "io_error")
    finally:
        os.chmod(workspace / "sub", 0o755)
    assert snapshot(workspace) == before


def test_every_file_is_rated_and_shown_before_anything_is_written(open_session, workspace, tmp_path):
    approver = Recorder(otherwise="deny")
    session = open_session({"approval": {"filesystem": "ask"}}, approver=approver)
    (workspace / "config").mkdir()
    (workspace / "config" / "keys.pem").write_text("k\n")
    os.symlink("config/keys.pem", workspace / "notes.txt")
    (workspace / "a.txt").write_text("a\n")
    text = patch("*** Update File: notes.txt", "-k", "+K", "*** Update File: a.txt", "*** Move to: b.txt", "-a", "+b")
    expect_error(session, "apply_patch", {"patch": text}, "denied")
    (request,) = approver.requests
    files = request["details"]["files"]
    assert files[0]["action"] == "update" and files[0]["path"] == "config/keys.pem"
    assert files[0]["typed_path"] == "notes.txt" and "file_id" in files[0]
    assert files[1]["action"] == "move" and files[1]["path"] == "a.txt" and files[1]["move_to"]["path"] == "b.txt"
    assert "secret-like path" in request["risk_reason"] and "'notes.txt' resolves to 'config/keys.pem'" in \
        request["risk_reason"]
    assert (workspace / "config" / "keys.pem").read_text() == "k\n" and (workspace / "a.txt").exists()

    # Paths that cannot be written fail before anyone is asked.
    (tmp_path / "outside").mkdir()
    os.symlink("../outside", workspace / "out")
    approver.requests.clear()
    for body, code in ((("*** Add File: out/x.txt", "+x"), "outside_workspace"),
                       (("*** Add File: a.txt", "+x"), "already_exists"),
                       (("*** Delete File: missing.txt",), "not_found"),
                       (("*** Add File: ../x.txt", "+x"), "invalid_patch"),
                       (("*** Update File: a.txt", "*** Move to: out/a.txt", "-a", "+b"), "outside_workspace")):
        expect_error(session, "apply_patch", {"patch": patch(*body)}, code)
    assert approver.requests == [] and os.listdir(tmp_path / "outside") == []


# -- fuzzed patches: nothing outside, never a partial patch ------------------------------------------------------

NAMES = st.sampled_from(["a.txt", "b.txt", "d/c.txt", "d/e/f.txt", "out/x.txt", "link.txt", "dlink/c.txt",
                         "../esc.txt", "d/../a.txt", "new.txt", ".peon-tmp-0123456789abcdef", "d"])
LINES = st.lists(st.sampled_from(["a", "b", "one", "two", "", "  x", "café"]), min_size=0, max_size=4)


@st.composite
def operations(draw):
    kind = draw(st.sampled_from(["add", "delete", "update", "move"]))
    name = draw(NAMES)
    if kind == "add":
        return [f"*** Add File: {name}", *("+" + line for line in draw(LINES))]
    if kind == "delete":
        return [f"*** Delete File: {name}"]
    hunk = [draw(st.sampled_from([" ", "-", "+"])) + line for line in draw(LINES)] or ["+z"]
    move = [f"*** Move to: {draw(NAMES)}"] if kind == "move" else []
    return [f"*** Update File: {name}", *move, *(["@@"] if draw(st.booleans()) else []), *hunk]


@pytest.fixture(scope="module")
def fuzz_world(tmp_path_factory):
    import peon
    from helpers import Leftovers
    from helpers import ALLOW_ALL

    base = tmp_path_factory.mktemp("fuzz")
    leftovers = Leftovers(tmp_path_factory.mktemp("home"))
    workspace = base / "ws"
    workspace.mkdir()
    session = peon.Session(workspace, ALLOW_ALL, env=leftovers.env(), state_dir=base / "state")
    yield base, workspace, session
    session.close()
    assert leftovers.kill_all() == []


def populate(base: Path, workspace: Path) -> None:
    import shutil

    for entry in list(workspace.iterdir()) + list(base.glob("outside*")):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    (base / "outside").mkdir()
    (base / "outside" / "x.txt").write_text("one\ntwo\n")
    (workspace / "a.txt").write_text("a\nb\none\n")
    (workspace / "b.txt").write_text("two\n")
    (workspace / "d" / "e").mkdir(parents=True)
    (workspace / "d" / "c.txt").write_text("café\n  x\n")
    (workspace / "d" / "e" / "f.txt").write_text("\n")
    os.symlink("../outside", workspace / "out")
    os.symlink("a.txt", workspace / "link.txt")
    os.symlink("d", workspace / "dlink")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(operations(), min_size=1, max_size=4))
def test_fuzzed_patches_never_write_outside_or_leave_a_partial_patch(fuzz_world, ops):
    base, workspace, session = fuzz_world
    populate(base, workspace)
    outside_before = snapshot(base / "outside")
    before = snapshot(workspace)
    text = patch(*[line for op in ops for line in op])
    result = session.call("apply_patch", {"patch": text})
    event("applied" if result.ok else result.error.code)
    assert snapshot(base / "outside") == outside_before and not (base / "esc.txt").exists()
    after = snapshot(workspace)
    assert not [k for k in after if Path(k).name.startswith(TEMP_PREFIX)], after
    if not result.ok:
        assert result.error.code in {"invalid_patch", "not_found", "already_exists", "outside_workspace",
                                     "not_a_regular_file", "invalid_path", "not_a_directory"}, result.error
        assert after == before, (text, result.error)
        return
    # Success: exactly the files the result names changed, each to the content its sha256 names.
    touched = {f["path"] for f in result.value["files"]} | {f["move_to"] for f in result.value["files"] if f["move_to"]}
    for entry in result.value["files"]:
        final = entry["move_to"] or entry["path"]
        if entry["sha256"] is not None:
            assert sha((workspace / final).read_bytes()) == entry["sha256"]
    resolved = {os.path.realpath(workspace / t) for t in touched}
    for key in set(before) | set(after):
        if before.get(key) != after.get(key):
            assert os.path.realpath(workspace / key) in resolved or key in touched, (key, text)
