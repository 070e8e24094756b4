"""``peon setup``'s plans, without a process: what each client's files get, that a second run changes nothing,
that what is not Peon's is kept, that a project-scope file holds nothing of this machine, and what
``peon doctor`` reads back. The real clients read these files in tests/frontends/test_setup.py."""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path

import pytest

from peon.cli import setup
from peon.cli.clients import claude, codex, cursor, vscode
from peon.cli.clients.base import Target, is_peon_server
from peon.cli.clients.files import ConfigFileError, unified_diff, write_atomically
from peon.cli.clients.registry import CLIENTS, status

PEON = "/opt/peon/bin/peon"


def target(tmp_path: Path, scope: str, workspace: Path | None = None, **env: str) -> Target:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir(exist_ok=True)
    project.mkdir(exist_ok=True)
    return Target(scope, project, workspace, home, {"PATH": "", **env}, PEON)  # PATH "": no client command


def apply(plan) -> None:
    for step in plan.steps:
        assert step.text is not None and not step.run, step
        write_atomically(step.path, step.text)


def written(plan) -> dict[Path, str]:
    return {step.path: step.text for step in plan.steps}


def test_the_command_line_names_every_client_of_the_table():
    assert set(setup.CLIENT_NAMES) == set(CLIENTS)


@pytest.mark.parametrize("name", sorted(CLIENTS))
@pytest.mark.parametrize("scope", ["user", "project"])
def test_a_second_run_changes_nothing(tmp_path, name, scope):
    module = CLIENTS[name]
    first = module.plan(target(tmp_path, scope))
    assert first.steps
    apply(first)
    again = module.plan(target(tmp_path, scope))
    assert again.steps == [], [step.path for step in again.steps]


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_a_project_scope_file_holds_nothing_of_this_machine(tmp_path, name, monkeypatch):
    monkeypatch.setenv("PATH", "/home/someone/.venv/bin:/usr/bin")
    plan = CLIENTS[name].plan(target(tmp_path, "project", PATH="/home/someone/.venv/bin:/usr/bin"))
    for path, text in written(plan).items():
        assert path.is_relative_to(tmp_path / "project"), path
        for word in (PEON, str(tmp_path), "/home/someone", "PATH"):
            assert word not in text, (path, word, text)
    servers = [server for path, text in written(plan).items() if path.name in ("mcp.json", ".mcp.json", "config.toml")
               for server in server_entries(path, text)]
    assert len(servers) == 1 and servers[0]["command"] == "peon" and servers[0]["args"][0] == "mcp"
    assert not servers[0].get("env")


def server_entries(path: Path, text: str) -> list[dict]:
    data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    table = data.get("mcp_servers") or data.get("mcpServers") or data.get("servers") or {}
    return [table["peon"]] if "peon" in table else []


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_a_user_scope_server_runs_this_peon_in_the_clients_directory(tmp_path, name):
    plan = CLIENTS[name].plan(target(tmp_path, "user"))
    [server] = [entry for path, text in written(plan).items() for entry in server_entries(path, text)]
    assert server["command"] == PEON
    assert server["args"] == ["mcp", "--workspace", "." if name in ("claude", "codex") else "${workspaceFolder}"]
    pinned = CLIENTS[name].plan(target(tmp_path, "user", workspace=tmp_path / "project"))
    [server] = [entry for path, text in written(pinned).items() for entry in server_entries(path, text)]
    assert server["args"] == ["mcp", "--workspace", str(tmp_path / "project")]


def test_claude_code_denies_its_own_file_and_shell_tools_and_keeps_other_rules(tmp_path):
    settings = tmp_path / "home" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{\n    "model": "opus",\n    "permissions": {"allow": ["WebFetch"], '
                        '"deny": ["Read(./.env)", "Bash"]}\n}\n')
    plan = claude.plan(target(tmp_path, "user"))
    apply(plan)
    data = json.loads(settings.read_text())
    assert data["model"] == "opus" and data["permissions"]["allow"] == ["WebFetch"]
    deny = data["permissions"]["deny"]
    assert deny[:2] == ["Read(./.env)", "Bash"] and deny.count("Bash") == 1
    assert {"Bash", "Read", "Write", "Edit", "MultiEdit", "Grep", "Glob", "NotebookEdit", "Monitor"} <= set(deny)
    assert settings.read_text().startswith('{\n    "model"')  # the file's own indentation
    state = json.loads((tmp_path / "home" / ".claude.json").read_text())
    assert state["mcpServers"]["peon"] == {"type": "stdio", "command": PEON, "args": ["mcp", "--workspace", "."],
                                           "env": {}}


def test_claude_code_through_its_own_cli_when_it_is_installed(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text("#!/bin/sh\n")
    (bin_dir / "claude").chmod(0o755)
    state = tmp_path / "home" / ".claude.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"oauthAccount": {"secret": "x"}, "mcpServers": {
        "peon": {"type": "stdio", "command": "/old/peon", "args": ["mcp"], "env": {}}}}))
    plan = claude.plan(target(tmp_path, "user", PATH=str(bin_dir)))
    [step] = [step for step in plan.steps if step.path == state]
    assert step.text is None and [run[1:4] for run in step.run] == [("mcp", "remove", "--scope"),
                                                                    ("mcp", "add-json", "--scope")]
    assert json.loads(step.run[-1][-1])["command"] == PEON
    assert "secret" not in step.before + step.after and step.label  # the diff shows Peon's entry only


def test_codex_keeps_comments_and_other_keys_and_turns_its_shell_off(tmp_path):
    config = tmp_path / "home" / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    original = ('# my settings\nmodel = "o3"  # the model\n\n[mcp_servers.docs]\ncommand = "docs-server"\n\n'
                '[mcp_servers.peon]\ncommand = "peon"\nargs = ["mcp"]\nenv_vars = ["ANTHROPIC_API_KEY"]\n'
                'enabled = false\n')
    config.write_text(original)
    plan = codex.plan(target(tmp_path, "user"))
    apply(plan)
    text = config.read_text()
    assert text.startswith('# my settings\nmodel = "o3"  # the model\n')
    data = tomllib.loads(text)
    assert data["mcp_servers"]["docs"] == {"command": "docs-server"}
    assert data["mcp_servers"]["peon"] == {"command": PEON, "args": ["mcp", "--workspace", "."],
                                           "env_vars": ["ANTHROPIC_API_KEY"], "tool_timeout_sec": 900}
    assert data["features"]["shell_tool"] is False and data["sandbox_mode"] == "read-only"
    assert "apply_patch" in " ".join(plan.notes)  # what Codex cannot turn off is said


def test_cursor_denies_its_cli_shell_and_file_tools_and_says_what_the_editor_keeps(tmp_path):
    plan = cursor.plan(target(tmp_path, "project"))
    apply(plan)
    cli = json.loads((tmp_path / "project" / ".cursor" / "cli.json").read_text())
    assert cli["permissions"]["deny"] == ["Shell(*)", "Read(**)", "Write(**)"]
    assert "no file" in " ".join(plan.notes)


def test_vscode_keeps_inputs_and_other_servers(tmp_path):
    config = tmp_path / "project" / ".vscode" / "mcp.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"inputs": [{"id": "key"}], "servers": {"other": {"command": "x"}}}))
    apply(vscode.plan(target(tmp_path, "project")))
    data = json.loads(config.read_text())
    assert data["inputs"] == [{"id": "key"}] and list(data["servers"]) == ["other", "peon"]
    assert data["servers"]["peon"]["type"] == "stdio"


@pytest.mark.parametrize("name, path, text", [
    ("vscode", ".vscode/mcp.json", '{\n  // my servers\n  "servers": {}\n}\n'),
    ("cursor", ".cursor/mcp.json", "[1, 2]"),
    ("claude", ".mcp.json", '{"mcpServers": []}'),
    ("codex", ".codex/config.toml", "model = \n"),
    ("codex", ".codex/config.toml", 'features = "all"\n'),
])
def test_a_file_it_cannot_edit_safely_is_refused_by_name(tmp_path, name, path, text):
    file = tmp_path / "project" / path
    file.parent.mkdir(parents=True)
    file.write_text(text)
    with pytest.raises(ConfigFileError, match=str(file) if name != "claude" else ".mcp.json"):
        CLIENTS[name].plan(target(tmp_path, "project"))
    assert file.read_text() == text


def test_an_atomic_write_keeps_the_mode_and_a_symbolic_links_link(tmp_path):
    real = tmp_path / "dotfiles" / "config.json"
    real.parent.mkdir()
    real.write_text("{}")
    real.chmod(0o600)
    link = tmp_path / "config.json"
    link.symlink_to(real)
    write_atomically(link, '{"a": 1}\n')
    assert link.is_symlink() and real.read_text() == '{"a": 1}\n'
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(os.listdir(real.parent)) == ["config.json"]  # no temporary file left behind
    new = tmp_path / "new" / "dir" / "file.toml"
    write_atomically(new, "x = 1\n")
    assert new.read_text() == "x = 1\n"


def test_the_diff_names_the_file_and_a_new_one_comes_from_dev_null(tmp_path):
    diff = unified_diff(tmp_path / "a.json", None, "{}\n")
    assert diff.startswith("--- /dev/null\n+++ " + str(tmp_path / "a.json")) and "+{}" in diff
    assert unified_diff(tmp_path / "a.json", "{}\n", "{}\n") == ""


def test_doctor_reads_back_where_peon_is_and_which_tools_are_still_on(tmp_path):
    for module in (claude, codex):
        (tmp_path / "home" / (".claude" if module is claude else ".codex")).mkdir(parents=True, exist_ok=True)
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    before = {found.client: found for found in status(project, home, {"PATH": ""})}
    assert set(before) == {"Claude Code", "Codex"}  # Cursor and VS Code are not on this machine
    assert before["Claude Code"].registered == {"user": None, "project": None}
    assert before["Claude Code"].builtins_off is False and "Bash" in before["Claude Code"].builtins
    assert before["Codex"].builtins_off is False
    apply(claude.plan(target(tmp_path, "user")))
    apply(codex.plan(target(tmp_path, "project")))
    after = {found.client: found for found in status(project, home, {"PATH": ""})}
    assert after["Claude Code"].registered["user"] == str(home / ".claude.json")
    assert after["Claude Code"].builtins_off is True
    assert after["Codex"].registered == {"user": None, "project": str(project / ".codex" / "config.toml")}
    assert after["Codex"].builtins_off is True


def test_a_server_entry_is_peons_when_it_runs_peon_mcp():
    assert is_peon_server({"command": "/x/bin/peon", "args": ["mcp", "--workspace", "."]})
    assert is_peon_server({"command": "/usr/bin/python3", "args": ["-m", "peon.cli", "mcp"]})
    assert not is_peon_server({"command": "peon", "args": ["serve"]})
    assert not is_peon_server({"command": "other-server", "args": ["mcp"]})
    assert not is_peon_server(["peon", "mcp"])
