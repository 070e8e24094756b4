"""``apply_patch``'s parts called directly, without a session: the fs layer restores every file when an install
fails after staging, and ``prepare`` lifts an agent-control target to the top of the details the policy reads."""

from __future__ import annotations

import hashlib
import os

import pytest

from helpers.files import snapshot


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patch(*body: str) -> str:
    return "*** Begin Patch\n" + "".join(line + "\n" for line in body) + "*** End Patch\n"


def test_install_failure_after_staging_restores_through_apply_changes(workspace):
    """The same guarantee at the fs layer, where the failure can be placed exactly: a file created at the
    third destination after staging makes its no-clobber install fail."""
    from peon.core.errors import ToolError
    from peon.core.paths import parse_file_path
    from peon.workers import fs
    from peon.workers.fs import change

    (workspace / "a.txt").write_text("a1\n")
    (workspace / "b.txt").write_text("b1\n")
    before = snapshot(workspace)
    root = fs.open_root(workspace)
    real_install = change._install

    def racing_install(staged, use_link):
        if staged.change.path.normalized == "c.txt":
            (workspace / "c.txt").write_text("someone else's\n")
        real_install(staged, use_link)

    changes = [fs.Change(parse_file_path("a.txt"), b"a2\n", False, None, sha(b"a1\n")),
               fs.Change(parse_file_path("b.txt"), None, False, None, sha(b"b1\n")),
               fs.Change(parse_file_path("c.txt"), b"c\n", True, None, None)]
    change._install = racing_install
    try:
        with pytest.raises(ToolError) as caught:
            fs.apply_changes(root, changes, fs.Resolver.WALK)
    finally:
        change._install = real_install
        os.close(root)
    assert caught.value.code.value == "already_exists"
    assert snapshot(workspace) == {**before, "c.txt": b"someone else's\n"}


def test_an_agent_control_target_is_lifted_to_the_top_of_the_details(monkeypatch):
    """The approval policy reads a written target's agent-control entry at the top of the details, so a patch
    that touches one such file among several is asked about like a write of it."""
    from peon.tools import apply_patch

    class Stub:
        secret_on_resolved_only = False

        def __init__(self, path):
            self.path = path

        def details(self):
            return {"path": self.path, **({"agent_control": ".git/hooks"} if self.path.startswith(".git") else {})}

        def secret_reason(self):
            return None

        def where(self):
            return ""

        def agent_control_reason(self):
            return "writes beneath .git/hooks" if self.path.startswith(".git") else None

    monkeypatch.setattr(apply_patch, "resolve_target", lambda typed, access, session: Stub(typed.normalized))
    tool = apply_patch.ApplyPatchTool()
    args = {"patch": patch("*** Add File: notes.txt", "+x", "*** Add File: .git/hooks/pre-commit", "+evil")}
    details = tool.prepare(args, None).details
    assert details["agent_control"] == ".git/hooks" and details["files"][1]["agent_control"] == ".git/hooks"
    assert "writes beneath .git/hooks" in tool.prepare(args, None).risk_reason
    assert "agent_control" not in tool.prepare({"patch": patch("*** Add File: a.txt", "+x")}, None).details

