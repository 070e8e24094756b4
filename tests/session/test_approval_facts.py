"""The facts allow rules need, as the supervisor reads them from real repositories, symlinks and PATH —
failing closed on anything it cannot read. git's configuration file format is tests/unit/test_git_config_facts.py."""

from __future__ import annotations

import os
import subprocess

import pytest

from peon.approval.gitconfig import parse_git_config
from peon.approval.rules import Questions
from peon.supervisor.approval.facts import find_git_dir, gather, git_facts


# -- from real repositories ------------------------------------------------------------------------


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_a_fresh_repository_sets_nothing(tmp_path):
    git("init", "-q", cwd=tmp_path)
    facts = git_facts(tmp_path, {})
    assert facts.program_keys == () and facts.hooks == () and facts.problem is None


def test_keys_hooks_aliases_and_includes_are_found(tmp_path):
    git("init", "-q", cwd=tmp_path)
    git("config", "core.fsmonitor", "./monitor", cwd=tmp_path)
    git("config", "alias.st", "status", cwd=tmp_path)
    (tmp_path / "inc.cfg").write_text("[diff]\n\texternal = ./differ\n")
    git("config", "include.path", "../inc.cfg", cwd=tmp_path)
    hook = tmp_path / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    (tmp_path / "sub").mkdir()
    facts = git_facts(tmp_path / "sub", {})  # found from a subdirectory, as git finds it
    assert [k.split(" in ")[0] for k in facts.program_keys] == ["core.fsmonitor", "diff.external"]
    assert facts.hooks == ("pre-commit",) and facts.aliases == ("st",)


def test_worktrees_bare_repositories_and_gitdir_files(tmp_path):
    main = tmp_path / "main"
    main.mkdir()
    git("init", "-q", cwd=main)
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "x",
        cwd=main)  # an identity of its own: a contributor's fresh home has none
    git("worktree", "add", "-q", str(tmp_path / "wt"), cwd=main)
    git("config", "core.pager", "evil", cwd=main)
    assert any(k.startswith("core.pager") for k in git_facts(tmp_path / "wt", {}).program_keys)  # common config
    bare = tmp_path / "bare"
    git("init", "-q", "--bare", str(bare), cwd=tmp_path)
    git("config", "--file", str(bare / "config"), "core.fsmonitor", "x", cwd=tmp_path)
    assert find_git_dir(bare, {}) == bare
    assert git_facts(bare / "refs", {}).program_keys  # found from inside the bare repository too


@pytest.mark.parametrize("plant", ["fifo", "huge", "garbage", "include-loop"])
def test_unreadable_configuration_is_a_problem_not_a_hang(tmp_path, plant):
    git("init", "-q", cwd=tmp_path)
    config = tmp_path / ".git" / "config"
    if plant == "fifo":
        config.unlink()
        os.mkfifo(config)
    elif plant == "huge":
        config.write_text("[core]\n" + "\tx = y\n" * 300_000)
    elif plant == "garbage":
        config.write_text("[core\n")
    else:
        config.write_text("[include]\n\tpath = config\n")
    facts = git_facts(tmp_path, {})
    assert facts.problem, facts


# -- what git would accept, and what it reads besides the main configuration -----------------------


def test_a_decoy_git_directory_does_not_hide_the_repository_above(tmp_path):
    git("init", "-q", cwd=tmp_path)
    git("config", "core.fsmonitor", "./monitor", cwd=tmp_path)
    (tmp_path / "sub" / ".git").mkdir(parents=True)  # git passes over a .git without HEAD, objects, refs
    assert find_git_dir(tmp_path / "sub", {}) == tmp_path / ".git"
    assert git_facts(tmp_path / "sub", {}).program_keys
    real = subprocess.run(["git", "rev-parse", "--absolute-git-dir"], cwd=tmp_path / "sub", capture_output=True,
                          text=True, check=True).stdout.strip()
    assert real == str(tmp_path / ".git")  # what git itself does


def test_submodule_configurations_are_checked(tmp_path):
    git("init", "-q", cwd=tmp_path)
    module = tmp_path / ".git" / "modules" / "lib" / "modules" / "inner"
    module.mkdir(parents=True)
    (module / "config").write_text("[core]\n\tfsmonitor = ./monitor\n")
    facts = git_facts(tmp_path, {})
    assert any(key.startswith("core.fsmonitor in ") and "inner" in key for key in facts.program_keys), facts


def test_include_fan_out_is_bounded_in_files(tmp_path):
    git("init", "-q", cwd=tmp_path)
    for level in range(5):  # each file includes the next level four times: 4^5 reads without a budget
        (tmp_path / f"level{level}.cfg").write_text(f"[include]\n\tpath = level{level + 1}.cfg\n" * 4)
    (tmp_path / "level5.cfg").write_text("[user]\n\tname = x\n")
    (tmp_path / ".git" / "config").write_text("[include]\n\tpath = ../level0.cfg\n")
    facts = git_facts(tmp_path, {})
    assert facts.problem and "more than" in facts.problem, facts


def test_problems_never_quote_file_content(tmp_path):
    git("init", "-q", cwd=tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=hunter2-very-secret\n")
    (tmp_path / ".git" / "config").write_text(f"[include]\n\tpath = {secret}\n")
    facts = git_facts(tmp_path, {})
    assert facts.problem and "hunter2" not in facts.problem and "TOKEN" not in facts.problem, facts
    assert "hunter2" not in parse_git_config("[a]\n\tx y TOKEN=hunter2\n").problem


def test_sandboxed_facts_are_read_only_where_the_command_may_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "inc.cfg").write_text("[core]\n\tpager = evil\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    git("init", "-q", cwd=workspace)
    git("config", "include.path", str(outside / "inc.cfg"), cwd=workspace)
    assert git_facts(workspace, {}).program_keys  # unsandboxed, git reads the include
    assert not git_facts(workspace, {}, (str(workspace),)).program_keys  # sandboxed, it cannot
    above = tmp_path / "repo"
    (above / "ws").mkdir(parents=True)
    git("init", "-q", cwd=above)
    git("config", "core.fsmonitor", "x", cwd=above)
    assert git_facts(above / "ws", {}).program_keys
    assert git_facts(above / "ws", {}, (str(above / "ws"),)).program_keys == ()  # the repository is unreadable
    facts = gather(Questions(git_cwds=frozenset({"."}), readable=(str(above / "ws"),)), above / "ws", {})
    assert facts.git["."].program_keys == () and facts.git["."].problem is None
