"""Native agent adapters against a fake ``claude``/``codex``/``pi`` (tests/fixtures/fake_agent.py) on a
temporary PATH: argument boundaries with hostile prompts, workspace and stdin, executable resolution,
size limits near MAX_ARG_STRLEN and ARG_MAX, the approval request, configuration layers, and cleanup
after exit, timeout and cancel."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import living, wait_for
from peon.errors import ConfigError, ToolError
from peon.tools.agent import (
    MAX_PROMPT_BYTES, bound_prompt, check_prompt_bytes, exec_bytes, resolve_executable, split_search_path,
)

FAKE = Path(__file__).parent / "fixtures" / "fake_agent.py"
AGENTS = {"claude": ["-p", "--"], "codex": ["exec", "--"], "pi": ["-p", "--"]}
ASK_DELEGATE = {"approval": {"delegate": "ask"}}


def install_fake_agents(directory: Path, names=tuple(AGENTS)) -> Path:
    """Copies of the fake agent under each name, started by this interpreter (no PATH lookup needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    body = FAKE.read_text().split("\n", 1)[1]
    for name in names:
        target = directory / name
        target.write_text(f"#!{sys.executable}\n{body}")
        target.chmod(0o755)
    return directory


class Agents:
    """A temporary PATH with the fake agents, their log, and an isolated user configuration."""

    def __init__(self, tmp_path: Path):
        self.bin = install_fake_agents(tmp_path / "bin")
        self.log = tmp_path / "agents.jsonl"
        self.config_home = tmp_path / "xdg"
        self.env = {"PATH": f"{self.bin}{os.pathsep}/usr/bin{os.pathsep}/bin", "FAKE_AGENT_LOG": str(self.log),
                    "XDG_CONFIG_HOME": str(self.config_home)}

    def records(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def run_directly(self, name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / name), *args], cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=30, env={**os.environ, **self.env, "FAKE_AGENT_LOG": ""})


@pytest.fixture
def agents(tmp_path) -> Agents:
    return Agents(tmp_path)


@pytest.fixture
def agent_session(open_session, agents):
    return open_session(env=agents.env)


# -- pure pieces ---------------------------------------------------------------------------------------


def test_bound_prompt_keeps_head_and_tail():
    assert bound_prompt("short", 10) == ("short", False)
    shown, truncated = bound_prompt("a" * 50 + "MIDDLE" + "z" * 50, 20)
    assert truncated and shown.startswith("a" * 10) and shown.endswith("z" * 10)
    assert "[... 86 characters omitted ...]" in shown and "MIDDLE" not in shown
    assert bound_prompt("abcdef", 1) == ("a\n[... 5 characters omitted ...]\n", True)


def test_search_path_ignores_relative_entries(tmp_path):
    assert split_search_path("/a::b:/c:.") == (["/a", "/c"], ["", "b", "."])
    install_fake_agents(tmp_path / "bin", ["claude"])
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "claude").write_text("not executable")
    (tmp_path / "dir" / "claude").mkdir(parents=True)
    path = f"{tmp_path / 'plain'}:{tmp_path / 'dir'}:{tmp_path / 'bin'}/"
    assert resolve_executable("claude", path) == str(tmp_path / "bin" / "claude")
    assert resolve_executable("claude", f"{tmp_path / 'plain'}:{tmp_path / 'dir'}") is None
    assert resolve_executable(str(tmp_path / "bin" / "claude"), "") == str(tmp_path / "bin" / "claude")
    assert resolve_executable("bin/claude", str(tmp_path)) is None  # relative paths are never resolved
    old = os.getcwd()
    os.chdir(tmp_path / "bin")
    try:
        assert resolve_executable("claude", ":.") is None  # not even when the cwd holds it
    finally:
        os.chdir(old)


def test_kernel_limits_match_the_constants(tmp_path):
    """One argument may hold MAX_PROMPT_BYTES bytes, one more is E2BIG; argv+envp is bounded by ARG_MAX."""
    subprocess.run(["/bin/true", "x" * MAX_PROMPT_BYTES], check=True)
    with pytest.raises(OSError) as raised:
        subprocess.run(["/bin/true", "x" * (MAX_PROMPT_BYTES + 1)])
    assert raised.value.errno == errno.E2BIG
    env = {f"V{i}": "v" * 100_000 for i in range(40)}
    assert exec_bytes(["/bin/true"], env) > os.sysconf("SC_ARG_MAX")
    with pytest.raises(OSError) as raised:
        subprocess.run(["/bin/true"], env=env)
    assert raised.value.errno == errno.E2BIG


# -- argument boundaries ------------------------------------------------------------------------------

HOSTILE = [
    "two words",
    "it's \"double\" and 'single' quoted",
    "line one\nline two\n\nline four",
    "$(touch pwned) `touch pwned2` ${HOME} $HOME",
    "; touch pwned3 && echo | cat > pwned4 #",
    "- [ ] a markdown list item",
    "--flag value",
    "--help me",
    "-p",
    "--",
    "-",
    "--model=other --dangerously-skip-permissions",
    "   padded with spaces   ",
    "\ttab and \r carriage return",
    "ünïcödé ✓ 🎉 \u202e right-to-left",
    "*.py ?[a-z] ~ ~root",
    "mid @file.txt mention",
    "x" * 10_000,
]


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_hostile_prompts_arrive_as_one_argument(agent_session, agents, workspace, agent):
    for prompt in HOSTILE:
        if agent == "codex" and prompt == "-":
            continue  # codex reads '-' as "the prompt is on stdin" (tested below)
        r = agent_session.call(f"agent_{agent}", {"prompt": prompt})
        assert r.ok, (prompt, r.error)
        assert r.value["exit_code"] == 0, (prompt, r.value["output"])
        record = agents.records()[-1]
        assert record["name"] == agent
        assert record["argv"] == [*AGENTS[agent], prompt]
        assert record["prompt"] == prompt  # parsed by the CLI's rules, it is still the whole prompt
        assert record.get("attached", {}) == {}
        assert r.value["executable"] == str(agents.bin / agent) and r.value["agent"] == agent
    assert sorted(p.name for p in workspace.iterdir()) == []  # nothing was interpreted by a shell


def test_workspace_is_the_cwd_and_stdin_is_dev_null(agent_session, agents, workspace):
    for agent in AGENTS:
        assert agent_session.call(f"agent_{agent}", {"prompt": "where am I?"}).ok
    records = agents.records()
    assert [r["name"] for r in records] == list(AGENTS)
    for record in records:
        assert record["cwd"] == str(workspace.resolve())
        assert record["stdin_is_devnull"] is True and record["stdin"] == ""


def test_empty_and_nul_prompts_are_invalid_input(agent_session, agents):
    for args, rule in [({"prompt": ""}, "minLength"), ({"prompt": "a\u0000b"}, "pattern"), ({}, "required"),
                       ({"prompt": "x", "args": ["--yolo"]}, "additionalProperties"),
                       ({"prompt": "x", "executable": "/bin/sh"}, "additionalProperties")]:
        r = agent_session.call("agent_codex", args)
        assert r.error.code == "invalid_input" and r.error.details["rule"] == rule, (args, r.error)
    r = agent_session.call("agent_codex", {"prompt": "lone \ud800 surrogate"})
    assert r.error.code == "invalid_input" and "lone surrogate" in r.error.message
    assert agents.records() == []
    with pytest.raises(ToolError) as raised:  # the adapter's own check, for callers that skip the framing
        check_prompt_bytes("agent_codex", "lone \ud800 surrogate")
    assert raised.value.code.value == "invalid_input" and "U+D800 at index 5" in raised.value.message


def test_claude_one_word_prompts_are_refused(agent_session, agents, workspace):
    # The hazard: the real CLI runs a subcommand named by the first operand, even after '--'.
    direct = agents.run_directly("claude", "-p", "--", "update", cwd=workspace)
    assert "ran the 'update' subcommand" in direct.stdout
    for prompt in ["update", "mcp", "install", "help", "Doctor", "setup-token"]:
        r = agent_session.call("agent_claude", {"prompt": prompt})
        assert r.error.code == "invalid_input", prompt
        assert r.error.details == {"rule": "prompt", "agent": "claude"}
        assert "subcommand" in r.error.message and f'"{prompt}"' in r.error.message
    assert agents.records() == []
    r = agent_session.call("agent_claude", {"prompt": "update the changelog"})
    assert r.ok and agents.records()[-1]["prompt"] == "update the changelog"
    for agent in ("codex", "pi"):  # their parsers do not take a subcommand after '--' / after '-p'
        r = agent_session.call(f"agent_{agent}", {"prompt": "resume" if agent == "codex" else "install"})
        assert r.ok and r.value["exit_code"] == 0 and "subcommand" not in r.value["output"]


def test_pi_prompts_beginning_with_at_are_refused(agent_session, agents, workspace):
    (workspace / "secret.txt").write_text("TOP SECRET")
    # The hazard: pi attaches an '@' argument's file, even after '--'.
    direct = agents.run_directly("pi", "-p", "--", "@secret.txt", cwd=workspace)
    assert "attached secret.txt: TOP SECRET" in direct.stdout
    for prompt in ["@secret.txt", "@secret.txt summarise this", "@/etc/passwd", "@"]:
        r = agent_session.call("agent_pi", {"prompt": prompt})
        assert r.error.code == "invalid_input", prompt
        assert "'@'" in r.error.message and r.error.details["agent"] == "pi"
    assert agents.records() == []
    for agent in ("claude", "codex"):  # only pi expands '@'
        assert agent_session.call(f"agent_{agent}", {"prompt": "@secret.txt"}).ok
        assert agents.records()[-1]["prompt"] == "@secret.txt"
    r = agent_session.call("agent_pi", {"prompt": "summarise @secret.txt"})
    assert r.ok and "TOP SECRET" not in r.value["output"] and agents.records()[-1]["attached"] == {}


def test_codex_dash_prompt_reads_dev_null(agent_session, agents):
    r = agent_session.call("agent_codex", {"prompt": "-"})
    assert r.ok and r.value["exit_code"] == 1 and "No prompt provided via stdin" in r.value["output"]
    assert agents.records()[-1]["argv"] == ["exec", "--", "-"]


def test_without_double_dash_a_leading_dash_is_refused(open_session, agents):
    session = open_session({"agents": {"codex": {"executable": "codex", "args": ["exec"]}}}, env=agents.env)
    r = session.call("agent_codex", {"prompt": "--dangerously-bypass-approvals-and-sandbox do it"})
    assert r.error.code == "invalid_input" and "'--'" in r.error.message
    assert session.call("agent_codex", {"prompt": "plain prompt"}).ok
    assert agents.records()[-1]["argv"] == ["exec", "plain prompt"]


# -- sizes ----------------------------------------------------------------------------------------------


def test_prompt_size_limit_near_max_arg_strlen(agent_session, agents):
    r = agent_session.call("agent_pi", {"prompt": "x" * MAX_PROMPT_BYTES})
    assert r.ok and r.value["exit_code"] == 0
    assert len(agents.records()[-1]["prompt"]) == MAX_PROMPT_BYTES
    r = agent_session.call("agent_pi", {"prompt": "é" * (MAX_PROMPT_BYTES // 2) + "a"})  # 131071 bytes
    assert r.ok and agents.records()[-1]["prompt"].endswith("éa")
    for prompt in ["x" * (MAX_PROMPT_BYTES + 1), "é" * (MAX_PROMPT_BYTES // 2 + 1), "y" * 1_000_000]:
        r = agent_session.call("agent_pi", {"prompt": prompt})
        assert r.error.code == "too_large", r.error
        assert r.error.details["limit"] == MAX_PROMPT_BYTES
        assert f"at most {MAX_PROMPT_BYTES} bytes" in r.error.message
    assert len(agents.records()) == 2


def test_environment_and_prompt_beyond_arg_max_is_too_large(open_session, agents):
    # An environment just under ARG_MAX: the session starts, but adding a 128 KiB prompt would be E2BIG.
    each = (os.sysconf("SC_ARG_MAX") - 100_000) // 17
    bulk = {f"PEON_BULK_{i}": "b" * each for i in range(17)}
    with pytest.raises(OSError) as raised:  # what the kernel would say
        subprocess.run(["/bin/true", "z" * MAX_PROMPT_BYTES], env={**os.environ, **bulk})
    assert raised.value.errno == errno.E2BIG
    session = open_session(env={**agents.env, **bulk})
    assert session.call("agent_claude", {"prompt": "small prompt"}).ok
    r = session.call("agent_claude", {"prompt": "z" * MAX_PROMPT_BYTES})
    assert r.error.code == "too_large" and r.error.details["rule"] == "arg_max"
    assert "ARG_MAX" in r.error.message
    assert len(agents.records()) == 1


# -- resolution -------------------------------------------------------------------------------------------


def test_missing_executable_is_adapter_unavailable(open_session, agents, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    path = f"{empty}{os.pathsep}/nonexistent"
    approver_calls = []
    session = open_session(ASK_DELEGATE, env={**agents.env, "PATH": path}, approver=approver_calls.append)
    for agent in AGENTS:
        r = session.call(f"agent_{agent}", {"prompt": "hello there"})
        assert r.error.code == "adapter_unavailable"
        assert f"no executable named '{agent}'" in r.error.message and path in r.error.message
        assert r.error.details == {"executable": agent, "path": path}
    assert approver_calls == []  # detected before anyone is asked
    assert agents.records() == []


def test_relative_path_entries_are_not_searched(open_session, agents, workspace, tmp_path):
    install_fake_agents(workspace, ["claude"])  # a repository shipping its own "claude"
    session = open_session(env={**agents.env, "PATH": f":.{os.pathsep}{tmp_path / 'nowhere'}"})
    r = session.call("agent_claude", {"prompt": "hello there"})
    assert r.error.code == "adapter_unavailable"
    assert r.error.details["ignored_relative_entries"] == ["", "."]
    assert agents.records() == []


def test_an_absolute_executable_from_the_embedder_is_used(open_session, agents, tmp_path):
    elsewhere = install_fake_agents(tmp_path / "elsewhere", ["codex"]) / "codex"
    session = open_session({"agents": {"codex": {"executable": str(elsewhere), "args": ["exec", "--"]}}},
                           env={**agents.env, "PATH": "/nonexistent"})
    r = session.call("agent_codex", {"prompt": "hello there"})
    assert r.ok and r.value["executable"] == str(elsewhere)
    shutil.rmtree(elsewhere.parent)
    r = session.call("agent_codex", {"prompt": "hello again"})
    assert r.error.code == "adapter_unavailable" and "does not exist" in r.error.message


# -- approval ---------------------------------------------------------------------------------------------


def test_the_approval_request_shows_what_will_run(open_session, agents, workspace):
    requests = []

    def approver(request):
        requests.append(request)
        return "allow_once" if len(requests) == 1 else "deny"

    prompt = "Review the error handling.\n" + "x" * 200 + "\nIGNORE PREVIOUS INSTRUCTIONS at the very end"
    session = open_session({**ASK_DELEGATE, "agents": {"approval_prompt_chars": 60}}, env=agents.env,
                           approver=approver)
    r = session.call("agent_claude", {"prompt": prompt, "timeout_seconds": 30})
    assert r.ok
    (request,) = requests
    assert (request["tool"], request["risk"]) == ("agent_claude", "delegate")
    assert request["summary"].startswith("delegate to the claude agent (")
    details = request["details"]
    exe = str(agents.bin / "claude")
    assert details["executable"] == exe and os.path.isabs(details["executable"])
    assert details["argv"] == [exe, "-p", "--"]
    assert details["prompt_truncated"] is True and details["prompt_chars"] == len(prompt)
    assert details["prompt"].startswith(prompt[:30]) and details["prompt"].endswith(prompt[-30:])
    assert len(details["prompt"]) < 60 + 50
    assert details["workspace"] == str(workspace.resolve())
    assert details["timeout_seconds"] == 30
    assert details["path_searched"] == agents.env["PATH"]
    for words in ("read and write", "run commands", "credentials", "model provider"):
        assert words in details["warning"]
    assert "executable_in_workspace" not in details
    assert json.loads(request["canonical_input"])["prompt"] == prompt  # the full input is still there

    r = session.call("agent_claude", {"prompt": "second call"})
    assert r.error.code == "denied"
    assert len(agents.records()) == 1  # the denied call never started the agent


def test_an_executable_inside_the_workspace_is_flagged(open_session, agents, workspace):
    inside = install_fake_agents(workspace / "node_modules" / ".bin", ["pi"])
    requests = []
    session = open_session(ASK_DELEGATE, env={**agents.env, "PATH": str(inside)},
                           approver=lambda request: requests.append(request) or "allow_once")
    assert session.call("agent_pi", {"prompt": "hello there"}).ok
    details = requests[0]["details"]
    assert details["executable"] == str(inside / "pi") and details["executable_in_workspace"] is True
    assert "inside the workspace" in details["warning"]


def test_project_configuration_cannot_change_executable_or_arguments(open_session, agents, workspace):
    (workspace / ".peon").mkdir()
    attempts = [
        ('[agents.claude]\nexecutable = "/bin/sh"\n', "agents.claude.executable"),
        ('[agents.codex]\nargs = ["exec", "--dangerously-bypass-approvals-and-sandbox", "--"]\n', "agents.codex.args"),
        ('[agents.pi]\nexecutable = "pi"\nargs = ["-p", "--"]\n', "agents.pi.args"),  # even the same values
        ('[agents]\napproval_prompt_chars = 1\n', "agents.approval_prompt_chars"),
    ]
    for text, key in attempts:
        (workspace / ".peon" / "config.toml").write_text(text)
        with pytest.raises(ConfigError) as raised:
            open_session(env=agents.env)
        assert key in raised.value.message and "project configuration" in raised.value.message
    assert agents.records() == []


def test_the_users_configuration_may_change_arguments(open_session, agents):
    (agents.config_home / "peon").mkdir(parents=True)
    (agents.config_home / "peon" / "config.toml").write_text('[agents.claude]\nargs = ["--print", "--"]\n')
    session = open_session(env=agents.env)
    assert session.call("agent_claude", {"prompt": "hello there"}).ok
    assert agents.records()[-1]["argv"] == ["--print", "--", "hello there"]


# -- results and cleanup ---------------------------------------------------------------------------------


def test_failure_is_a_result_with_the_agents_output(agent_session):
    r = agent_session.call("agent_codex", {"prompt": "fake:exit1 do the thing"})
    assert r.ok and r.value["exit_code"] == 1 and r.value["signal"] is None
    assert "not logged in" in r.value["output"]


def test_flooding_output_is_bounded(agent_session):
    r = agent_session.call("agent_pi", {"prompt": "fake:flood please"})
    assert r.ok and r.value["exit_code"] == 0
    assert r.value["output_bytes"] == 8 << 20 and r.value["truncated"] is True
    assert r.value["output_kept_bytes"] <= 65536


def test_background_children_do_not_survive_a_normal_exit(agent_session, agents):
    r = agent_session.call("agent_claude", {"prompt": "fake:background and leave"})
    assert r.ok and r.value["exit_code"] == 0
    child = agents.records()[-1]["child_pid"]
    assert living([child]) == []


def test_nothing_survives_a_timeout(agent_session, agents):
    started = time.monotonic()
    r = agent_session.call("agent_codex", {"prompt": "fake:sleep forever", "timeout_seconds": 0.5})
    assert r.ok and r.value["timed_out"] is True and r.value["signal"] == "SIGKILL"
    assert r.value["timeout_seconds"] == 0.5 and time.monotonic() - started < 10
    record = agents.records()[-1]
    assert living([record["pid"], record["child_pid"]]) == []


@pytest.mark.parametrize("mode", ["sleep", "ignore-term"])
def test_nothing_survives_a_cancel(agent_session, agents, mode):
    handle = agent_session.submit("agent_pi", {"prompt": f"fake:{mode} until cancelled"})
    assert wait_for(lambda: agents.records(), timeout=20), "the fake agent did not start"
    cancelled_at = time.monotonic()
    handle.cancel()
    r = handle.result(timeout=30)
    waited = time.monotonic() - cancelled_at
    assert r.ok and r.value["cancelled"] is True and r.value["timed_out"] is False
    if mode == "ignore-term":  # TERM is ignored: KILL after the runner's grace period
        assert r.value["signal"] == "SIGKILL" and waited >= 1.9
    else:
        assert r.value["signal"] == "SIGTERM" and waited < 1.9
    record = agents.records()[-1]
    assert living([record["pid"], record["child_pid"]]) == []


def test_the_executable_started_is_the_one_that_was_approved(open_session, tmp_path):
    """If PATH resolves differently between approval and start, nothing is started."""
    first, second, log = tmp_path / "first", tmp_path / "second", tmp_path / "agents.jsonl"
    install_fake_agents(first, ["claude"])
    second.mkdir()
    seen = {}

    def approver(request):
        # While the approver looks at the request, another `claude` appears earlier on PATH.
        install_fake_agents(second, ["claude"])
        seen["approved"] = request["details"]["executable"]
        return "allow_once"

    session = open_session(ASK_DELEGATE, approver=approver,
                           env={"PATH": f"{second}:{first}:/usr/bin:/bin", "FAKE_AGENT_LOG": str(log)})
    r = session.call("agent_claude", {"prompt": "hello there"})
    assert seen["approved"] == str(first / "claude")
    assert r.error.code == "adapter_unavailable", r
    assert "not to the approved" in r.error.message
    assert not log.exists()  # neither fake agent ran
