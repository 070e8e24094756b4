"""``peon changes`` and ``peon rewind`` from a shell of their own, after the session that made the changes ended."""

from __future__ import annotations

import json

from helpers.cli import assert_clean_failure, peon


def call_kept(leftovers, workspace, command: str) -> str:
    proc = peon(leftovers, workspace, "call", "bash", json.dumps({"command": command}), "--allow", "process",
                "--keep-state")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["changes"]["checkpoint"], result
    return str(result["call_id"])


def test_changes_lists_shows_and_rewind_undoes_a_call(leftovers, workspace):
    (workspace / "keep.txt").write_text("as it was\n")
    call_id = call_kept(leftovers, workspace, "echo new > new.txt; echo changed > keep.txt")
    listed = peon(leftovers, workspace, "changes")
    assert listed.returncode == 0, listed.stderr
    assert call_id in listed.stdout and "1 added, 1 modified" in listed.stdout
    shown = peon(leftovers, workspace, "changes", call_id)
    assert shown.returncode == 0 and "+new" in shown.stdout and "-as it was" in shown.stdout
    as_json = json.loads(peon(leftovers, workspace, "changes", call_id, "--json").stdout)
    assert {item["path"] for item in as_json["changes"]["files"]} == {"new.txt", "keep.txt"}

    asked = peon(leftovers, workspace, "rewind", call_id)  # no terminal and no --yes: nothing changes
    assert_clean_failure(asked, 2, "--yes")
    assert (workspace / "new.txt").exists()

    done = peon(leftovers, workspace, "rewind", call_id, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert not (workspace / "new.txt").exists() and (workspace / "keep.txt").read_text() == "as it was\n"
    undo = json.loads(done.stdout)["id"]
    again = peon(leftovers, workspace, "rewind", undo, "--yes")
    assert again.returncode == 0, again.stderr
    assert (workspace / "new.txt").read_text() == "new\n"


def test_several_sessions_are_told_apart_by_the_call_or_by_session(leftovers, workspace):
    first = call_kept(leftovers, workspace, "echo 1 > one.txt")
    second = call_kept(leftovers, workspace, "echo 2 > two.txt")
    assert peon(leftovers, workspace, "changes", first).returncode == 0
    assert peon(leftovers, workspace, "changes", second).returncode == 0
    unknown = peon(leftovers, workspace, "changes", "nope")
    assert_clean_failure(unknown, 2, "no session")
    sessions = json.loads(peon(leftovers, workspace, "sessions", "--json").stdout)
    chosen = next(s for s in sessions if s["workspace"] == str(workspace.resolve()))
    listed = peon(leftovers, workspace, "changes", "--session", chosen["session_id"], "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["session_id"] == chosen["session_id"]
