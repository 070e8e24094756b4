"""read and write resolved without a session: one resolution per call, the worker's expectation failing closed
without a well-formed approval, a create carrying no file identity, the pinned root used after the workspace
is swapped, and non-UTF-8 symlink targets in peon.workers.fs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from peon.client.config import load_config
from peon.core.config_view import ResolvedConfig
from peon.core.errors import ToolError
from peon.core.paths import parse_file_path
from peon.core.tool import SessionView
from peon.tools.shared import target as target_module
from peon.tools.read import ReadTool
from peon.tools.shared.target import approved_expectation, resolve_target
from peon.workers import fs


# -- the pieces, in process -------------------------------------------------------------------------------


def view(workspace: Path, root_fd: int = -1) -> SessionView:
    config = ResolvedConfig(load_config({}, env={}).to_wire()).config
    return SessionView(workspace=workspace, config=config, env={}, root_fd=root_fd)


def test_one_resolution_per_call(workspace, monkeypatch):
    """One call's prepare resolves its path once: the risk it rates and the details it shows are of that
    one resolution. The next call resolves again."""
    (workspace / "a").write_text("a")
    session = view(workspace)
    resolved = []
    resolve_for = target_module.resolve_for
    monkeypatch.setattr(target_module, "resolve_for", lambda *args: resolved.append(args) or resolve_for(*args))
    prepared = ReadTool().prepare({"path": "a"}, session)
    assert len(resolved) == 1 and prepared.details["path"] == "a"  # rated and shown from one resolution
    (workspace / "a").unlink()
    with pytest.raises(ToolError) as info:  # a new call resolves again
        ReadTool().prepare({"path": "a"}, session)
    assert info.value.code.value == "not_found"


@pytest.mark.parametrize("approved", [
    {}, {"path": "a"}, {"path": "a", "directory_id": "1:2"}, {"path": 7, "file_id": "1:2", "directory_id": "1:2"},
    {"path": "a", "file_id": "x", "directory_id": "1:2"}, {"path": "a", "file_id": "1:2", "directory_id": "-1:2"},
])
def test_the_worker_fails_closed_without_a_well_formed_approval(workspace, approved):
    (workspace / "a").write_text("a")
    root = fs.open_root(workspace)
    try:
        with pytest.raises(ToolError) as info:
            approved_expectation(approved, parse_file_path("a"), "read", root)
    finally:
        os.close(root)
    assert info.value.code.value == "changed_since_approval"


def test_a_create_must_not_carry_a_file_identity(workspace):
    target = resolve_target(parse_file_path("new"), "create", view(workspace))
    details = target.details()
    assert set(details) == {"path", "directory_id"}
    root = fs.open_root(workspace)
    try:
        assert approved_expectation(details, parse_file_path("new"), "create", root).file is None
        with pytest.raises(ToolError):
            approved_expectation({**details, "file_id": "1:2"}, parse_file_path("new"), "create", root)
    finally:
        os.close(root)


def test_the_pinned_root_is_used_even_after_the_workspace_is_swapped(tmp_path):
    """workspace_root() gives a duplicate of session.root_fd: renaming the workspace and putting a
    symlink in its place changes nothing for resolutions beneath it."""
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    ws.mkdir()
    elsewhere.mkdir()
    (ws / "f.txt").write_text("the workspace")
    (elsewhere / "f.txt").write_text("ELSEWHERE")
    pinned = os.open(ws, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.rename(ws, tmp_path / "ws-moved")
        os.symlink(elsewhere, ws)
        pinned_view, by_path = view(ws, pinned), view(ws)
        for resolver in (fs.Resolver.WALK, *([fs.Resolver.OPENAT2] if fs.openat2_available() else [])):
            with fs.workspace_root(pinned_view) as root:
                assert root != pinned
                window = fs.read_window(root, parse_file_path("f.txt"), resolver, lambda total: (0, total))
                assert window.data == b"the workspace"
                assert fs.resolve(root, parse_file_path("f.txt"), follow_final=True, must_exist=True).path == "f.txt"
            with fs.workspace_root(by_path) as root:  # no pinned root: opened by path, as before
                assert fs.read_window(root, parse_file_path("f.txt"), resolver, lambda t: (0, t)).data == b"ELSEWHERE"
        os.fstat(pinned)  # still open: the helper closed only its duplicate
    finally:
        os.close(pinned)


@pytest.mark.parametrize("resolver", ["walk", "openat2"])
def test_non_utf8_targets_in_the_lower_layer(workspace, resolver):
    """peon.workers.fs itself: errors for such targets carry only valid text in their details."""
    if resolver == "openat2" and not fs.openat2_available():
        pytest.skip("openat2 is not available on this kernel")
    base = os.fsencode(workspace)
    os.symlink(b"../\xff", base + b"/out")
    os.symlink(b"\xff", base + b"/missing")
    root = fs.open_root(workspace)
    try:
        for text, code in (("out", "outside_workspace"), ("missing", "not_found")):
            with pytest.raises(ToolError) as info:
                fs.read_window(root, parse_file_path(text), fs.Resolver(resolver), lambda total: (0, total))
            assert info.value.code.value == code
            for value in info.value.details.values():
                str(value).encode("utf-8")
    finally:
        os.close(root)

