"""Allow rules that allow only what they say, through real sessions and real bash: a decoy .git, a
submodule's configuration, git's manual viewer, sed's labels and programs that write their operands
are asked about (and the approver here denies), and the program or write never happens. Each case is
first shown to happen when the approver allows it once."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import helpers

APPROVAL = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}


@pytest.fixture
def allowing(open_session, tmp_path):
    def factory(*prefixes: str, approver):
        rules = [{"tool": "bash", "command_prefix": p, "decision": "allow"} for p in prefixes]
        return open_session({"approval": {**APPROVAL, "rules": rules}},
                            env={"XDG_CONFIG_HOME": str(tmp_path / "no-user-config")}, approver=approver)

    return factory


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def marker_program(directory: Path, marker: Path) -> Path:
    program = directory / "program.sh"
    program.write_text(f"#!/bin/sh\ntouch {marker}\n")
    program.chmod(0o755)
    return program


def happens_only_when_approved(session, approver, command: str, marker: Path, **more: str) -> str:
    """The command runs the marker program when allowed once; asked again and denied, it never does."""
    assert session.call("bash", {"command": command, **more}).ok
    assert marker.exists(), f"{command} does not run the program: the test proves nothing"
    assert len(approver.requests) == 1
    marker.unlink()
    r = session.call("bash", {"command": command, **more})
    assert r.error.code == "denied" and r.error.details["by"] == "approver", r
    assert not marker.exists()
    return r.error.details["rule"]


def test_a_decoy_git_directory_does_not_hide_the_repository_configuration(allowing, workspace, tmp_path):
    git("init", "-q", cwd=workspace)
    marker = tmp_path / "fsmonitor-ran"
    git("config", "core.fsmonitor", str(marker_program(tmp_path, marker)), cwd=workspace)
    (workspace / "sub" / ".git").mkdir(parents=True)  # empty: git passes over it to the repository above
    approver = helpers.Recorder("allow_once", otherwise="deny")
    session = allowing("git status", approver=approver)
    rule = happens_only_when_approved(session, approver, "git status", marker, cwd="sub")
    assert "core.fsmonitor" in rule


def test_a_repository_in_the_call_directory_is_the_one_checked(allowing, workspace, tmp_path):
    nested = workspace / "vendor"
    nested.mkdir()
    git("init", "-q", cwd=nested)  # the workspace root is no repository; the call runs in vendor/
    marker = tmp_path / "fsmonitor-ran"
    git("config", "core.fsmonitor", str(marker_program(tmp_path, marker)), cwd=nested)
    approver = helpers.Recorder("allow_once", otherwise="deny")
    session = allowing("git status", approver=approver)
    rule = happens_only_when_approved(session, approver, "git status", marker, cwd="vendor")
    assert "core.fsmonitor" in rule


def test_a_submodule_configuration_is_checked(allowing, workspace, tmp_path):
    library = tmp_path / "lib"
    library.mkdir()
    git("init", "-q", "-b", "main", cwd=library)
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "x",
        cwd=library)
    git("init", "-q", cwd=workspace)
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib", cwd=workspace)
    marker = tmp_path / "fsmonitor-ran"
    module_config = workspace / ".git" / "modules" / "lib"
    git("config", "--file", str(module_config / "config"), "core.fsmonitor", str(marker_program(tmp_path, marker)),
        cwd=workspace)
    approver = helpers.Recorder("allow_once", otherwise="deny")
    session = allowing("git status", approver=approver)
    rule = happens_only_when_approved(session, approver, "git status", marker)
    assert "core.fsmonitor" in rule and "modules" in rule


def test_git_help_runs_the_configured_viewer_only_when_approved(allowing, workspace, tmp_path):
    git("init", "-q", cwd=workspace)
    marker = tmp_path / "viewer-ran"
    program = marker_program(tmp_path, marker)
    git("config", "man.viewer", "man", cwd=workspace)
    git("config", "man.man.path", str(program), cwd=workspace)
    approver = helpers.Recorder("allow_once", otherwise="deny")
    session = allowing("git", approver=approver)
    rule = happens_only_when_approved(session, approver, "git help log", marker)
    assert "manual viewer" in rule or "man." in rule


@pytest.mark.parametrize("command, written", [
    ("sed 'b end w {out}' in.txt", "out"),
    ("sed -l 5 's/a/b/w {out}' in.txt", "out"),
    ("uniq in.txt {out}", "out"),
    ("shuf -o {out} in.txt", "out"),
])
def test_programs_that_write_are_asked_and_write_nothing(allowing, workspace, tmp_path, command, written):
    (workspace / "in.txt").write_text("a\n")
    out = tmp_path / "written"
    program = command.split()[0]
    approver = helpers.Recorder("allow_once", otherwise="deny")
    session = allowing(program, approver=approver)
    line = command.format(out=out)
    assert session.call("bash", {"command": line}).ok and out.exists(), f"{line} does not write: proves nothing"
    out.unlink()
    r = session.call("bash", {"command": line})
    assert r.error.code == "denied" and r.error.details["by"] == "approver", r
    assert not out.exists()
