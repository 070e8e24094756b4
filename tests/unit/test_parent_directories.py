"""A create's missing directories, without a session: the resolution names only directories typed in the
path, the worker makes them beneath the approved directory and never through a symlink, reports the ones
it made, removes them when the file is not installed, and refuses approved details that do not add up."""

from __future__ import annotations

import hashlib
import os

import pytest

from peon.core.errors import ToolError
from peon.core.paths import parse_file_path
from peon.core.agent_control import created_entry as created_control_entry
from peon.tools.shared.target import approved_expectation, resolve_for
from peon.workers import fs


@pytest.fixture
def ws(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def root(ws):
    fd = fs.open_root(ws)
    yield fd
    os.close(fd)


def approved_create(root, text):
    """What the supervisor approves for a create of ``text`` (its resolution's details)."""
    resolution = resolve_for(root, parse_file_path(text), "create")
    details = {"path": resolution.path, "directory_id": str(resolution.directory)}
    if resolution.missing:
        details["create_directories"] = resolution.created_directories
    return details


def write(root, text, data=b"x", approved=None):
    path = parse_file_path(text)
    expected = approved_expectation(approved or approved_create(root, text), path, "create", root)
    return fs.write_file(root, path, data, create=True, expected_sha256=None, resolver=fs.Resolver.WALK,
                         expected=expected)


def caught(fn, *args, **kwargs):
    with pytest.raises(ToolError) as info:
        fn(*args, **kwargs)
    return info.value


def test_the_resolution_names_only_typed_directories(ws, root):
    (ws / "a").mkdir()
    resolution = resolve_for(root, parse_file_path("a/b/c/f.py"), "create")
    assert resolution.missing == ("b", "c") and resolution.created_directories == ["a/b", "a/b/c"]
    assert resolution.path == "a/b/c/f.py" and resolution.file is None
    assert resolution.directory == fs.FileId.of(os.stat(ws / "a"))
    os.symlink("gone/deeper", ws / "link")  # a missing directory a symlink leads to is never made
    error = caught(resolve_for, root, parse_file_path("link/f.py"), "create")
    assert error.code.value == "not_found" and "does not create" not in error.message
    os.symlink("a", ws / "to-a")  # a symlink to a directory that exists: the new ones go beneath its target
    assert resolve_for(root, parse_file_path("to-a/new/f.py"), "create").created_directories == ["a/new"]
    assert caught(resolve_for, root, parse_file_path("x/f.py"), "replace").code.value == "not_found"  # only a create


def test_the_worker_makes_reports_and_fsyncs_the_directories(ws, root):
    outcome = write(root, "pkg/sub/mod.py", b"A = 1\n")
    assert outcome.created_directories == ("pkg", "pkg/sub")
    assert (ws / "pkg" / "sub" / "mod.py").read_bytes() == b"A = 1\n"
    assert write(root, "pkg/sub/other.py").created_directories == ()


def test_a_directory_made_meanwhile_is_entered_and_not_reported(ws, root):
    approved = approved_create(root, "pkg/sub/mod.py")
    (ws / "pkg").mkdir()  # a parallel call made it after this one was approved
    assert write(root, "pkg/sub/mod.py", approved=approved).created_directories == ("pkg/sub",)


def test_a_symlink_planted_where_a_directory_was_to_be_made_is_refused(ws, root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    approved = approved_create(root, "pkg/sub/mod.py")
    path = parse_file_path("pkg/sub/mod.py")
    expected = approved_expectation(approved, path, "create", root)
    (ws / "pkg").mkdir()
    os.symlink(str(outside), ws / "pkg" / "sub")
    error = caught(fs.write_file, root, path, b"x", create=True, expected_sha256=None, resolver=fs.Resolver.WALK,
                   expected=expected)
    assert error.code.value == "changed_since_approval"
    assert "'sub'" in error.message and "symbolic link" in error.message
    assert os.listdir(outside) == []


def test_the_approved_directory_must_be_the_one_they_go_in(ws, root):
    (ws / "a").mkdir()
    approved = approved_create(root, "a/new/f.py")
    path = parse_file_path("a/new/f.py")
    expected = approved_expectation(approved, path, "create", root)
    os.rename(ws / "a", ws / "a-old")
    (ws / "a").mkdir()  # another directory under the same name
    error = caught(fs.write_file, root, path, b"x", create=True, expected_sha256=None, resolver=fs.Resolver.WALK,
                   expected=expected)
    assert error.code.value == "changed_since_approval" and not (ws / "a" / "new").exists()


def test_details_that_do_not_add_up_are_refused(ws, root):
    path = parse_file_path("pkg/sub/mod.py")
    approved = approved_create(root, "pkg/sub/mod.py")
    for bad in (["pkg"], ["other", "other/sub"], ["pkg/sub"], "pkg", [], ["pkg", "pkg/sub", "pkg/sub/mod.py"]):
        error = caught(approved_expectation, {**approved, "create_directories": bad}, path, "create", root)
        assert error.code.value == "changed_since_approval", bad
    (ws / "elsewhere").mkdir()
    approved_then = approved_create(root, "elsewhere/f.py")  # approved without directories to make
    os.rmdir(ws / "elsewhere")
    error = caught(approved_expectation, approved_then, parse_file_path("elsewhere/f.py"), "create", root)
    assert error.code.value == "changed_since_approval" and "no longer exists" in error.message


def test_a_file_not_installed_leaves_no_directory(ws, root):
    approved = approved_create(root, "pkg/sub/mod.py")
    path = parse_file_path("pkg/sub/mod.py")
    expected = approved_expectation(approved, path, "create", root)
    real = fs.write.install_new

    def racing(dirfd, temp, name, path, use_link):
        (ws / "pkg" / "sub" / "mod.py").write_bytes(b"someone else's")  # appears just before the install
        real(dirfd, temp, name, path, use_link)

    fs.write.install_new = racing
    try:
        error = caught(fs.write_file, root, path, b"x", create=True, expected_sha256=None,
                       resolver=fs.Resolver.WALK, expected=expected)
    finally:
        fs.write.install_new = real
    assert error.code.value == "already_exists"
    os.unlink(ws / "pkg" / "sub" / "mod.py")
    write(root, "other/f.py")
    # A failed multi-file change removes the directories it made for its new files, innermost first.
    changes = [fs.Change(parse_file_path("new/a/x.py"), b"x", True,
                         approved_expectation(approved_create(root, "new/a/x.py"), parse_file_path("new/a/x.py"),
                                              "create", root), None),
               fs.Change(parse_file_path("new/a/y.py"), b"y", True,
                         approved_expectation(approved_create(root, "new/a/y.py"), parse_file_path("new/a/y.py"),
                                              "create", root), None),
               fs.Change(parse_file_path("other/f.py"), b"z", False, None, hashlib.sha256(b"not it").hexdigest())]
    made: list[str] = []
    assert caught(fs.apply_changes, root, changes, fs.Resolver.WALK, made=made).code.value == "stale"
    assert not (ws / "new").exists() and made == []
    changes.pop()
    fs.apply_changes(root, changes, fs.Resolver.WALK, made=made)
    assert made == ["new", "new/a"] and (ws / "new" / "a" / "y.py").read_bytes() == b"y"


def test_a_new_directory_that_is_or_holds_an_agent_control_path():
    protected = [".git/hooks", ".claude", ".github/workflows"]
    assert created_control_entry([".git"], protected) == (".git/hooks", ".git")
    assert created_control_entry(["x", "x/.claude"], protected) is None  # only at the workspace's top
    assert created_control_entry([".claude", ".claude/agents"], protected) == (".claude", ".claude")
    assert created_control_entry([".github/workflows/ci"], protected) == (".github/workflows", ".github/workflows/ci")
    assert created_control_entry(["docs", "docs/new"], protected) is None
    assert created_control_entry([".GitHub"], protected) == (".github/workflows", ".GitHub")  # case-folding systems
    anywhere = ["**/.git", "**/.github/workflows"]
    assert created_control_entry(["lib", "lib/.git"], anywhere) == ("**/.git", "lib/.git")
    assert created_control_entry(["lib/.github"], anywhere) == ("**/.github/workflows", "lib/.github")
