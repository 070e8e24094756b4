"""``peon setup`` read back by the real clients: the pinned Claude Code (``@anthropic-ai/claude-code``) and Codex
(``@openai/codex``) of tests/js/package-lock.json, each with a private home and no login.

Claude Code is asked what it would offer a model — its ``system/init`` message lists the tools and the MCP
servers before it contacts any model, here an address on this machine where nothing listens — and
``claude mcp list`` connects to Peon. Codex parses its whole configuration for ``codex mcp list`` and
``codex features list`` (a key of the wrong type or an unknown sandbox mode fails them). Neither contacts
the network."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest

from helpers import wait_for
from peon.cli.clients.claude import DENIED

JS_BIN = Path(__file__).parent.parent / "js" / "node_modules" / ".bin"
CLAUDE, CODEX = JS_BIN / "claude", JS_BIN / "codex"
PEON = [sys.executable, "-m", "peon.cli"]
# The peon beside this Python: what a user-scope registration runs.
PEON_COMMAND = str(Path(sys.executable).parent / "peon")
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

needs_claude = pytest.mark.skipif(not CLAUDE.exists(), reason="Claude Code is not installed: run .ci/run (or npm ci "
                                                               "--prefix tests/js)")
needs_codex = pytest.mark.skipif(not CODEX.exists(), reason="Codex is not installed: run .ci/run (or npm ci "
                                                            "--prefix tests/js)")


@pytest.fixture
def project(tmp_path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "README.md").write_text("hello\n")
    return directory


def client_env(leftovers, tmp_path: Path, *path: Path | str) -> dict:
    """A private home, no credentials, no traffic beyond what is asked; ``path`` first on ``PATH``."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = leftovers.env({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                         "XDG_STATE_HOME": str(home / ".local" / "state"),
                         "PATH": os.pathsep.join([*(str(p) for p in path), SYSTEM_PATH])})
    for name in [name for name in env if name.startswith(("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_"))]:
        del env[name]
    env.update({"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"})
    return env


def run(argv: list[str], env: dict, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    if ok:
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done


def peon_setup(env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run([*PEON, "setup", *args], env, cwd)


def peons(marker: str) -> list[int]:
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(marker in part for part in process.info["cmdline"] or ()) and "mcp" in process.info["cmdline"]:
                found.append(process.info["pid"])
        except psutil.Error:
            continue
    return found


def closed_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return listener.getsockname()[1]


def offered_to_a_model(env: dict, cwd: Path) -> dict:
    """Claude Code's ``system/init`` message: the tools and MCP servers a model would be given."""
    env = {**env, "ANTHROPIC_API_KEY": "sk-ant-test-no-such-key",
           "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{closed_port()}"}  # nothing listens: no model is reached
    claude = subprocess.Popen([str(CLAUDE), "-p", "hello", "--output-format", "stream-json", "--verbose"], env=env,
                              cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, start_new_session=True)
    try:
        assert claude.stdout is not None
        for line in claude.stdout:
            message = json.loads(line)
            if message.get("type") == "system" and message.get("subtype") == "init":
                return message
        raise AssertionError("Claude Code printed no init message")
    finally:
        try:
            os.killpg(claude.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        claude.wait(30)


@needs_claude
def test_setup_claude_user_scope_puts_peon_in_place_of_claude_codes_own_tools(leftovers, tmp_path, project):
    env = client_env(leftovers, tmp_path, JS_BIN)  # claude on PATH: peon setup uses `claude mcp add-json`
    home = Path(env["HOME"])
    settings, state = home / ".claude" / "settings.json", home / ".claude.json"

    dry = peon_setup(env, project, "claude", "--scope", "user", "--dry-run")
    assert f"+++ {settings}" in dry.stdout and '+      "Bash",' in dry.stdout, dry.stdout
    assert "claude mcp add-json --scope user peon" in dry.stdout and "nothing was written" in dry.stdout
    assert not settings.exists() and not state.exists()

    done = peon_setup(env, project, "claude", "--scope", "user")
    assert "Peon is set up for Claude Code (user scope)" in done.stdout, done.stdout
    assert "WebFetch" in done.stdout  # what Claude Code keeps is said
    assert set(DENIED) <= set(json.loads(settings.read_text())["permissions"]["deny"])
    again = peon_setup(env, project, "claude", "--scope", "user")
    assert "nothing to change" in again.stdout and "+++" not in again.stdout, again.stdout

    listed = run([str(CLAUDE), "mcp", "list"], env, project).stdout
    status = {line.split(":", 1)[0]: line for line in listed.splitlines() if ": " in line}
    assert "✔ Connected" in status.get("peon", ""), listed
    assert PEON_COMMAND in status["peon"]

    # Claude Code does not wait long for a server before it answers: on a loaded machine Peon may still be
    # starting ("pending"), so ask again, as a person restarting it would, until a bound that only detects a hang.
    give_up = time.monotonic() + 240
    while True:
        init = offered_to_a_model(env, project)
        if {"name": "peon", "status": "connected", "source": "user"} in init["mcp_servers"]:
            break
        assert not set(init["tools"]) & set(DENIED), init["tools"]
        if time.monotonic() > give_up:
            break
    assert {"name": "peon", "status": "connected", "source": "user"} in init["mcp_servers"], init["mcp_servers"]
    tools = set(init["tools"])
    assert not tools & set(DENIED), sorted(tools & set(DENIED))
    assert {"mcp__peon__bash", "mcp__peon__read", "mcp__peon__write", "mcp__peon__edit",
            "mcp__peon__apply_patch"} <= tools, sorted(tools)

    doctor = json.loads(run([*PEON, "doctor", "--json", "--workspace", str(project)], env, project).stdout)
    [report] = [client for client in doctor["clients"] if client["client"] == "Claude Code"]
    assert report["registered"]["user"] == str(state) and report["builtins_off"] is True, report
    assert wait_for(lambda: not peons(str(project)) and not peons(PEON_COMMAND), 30)


@needs_claude
def test_setup_claude_project_scope_without_the_cli_writes_what_claude_code_reads(leftovers, tmp_path, project):
    bin_dir = Path(sys.executable).parent  # peon by name, as a teammate's PATH has it; no claude on PATH
    env = client_env(leftovers, tmp_path, bin_dir)
    done = peon_setup(env, project, "claude", "--scope", "project")
    shared = json.loads((project / ".mcp.json").read_text())
    assert shared == {"mcpServers": {"peon": {"type": "stdio", "command": "peon", "args": ["mcp", "--workspace", "."],
                                              "env": {}}}}
    assert set(DENIED) <= set(json.loads((project / ".claude" / "settings.json").read_text())["permissions"]["deny"])
    assert "approve peon" in done.stdout, done.stdout

    listed = run([str(CLAUDE), "mcp", "list"], env, project).stdout
    assert "peon: peon mcp --workspace . - ⏸ Pending approval" in listed, listed
    # What Claude Code records when a person trusts the project and approves its .mcp.json server:
    state = Path(env["HOME"]) / ".claude.json"
    data = json.loads(state.read_text())
    data.setdefault("projects", {}).setdefault(str(project), {})["hasTrustDialogAccepted"] = True
    state.write_text(json.dumps(data))
    (project / ".claude" / "settings.local.json").write_text('{"enabledMcpjsonServers": ["peon"]}')
    listed = run([str(CLAUDE), "mcp", "list"], env, project).stdout
    assert "peon: peon mcp --workspace . - ✔ Connected" in listed, listed
    assert wait_for(lambda: not peons(str(project)), 30)


@needs_codex
def test_setup_codex_user_scope_is_read_by_codex(leftovers, tmp_path, project):
    env = client_env(leftovers, tmp_path)
    config = Path(env["HOME"]) / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('# mine\nmodel = "gpt-5"\n\n[mcp_servers.docs]\ncommand = "docs-server"\n')

    dry = peon_setup(env, project, "codex", "--dry-run")
    assert '+[mcp_servers.peon]' in dry.stdout and "+shell_tool = false" in dry.stdout, dry.stdout
    assert config.read_text() == '# mine\nmodel = "gpt-5"\n\n[mcp_servers.docs]\ncommand = "docs-server"\n'

    peon_setup(env, project, "codex")
    assert config.read_text().startswith('# mine\nmodel = "gpt-5"\n')
    parsed = tomllib.loads(config.read_text())
    assert parsed["features"]["shell_tool"] is False and parsed["sandbox_mode"] == "read-only"
    assert "nothing to change" in peon_setup(env, project, "codex").stdout

    servers = {server["name"]: server for server in json.loads(run([str(CODEX), "mcp", "list", "--json"], env,
                                                                        project).stdout)}
    assert set(servers) == {"docs", "peon"}
    peon = servers["peon"]
    assert peon["enabled"] and peon["tool_timeout_sec"] == 900
    assert peon["transport"]["command"] == PEON_COMMAND and peon["transport"]["args"] == ["mcp", "--workspace", "."]
    listed = run([str(CODEX), "features", "list"], env, project).stdout
    features = dict(line.split()[::2] for line in listed.splitlines() if line.strip())
    assert features["shell_tool"] == "false", features

    doctor = json.loads(run([*PEON, "doctor", "--json", "--workspace", str(project)], env, project).stdout)
    [report] = [client for client in doctor["clients"] if client["client"] == "Codex"]
    assert report["registered"] == {"user": str(config), "project": None} and report["builtins_off"] is True, report


@needs_codex
def test_setup_codex_project_scope_is_read_in_a_trusted_project(leftovers, tmp_path, project):
    env = client_env(leftovers, tmp_path)
    user = Path(env["HOME"]) / ".codex" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(f'[projects."{project}"]\ntrust_level = "trusted"\n')  # as Codex keeps a person's "trust"
    done = peon_setup(env, project, "codex", "--scope", "project")
    assert "trust" in done.stdout
    shared = (project / ".codex" / "config.toml").read_text()
    assert str(tmp_path) not in shared and PEON_COMMAND not in shared
    [peon] = [server for server in json.loads(run([str(CODEX), "mcp", "list", "--json"], env, project).stdout)
              if server["name"] == "peon"]
    assert peon["transport"]["command"] == "peon" and peon["transport"]["args"] == ["mcp", "--workspace", "."]
    listed = run([str(CODEX), "features", "list"], env, project).stdout
    assert any(line.split()[::2] == ["shell_tool", "false"] for line in listed.splitlines()), listed


def test_setup_refuses_a_file_it_cannot_edit_and_writes_nothing(leftovers, tmp_path, project):
    env = client_env(leftovers, tmp_path)
    config = project / ".vscode" / "mcp.json"
    config.parent.mkdir()
    config.write_text('{\n  // servers\n  "servers": {}\n}\n')
    done = run([*PEON, "setup", "vscode", "--scope", "project"], env, project, ok=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert str(config) in done.stderr and "nothing was written" in done.stderr
    assert config.read_text() == '{\n  // servers\n  "servers": {}\n}\n'
    usage = run([*PEON, "setup", "emacs"], env, project, ok=False)
    assert usage.returncode == 2 and "invalid choice" in usage.stderr
