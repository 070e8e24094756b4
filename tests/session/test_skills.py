"""``read_skill`` and skills through real sessions: the enum schema, truncation, a skill directory swapped
after discovery, and the file tools loading nothing from the supervisor. The front matter rules and discovery
are tests/unit/test_skill_discovery.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers.skills import skill_text, write_skill


# -- sessions and read_skill -----------------------------------------------------------------------------


@pytest.fixture
def skill_session(open_session, roots):
    def factory(config=None):
        return open_session(config, env=roots[2])
    return factory


def test_session_reports_skills_and_lists_names_in_the_schema(skill_session, roots):
    user, project, _env = roots
    write_skill(user, "release-checks")
    write_skill(project, "lint-rules", skill_text("lint-rules", "How this repo lints."))
    write_skill(project, "Broken")
    session = skill_session()
    report = session.info["skills"]
    assert [s["name"] for s in report["available"]] == ["release-checks", "lint-rules"]
    assert report["available"][1] == {"name": "lint-rules", "description": "How this repo lints.",
                                      "origin": "project", "root": os.path.realpath(project),
                                      "path": os.path.realpath(project / "lint-rules" / "SKILL.md")}
    assert report["skipped"] == [{"path": os.path.join(os.path.realpath(project), "Broken"),
                                  "reason": "name 'Broken' must be lowercase letters, digits and single hyphens, "
                                            "not starting or ending with a hyphen"}]
    tool = {t["name"]: t for t in session.tools()}["read_skill"]
    assert tool["risk"] == "read_only"
    name_schema = tool["input_schema"]["properties"]["name"]
    assert name_schema["enum"] == ["lint-rules", "release-checks"]
    assert "lint-rules (project): How this repo lints." in name_schema["description"]
    assert "untrusted" in name_schema["description"]
    assert tool["input_schema"]["additionalProperties"] is False


def test_read_skill_returns_the_file_and_refuses_paths(skill_session, roots):
    _user, project, _env = roots
    text = skill_text("release-checks", body="# Release\nRun `make check`.\n")
    write_skill(project, "release-checks", text)
    session = skill_session()
    r = session.call("read_skill", {"name": "release-checks"})
    assert r.ok, r.error
    assert r.value["content"] == text and r.value["truncated"] is False
    assert r.value["size_bytes"] == r.value["returned_bytes"] == len(text.encode())
    assert r.value["origin"] == "project"
    for args in [{"name": "../release-checks"}, {"name": "/etc/passwd"}, {"name": "missing"},
                 {"name": "release-checks", "path": "SKILL.md"}]:
        r = session.call("read_skill", args)
        assert r.error.code == "invalid_input", args


def test_read_skill_with_no_skills(skill_session):
    session = skill_session()
    r = session.call("read_skill", {"name": "anything"})
    assert r.error.code == "invalid_input" and r.error.details["rule"] == "enum"
    tool = {t["name"]: t for t in session.tools()}["read_skill"]
    assert tool["input_schema"]["properties"]["name"]["enum"] == []


def test_oversize_skill_is_truncated_at_a_character_boundary(skill_session, roots):
    _user, project, _env = roots
    head = skill_text("big", body="")
    text = head + "x" * (100 - len(head) - 1) + "é" * 5000  # the 100-byte cut falls inside an 'é'
    write_skill(project, "big", text)
    r = skill_session({"skills": {"max_skill_bytes": 100}}).call("read_skill", {"name": "big"})
    assert r.ok and r.value["truncated"] is True
    assert r.value["returned_bytes"] == 99 and r.value["content"] == text.encode()[:99].decode()
    assert r.value["size_bytes"] == len(text.encode()) and r.value["max_skill_bytes"] == 100
    assert r.value["invalid_utf8"] is False


def test_skill_directory_swapped_for_a_symlink_after_discovery(skill_session, roots, tmp_path):
    _user, project, _env = roots
    for name in ("swapped", "redirected", "deleted", "edited", "fifo"):
        write_skill(project, name)
    outside = tmp_path / "outside"
    write_skill(outside, "swapped", skill_text("swapped", body="STOLEN CONTENT"))
    session = skill_session()
    shutil.rmtree(project / "swapped")
    (project / "swapped").symlink_to(outside / "swapped")
    r = session.call("read_skill", {"name": "swapped"})
    assert r.error.code == "skill_moved" and r.value is None
    assert "outside its root and the workspace" in r.error.message and repr(str(outside / "swapped")) in r.error.message

    shutil.rmtree(project / "redirected")
    (project / "redirected").symlink_to("edited")  # inside the root, but another skill
    r = session.call("read_skill", {"name": "redirected"})
    assert r.error.code == "skill_moved" and "now leads to" in r.error.message

    shutil.rmtree(project / "deleted")
    assert session.call("read_skill", {"name": "deleted"}).error.code == "skill_moved"

    (project / "fifo" / "SKILL.md").unlink()
    os.mkfifo(project / "fifo" / "SKILL.md")
    assert session.call("read_skill", {"name": "fifo"}).error.code == "not_a_regular_file"

    (project / "edited" / "SKILL.md").write_text(skill_text("edited", body="new text"))  # edits are fine
    r = session.call("read_skill", {"name": "edited"})
    assert r.ok and r.value["content"].endswith("new text")


def test_a_swapped_parent_directory_is_detected(skill_session, roots, workspace, tmp_path):
    _user, project, _env = roots
    write_skill(project, "moved")
    session = skill_session()
    fake_peon = tmp_path / "fake-peon"
    write_skill(fake_peon / "skills", "moved", skill_text("moved", body="NOT THE REPO'S"))
    os.rename(workspace / ".peon", workspace / ".peon-old")
    (workspace / ".peon").symlink_to(fake_peon)
    r = session.call("read_skill", {"name": "moved"})
    assert r.error.code == "skill_moved"


def test_the_file_tools_load_nothing_from_the_supervisor():
    """read_skill reads through peon.workers.skills (checked in a fresh interpreter: no supervisor module is
    loaded; the bare package is imported by peon's own installation check), and write imports nothing
    from read."""
    import ast
    import subprocess
    import sys

    code = ("import sys, peon.tools.read_skill, peon.tools.read, peon.tools.write, peon.core.skills, "
            "peon.workers.skills, peon.workers.fs; "
            "print(sorted(m for m in sys.modules if m.startswith('peon.supervisor')))")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    tree = ast.parse((Path(__file__).parent.parent.parent / "peon" / "tools" / "write.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"read", "peon.tools.read"}, imported
