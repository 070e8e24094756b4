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


def on_a_terminal(leftovers, workspace, *args: str, answer: str) -> tuple[int, str]:
    """``peon`` run with a terminal as its stdin and stdout, answering its question: its status and output."""
    import os
    import pty
    import select
    import subprocess
    import time

    from helpers.cli import PEON, isolated_env

    master, slave = pty.openpty()
    proc = subprocess.Popen([*PEON, *args], stdin=slave, stdout=slave, stderr=slave, cwd=workspace,
                            env=isolated_env(leftovers, workspace))  # stderr too: input() prompts there
    os.close(slave)
    seen, answered, deadline = b"", False, time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the terminal closed: the command ended
                    break
                if not chunk:
                    break
                seen += chunk
            if not answered and b"[y/N]" in seen:
                os.write(master, answer.encode() + b"\n")
                answered = True
            if proc.poll() is not None and not ready:
                break
        return proc.wait(timeout=30), seen.decode(errors="replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_rewind_names_the_agent_control_and_secret_like_paths_in_its_question(leftovers, workspace):
    config = workspace.parent / "sandbox-off.toml"
    config.write_text('[sandbox]\nmode = "off"\n')  # the sandbox keeps commands from agent-control paths
    proc = peon(leftovers, workspace, "call", "bash", json.dumps({"command": "echo x > .envrc; echo t > .env; "
                                                                             "echo p > plain.txt"}),
                "--allow", "process", "--keep-state", "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    call_id = str(json.loads(proc.stdout)["call_id"])
    status, shown = on_a_terminal(leftovers, workspace, "rewind", call_id, answer="n")
    assert status == 1 and "not rewound" in shown, shown
    assert "1 of them agent-control" in shown and ".envrc  (.envrc)" in shown
    assert "2 of them secret-like" in shown and ".env  (secret-like path" in shown
    assert "plain.txt  (" not in shown
    assert (workspace / ".envrc").exists()
    done = peon(leftovers, workspace, "rewind", call_id, "--yes")  # the person typed it: it proceeds
    assert done.returncode == 0, done.stderr
    assert not (workspace / ".envrc").exists() and not (workspace / "plain.txt").exists()


def test_rewind_removes_a_link_planted_where_a_directory_was_and_writes_nothing_outside(leftovers, workspace,
                                                                                         tmp_path):
    import os

    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text("inside\n")
    call_id = call_kept(leftovers, workspace, "echo more >> sub/f.txt")
    os.rename(workspace / "sub", workspace / "was-sub")
    (workspace / "sub").symlink_to(outside)
    done = peon(leftovers, workspace, "rewind", call_id, "--yes")
    assert done.returncode == 0, done.stderr
    assert list(outside.iterdir()) == [] and not (workspace / "sub").is_symlink()
    assert (workspace / "sub" / "f.txt").read_text() == "inside\n"
