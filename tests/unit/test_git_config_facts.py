"""The facts allow rules need, without a session: git's configuration file format, which keys run a program,
and what ``gather`` answers about paths, programs and git in a directory."""

from __future__ import annotations

import pytest

from peon.approval.gitconfig import parse_git_config
from peon.approval.rules import Questions, git_key_runs_program
from peon.supervisor.approval.facts import gather


# -- the file format ---------------------------------------------------------------------------------


def test_keys_are_read_as_git_names_them():
    config = parse_git_config(
        '[core]\n\trepositoryformatversion = 0\n\tFSMonitor = "/tmp/x" ; comment\n'
        '[diff "pdf"]\n\ttextconv = pdftotext\n[Remote "Origin"]\n\turl = x\n'
        '[branch.Main]\n\tremote = origin\n[alias] st = status\n[core]\n\tbare\n'
        '[filter "lfs"]\n\tclean = git-lfs clean \\\n\t  -- %f\n'
        '[include]\n\tpath = extra.cfg\n[includeIf "gitdir:/x/"]\n\tpath = ~/other.cfg\n')
    assert config.problem is None
    keys = dict(config.entries)
    assert keys["core.fsmonitor"] == "/tmp/x"
    assert keys["diff.pdf.textconv"] == "pdftotext"
    assert keys["remote.Origin.url"] == "x"  # subsections keep their case
    assert keys["branch.main.remote"] == "origin"
    assert keys["alias.st"] == "status"  # a key on the header's line
    assert keys["core.bare"] is None
    assert keys["filter.lfs.clean"].startswith("git-lfs clean")  # a continued value is one value
    assert config.includes() == ["extra.cfg", "~/other.cfg"]


@pytest.mark.parametrize("text", ['[core\n', '[core "x]\n', 'key = value\n', '[core]\n\t%bad = 1\n',
                                  '[core]\n\tpager = "unterminated\n'])
def test_what_git_would_read_differently_is_a_problem(text):
    assert parse_git_config(text).problem is not None


@pytest.mark.parametrize("key, value, runs", [
    ("core.fsmonitor", "/tmp/x", True), ("core.fsmonitor", "false", False), ("core.fsmonitor", "true", True),
    ("core.pager", "less", True), ("diff.external", "x", True), ("diff.pdf.textconv", "x", True),
    ("filter.lfs.smudge", "x", True), ("pager.log", "x", True), ("alias.st", "status", False),
    ("core.editor", "vim", True), ("credential.helper", "store", True), ("gpg.ssh.program", "x", True),
    ("remote.origin.url", "x", False), ("user.name", "x", False), ("core.hookspath", "h", True),
    ("include.path", "x", False), ("diff.textconv", "x", False),
    ("man.viewer", "evil", True), ("man.evil.path", "./x", True), ("help.format", "web", True),
    ("help.browser", "x", True), ("help.autocorrect", "immediate", True), ("browser.x.path", "./x", True),
    ("gpg.ssh.defaultkeycommand", "./x", True), ("imap.tunnel", "x", True),
])
def test_program_running_keys(key, value, runs):
    assert git_key_runs_program(key, value) is runs


def test_gather_answers_paths_programs_and_git(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "out").symlink_to(tmp_path)
    facts = gather(Questions(paths=frozenset({"a.txt", "out/x", "dir/../b"}), git_cwds=frozenset({"."}),
                             programs=frozenset({"/bin/sh", "/nonexistent/sh", str(workspace / "sh")})),
                   workspace, {"PATH": "/usr/bin:/bin"})
    assert facts.paths_inside == {"a.txt": True, "out/x": False, "dir/../b": True}
    assert facts.same_program["/bin/sh"] is True
    assert facts.same_program["/nonexistent/sh"] is False and facts.same_program[str(workspace / "sh")] is False
    assert facts.git["."].problem is None


def test_continued_lines_are_joined_in_linear_time():
    config = parse_git_config("[a]\n\tb = " + "x\\\n" * 100_000 + "y\n")
    assert config.problem is None and config.entries[0][1] == "x" * 100_000 + "y"
    assert parse_git_config("[a]\n\tb = one \\\\\\\r\n two\r\n").entries[0][1] == "one \\ two"

