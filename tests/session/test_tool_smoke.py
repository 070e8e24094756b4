"""One real call of every built-in tool through a session — real supervisor, workers and processes.

This file is part of the subset `.ci/run` also runs on every other Python interpreter it finds (with the
protocol, approval and file tests), so each tool is seen working end to end on each interpreter. A built-in tool
without a case here fails :func:`test_every_builtin_tool_has_a_case`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.agents import install_fake_agents
from peon.tools import BUILTIN_TOOLS

SKILL = "---\nname: greet\ndescription: Say hello politely.\n---\nSay hello.\n"


def _job(session) -> str:
    started = session.call("bash", {"command": "echo started; sleep 30", "background": True})
    assert started.ok, started.error
    return started.value["job_id"]


CASES = {
    "bash": lambda s, ws: (s.call("bash", {"command": "echo hi; exit 3"}),
                           lambda v: v["exit_code"] == 3 and v["output"] == "hi\n"),
    "read": lambda s, ws: (s.call("read", {"path": "notes.txt"}), lambda v: v["content"] == "héllo\n"),
    "write": lambda s, ws: (s.call("write", {"path": "new.txt", "content": "x\n", "mode": "create"}),
                            lambda v: (ws / "new.txt").read_text() == "x\n"),
    "edit": lambda s, ws: (s.call("edit", {"path": "notes.txt",
                                           "edits": [{"old_string": "héllo", "new_string": "hi"}]}),
                           lambda v: (ws / "notes.txt").read_text() == "hi\n"),
    "apply_patch": lambda s, ws: (s.call("apply_patch", {"patch": "*** Begin Patch\n*** Add File: added.txt\n+one\n"
                                                                   "*** End Patch\n"}),
                                  lambda v: (ws / "added.txt").read_text() == "one\n"),
    "grep": lambda s, ws: (s.call("grep", {"pattern": "^h.llo$", "output": "files"}),
                           lambda v: [e["path"] for e in v["entries"]] == ["notes.txt"]),
    "glob": lambda s, ws: (s.call("glob", {"pattern": "*.txt"}), lambda v: v["paths"] == ["notes.txt"]),
    "read_skill": lambda s, ws: (s.call("read_skill", {"name": "greet"}), lambda v: "Say hello." in str(v)),
    "agent_claude": lambda s, ws: (s.call("agent_claude", {"prompt": "smoke"}), lambda v: v["exit_code"] == 0),
    "agent_codex": lambda s, ws: (s.call("agent_codex", {"prompt": "smoke"}), lambda v: v["exit_code"] == 0),
    "agent_pi": lambda s, ws: (s.call("agent_pi", {"prompt": "smoke"}), lambda v: v["exit_code"] == 0),
    "job_list": lambda s, ws: (s.call("job_list", {}), lambda v: isinstance(v["jobs"], list)),
    "job_output": lambda s, ws: (s.call("job_output", {"job_id": _job(s), "wait_seconds": 5}),
                                 lambda v: "started" in v["output"]),
    "job_stop": lambda s, ws: (s.call("job_stop", {"job_id": _job(s)}), lambda v: v["state"] != "running"),
    "job_write": lambda s, ws: (s.call("job_write", {"job_id": _pipe_job(s), "text": "typed\n", "wait_seconds": 5}),
                                lambda v: v["written_bytes"] == 6 and "typed" in v["output"]),
}


def _pipe_job(session) -> str:
    started = session.call("bash", {"command": "exec cat", "background": True, "stdin": "pipe"})
    assert started.ok, started.error
    return started.value["job_id"]


def _written(session) -> str:
    made = session.call("bash", {"command": "echo made > made.txt"})
    assert made.ok and made.changes and made.changes["added"] == 1, made
    return made.call_id


def _rewound(ws: Path, value) -> bool:
    return not (ws / "made.txt").exists() and value["changes"]["deleted"] == 1


CASES["changes"] = lambda s, ws: (s.call("changes", {"call_id": _written(s)}), lambda v: "+made" in v["diff"])
CASES["rewind"] = lambda s, ws: (s.call("rewind", {"call_id": _written(s)}), lambda v: _rewound(ws, v))


def test_every_builtin_tool_has_a_case():
    assert sorted(t.name for t in BUILTIN_TOOLS) == sorted(CASES)


@pytest.mark.parametrize("tool", sorted(CASES))
def test_one_real_call(tool, open_session, workspace, tmp_path):
    (workspace / "notes.txt").write_text("héllo\n")
    skill = workspace / ".peon" / "skills" / "greet"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL)
    agents = install_fake_agents(tmp_path / "bin")
    session = open_session(env={"PATH": f"{agents}{os.pathsep}/usr/bin{os.pathsep}/bin",
                                "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    result, check = CASES[tool](session, Path(workspace))
    assert result.ok, result.error
    assert check(result.value), result.value
