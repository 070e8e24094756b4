"""A rewind's paths rated as writes: agent-control and secret-like paths named, a path beneath a link out
of the workspace refused unless the rewind replaces that link, resolved beneath the root."""

from __future__ import annotations

import os

import pytest

from peon.core.agent_control import AGENT_CONTROL_PATHS
from peon.core.errors import ToolError
from peon.tools.shared.restore import REWIND_PATH_RULE, rate_restore
from peon.workers import fs


def rate(workspace, paths):
    root = fs.open_root(workspace)
    try:
        return rate_restore(root, paths, {}, AGENT_CONTROL_PATHS)
    finally:
        os.close(root)


def test_agent_control_and_secret_like_paths_are_rated_as_a_write_rates_them(workspace):
    (workspace / "a.txt").write_text("a")
    rating = rate(workspace, ["a.txt", ".envrc", ".claude/settings.json", "deploy/id_rsa"])
    assert [(t.typed.normalized, t.agent_control) for t in rating.agent_control] == [
        (".envrc", ".envrc"), (".claude/settings.json", ".claude")]
    assert [t.typed.normalized for t in rating.secret] == [".envrc", "deploy/id_rsa"]
    details = rating.details()
    assert details["agent_control"] == ".envrc" and details["agent_control_count"] == 2
    assert details["secret_count"] == 2
    assert rate(workspace, ["a.txt"]).details() == {} and rate(workspace, ["a.txt"]).note() == ""


def test_a_path_is_rated_by_where_it_resolves_inside_the_workspace(workspace):
    (workspace / ".claude").mkdir()
    (workspace / "docs").symlink_to(".claude")
    rating = rate(workspace, ["docs/settings.json"])
    (target,) = rating.agent_control
    assert target.resolution.path == ".claude/settings.json" and target.agent_control == ".claude"


def test_a_path_beneath_a_link_out_of_the_workspace_is_refused(workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "sub").symlink_to(outside)
    with pytest.raises(ToolError) as info:
        rate(workspace, ["a.txt", "sub/f.txt"])
    assert info.value.code.value == "outside_workspace"
    assert info.value.details["path"] == "sub/f.txt" and info.value.details["rule"] == REWIND_PATH_RULE
    assert "nothing was restored" in info.value.message


def test_a_link_the_rewind_replaces_is_removed_not_written_through(workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "sub").symlink_to(outside)
    (workspace / "hooks").symlink_to(".git")
    rating = rate(workspace, ["sub", "sub/f.txt", "hooks", "hooks/x/pre-commit"])
    written = {t.typed.normalized: t.resolution for t in rating.targets}
    assert written["sub/f.txt"].path == "sub/f.txt" and written["sub/f.txt"].created_directories == ["sub"]
    assert written["hooks/x/pre-commit"].created_directories == ["hooks", "hooks/x"]
    assert rating.agent_control == []


def test_an_invalid_path_is_refused(workspace):
    with pytest.raises(ToolError) as info:
        rate(workspace, ["a/../../b"])
    assert info.value.details["rule"] == REWIND_PATH_RULE
