"""The agent-control list without a session: which paths the file tools treat as agent-control (all of a
repository's ``.git``, a ``.git`` file, git's redirections, the files that make an agent, an editor, the
shell or CI run code, instruction files at any depth), which the sandbox plan covers for commands, and that
the configuration's default, the file tools and the sandbox plan read the one list."""

from __future__ import annotations

import pytest

from peon.client.config import load_config
from peon.core.agent_control import AGENT_CONTROL_PATHS, GROUPS, check_entry, command_paths, entry_for
from peon.core.errors import ConfigError
from peon.core.config_view import ConfigView
from peon.workers.sandbox import landlock as ll
from peon.workers.sandbox.decision import session_status
from peon.workers.sandbox.probe import SIMULATE_ENV

PREVIOUS_DEFAULT = (".git/hooks", ".git/config", ".gitmodules", ".peon", ".claude", ".codex", ".mcp.json",
                    ".github/workflows", ".vscode", ".idea")


@pytest.mark.parametrize("path, entry", [
    (".git/commondir", ".git/commondir"), (".git/info/exclude", ".git/info"), (".git/info/attributes", ".git/info"),
    (".git/modules/sub/config", "**/.git"), (".git/worktrees/w/gitdir", ".git/worktrees"),
    (".git/objects/info/alternates", ".git/objects/info/alternates"), (".git/HEAD", "**/.git"),
    (".git/refs/heads/main", "**/.git"), (".git", "**/.git"), ("vendor/lib/.git", "**/.git"),
    ("vendor/lib/.git/hooks/pre-commit", "**/.git"), (".git/hooks/pre-commit", ".git/hooks"),
    (".git/config", ".git/config"), (".GIT/Config", ".git/config"), (".gitmodules", ".gitmodules"),
    (".husky/pre-commit", ".husky"), (".pre-commit-config.yaml", ".pre-commit-config.yaml"),
    (".envrc", ".envrc"), (".mise.toml", ".mise.toml"), (".cursor/rules/style.mdc", ".cursor"),
    (".cursor/mcp.json", ".cursor"), (".vscode/tasks.json", ".vscode"), (".vscode/settings.json", ".vscode"),
    (".vscode/launch.json", ".vscode"), (".idea/runConfigurations/app.xml", ".idea"),
    (".claude/settings.json", ".claude"), (".mcp.json", ".mcp.json"), (".codex/config.toml", ".codex"),
    (".gemini/settings.json", ".gemini"), (".github/workflows/ci.yml", ".github/workflows"),
    (".devcontainer/devcontainer.json", ".devcontainer"), (".peon/config.toml", ".peon"),
    ("AGENTS.md", "**/AGENTS.md"), ("services/api/AGENTS.md", "**/AGENTS.md"), ("CLAUDE.md", "**/CLAUDE.md"),
    ("docs/CLAUDE.local.md", "**/CLAUDE.local.md"), ("GEMINI.md", "**/GEMINI.md"), (".cursorrules", ".cursorrules"),
    (".github/copilot-instructions.md", ".github/copilot-instructions.md"),
    ("src/main.py", None), ("README.md", None), ("git/config", None), (".gitignore", None),
    (".github/ISSUE_TEMPLATE/bug.md", None), ("docs/.github/workflows/ci.yml", None), ("AGENTS.md.bak", None),
    ("docs/agents-guide.md", None), ("src/.envrc.example", None), ("Makefile", None),
])
def test_the_file_tools_decide_by_the_list(path, entry):
    assert entry_for(tuple(path.split("/")), AGENT_CONTROL_PATHS) == entry


def test_the_most_specific_entry_names_a_path_and_a_configured_list_is_read_the_same_way():
    assert entry_for((".git", "hooks", "x"), ("**/.git", ".git/hooks")) == ".git/hooks"
    assert entry_for((".git", "hooks", "x"), (".git/hooks", "**/.git")) == ".git/hooks"
    assert entry_for(("a", "b", "c"), ("**/b", "a")) == "**/b" and entry_for(("a", "b"), ("a", "**/b")) == "a"  # a tie
    assert entry_for(("x", ".claude", "s.json"), (".claude",)) is None  # entries are at the root unless **/
    assert entry_for((".mcp.json",), (".claude",)) is None and entry_for((), AGENT_CONTROL_PATHS) is None


def test_commands_get_the_same_entries_at_the_root_without_the_git_directory_itself():
    paths = command_paths(AGENT_CONTROL_PATHS)
    assert ".git" not in paths and not any(p.startswith("**") for p in paths) and len(paths) == len(set(paths))
    assert {".git/hooks", ".git/config", ".git/commondir", ".git/info", ".git/worktrees",
            ".git/objects/info/alternates", "AGENTS.md", "CLAUDE.md", ".envrc", ".cursor"} <= set(paths)
    assert command_paths(["**/.git", ".git", "**/AGENTS.md", "AGENTS.md", "Makefile"]) == ("AGENTS.md", "Makefile")


def test_one_list_read_by_the_configuration_and_the_file_tools():
    assert set(PREVIOUS_DEFAULT) <= set(AGENT_CONTROL_PATHS)  # the list only grew
    assert all(check_entry(path) is None for group in GROUPS for path in group.paths)
    assert len(AGENT_CONTROL_PATHS) == len(set(AGENT_CONTROL_PATHS))
    assert load_config(env={}).config.sandbox.protected == AGENT_CONTROL_PATHS
    for bad in ("a/**/b", "**", "/abs", "x/../y", ""):
        assert check_entry(bad) is not None
        with pytest.raises(ConfigError) as refused:
            load_config({"sandbox": {"protected": [bad]}}, env={})
        assert "sandbox.protected" in refused.value.message


@pytest.mark.skipif(ll.abi_version().abi < 1, reason="the sandbox plan needs Landlock")
def test_the_sandbox_plan_reads_the_same_list(tmp_path):
    for protected in (None, ["**/AGENTS.md", "**/.git", ".git/hooks", "Makefile"]):
        loaded = load_config({"sandbox": {"protected": protected}} if protected else None, env={}).config
        section = ConfigView.from_dict(loaded.to_dict()).sandbox
        status = session_status(section, str(tmp_path), {"TMPDIR": str(tmp_path), SIMULATE_ENV: "no-namespaces"})
        assert status["plan"]["protected"] == list(command_paths(loaded.sandbox.protected))
    assert status["plan"]["protected"] == ["AGENTS.md", ".git/hooks", "Makefile"]
