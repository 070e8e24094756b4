"""Claude Code's ``claude mcp`` against ``peon mcp``: the real ``claude`` (``@anthropic-ai/claude-code``,
pinned in tests/js/package-lock.json with its native binary, installed by ``.ci/run``), with a private
HOME and no login. Without a model, what can be checked is what ``claude mcp`` checks — the server is
listed and connects — and what Claude Code's own MCP log records of the connection: the capabilities it
found, prompts and resources among them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from helpers import wait_for
from helpers.mcp import isolated_env, server_command

CLAUDE = Path(__file__).parent.parent / "js" / "node_modules" / ".bin" / "claude"
ESTABLISHED = "Connection established with capabilities: "

pytestmark = pytest.mark.skipif(not CLAUDE.exists(), reason="Claude Code is not installed: run .ci/run "
                                                             "(or npm ci --prefix tests/js)")


def claude_env(leftovers, home: Path) -> dict:
    env = isolated_env(leftovers, home)
    for name in [name for name in env if name.startswith(("ANTHROPIC_", "CLAUDE_"))]:
        del env[name]  # no credentials: listing servers needs no login
    # No telemetry, update check or other traffic beyond the MCP server it is asked about.
    env.update({"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"})
    return env


def test_claude_code_lists_peon_and_connects(leftovers, workspace, tmp_path):
    home = tmp_path / "home"
    env = claude_env(leftovers, home)
    project = tmp_path / "project"  # Claude Code's working directory: not the workspace, no .mcp.json
    project.mkdir()

    def claude(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(CLAUDE), *args], env=env, cwd=project, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    assert "Claude Code" in claude("--version").stdout
    claude("mcp", "add", "--scope", "user", "peon", "--", *server_command(workspace))
    claude("mcp", "add", "--scope", "user", "broken", "--", sys.executable, "-c", "raise SystemExit(3)")

    listed = claude("mcp", "list").stdout
    status = {line.split(":", 1)[0]: line for line in listed.splitlines() if ": " in line}
    assert "✔ Connected" in status.get("peon", ""), listed
    assert "Failed to connect" in status.get("broken", ""), listed  # the check can tell a server that fails
    got = claude("mcp", "get", "peon").stdout
    assert "Status: ✔ Connected" in got and "Type: stdio" in got, got

    established = [json.loads(line[line.index(ESTABLISHED) + len(ESTABLISHED):])
                   for log in home.glob("**/mcp-logs-peon/*.jsonl")
                   for line in (json.loads(raw).get("debug", "") for raw in log.read_text().splitlines())
                   if line.startswith(ESTABLISHED)]
    assert established, sorted(str(path) for path in home.rglob("*"))
    for capabilities in established:
        assert capabilities["hasTools"] and capabilities["hasPrompts"] and capabilities["hasResources"]
        assert capabilities["serverVersion"]["name"] == "peon"

    # Claude Code stops a server with SIGINT, then SIGTERM and SIGKILL a few hundred milliseconds apart:
    # whichever ends it, nothing of Peon's outlives it.
    def peons() -> list[int]:
        found = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            try:
                if any(str(workspace) in part for part in process.info["cmdline"] or ()):
                    found.append(process.info["pid"])
            except psutil.Error:
                continue
        return found

    assert wait_for(lambda: not peons(), 30), peons()
