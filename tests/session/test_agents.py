"""Native agent adapters against a fake ``claude``/``codex``/``pi`` (tests/fixtures/fake_agent.py) on a
temporary PATH: argument boundaries with hostile prompts, workspace and stdin, executable resolution,
interpreters of scripts, what was approved is what runs, pi releases with and without ``--``, ``@``
mentions, size limits near MAX_ARG_STRLEN and ARG_MAX, the approval request, configuration layers, and
cleanup after exit, timeout and cancel."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import living, wait_for
from helpers.agents import PI_PACKAGE, Agents, fake_script, install_fake_agents, install_pi_package
from peon.core.errors import ConfigError, ToolError
from peon.tools.shared.agent import (
    MAX_PROMPT_BYTES, check_prompt_bytes, exec_bytes,
)
from peon.tools.shared.launch import pinned, resolve_program

AGENTS = {"claude": ["-p", "--"], "codex": ["exec", "--"], "pi": ["-p", "--"]}
ASK_DELEGATE = {"approval": {"delegate": "ask"}}


@pytest.fixture
def agents(tmp_path) -> Agents:
    return Agents(tmp_path)


@pytest.fixture
def agent_session(open_session, agents):
    return open_session(env=agents.env)


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


def test_claude_one_word_prompts_are_prompts(agent_session, agents, workspace):
    # Claude Code 2.x runs a subcommand only when it is the first argument; after "-p --" a word is a prompt.
    direct = agents.run_directly("claude", "update", cwd=workspace)
    assert "ran the 'update' subcommand" in direct.stdout  # the fake does dispatch subcommands
    direct = agents.run_directly("claude", "-p", "--", "update", cwd=workspace)
    assert "received a prompt of 6 bytes" in direct.stdout
    for prompt in ["update", "continue", "hi", "mcp", "install", "help", "Doctor", "setup-token"]:
        r = agent_session.call("agent_claude", {"prompt": prompt})
        assert r.ok and r.value["exit_code"] == 0, (prompt, r.error or r.value["output"])
        record = agents.records()[-1]
        assert record["prompt"] == prompt and "subcommand" not in record
        assert record["argv"] == ["-p", "--", prompt]
    for agent in ("codex", "pi"):  # their parsers do not take a subcommand after '--' / after '-p'
        r = agent_session.call(f"agent_{agent}", {"prompt": "resume" if agent == "codex" else "install"})
        assert r.ok and r.value["exit_code"] == 0 and "subcommand" not in r.value["output"]


def test_at_mentions_are_passed_as_written_and_shown_to_the_approver(open_session, agents, workspace, tmp_path):
    """One rule for '@' in every adapter: never refused, never rewritten; the approval request lists the
    files the agent's command line attaches by itself, flagging those outside the workspace."""
    (workspace / "notes.txt").write_text("NOTES")
    (workspace / "secret.txt").write_text("TOP SECRET")
    home = tmp_path / "home"
    requests = []
    session = open_session(ASK_DELEGATE, env={**agents.env, "HOME": str(home)},
                           approver=lambda request: requests.append(request) or "allow_once")

    r = session.call("agent_claude",
                     {"prompt": 'Compare @notes.txt with @~/.ssh/id_ed25519, @"a b.md" and @/etc/passwd'})
    assert r.ok and agents.records()[-1]["prompt"].startswith("Compare @notes.txt")
    mentions = requests[-1]["details"]["file_mentions"]
    assert mentions == [
        {"mention": "@notes.txt", "path": str(workspace / "notes.txt"), "outside_workspace": False},
        {"mention": "@~/.ssh/id_ed25519,", "path": str(home / ".ssh" / "id_ed25519,"), "outside_workspace": True},
        {"mention": "@a b.md", "path": str(workspace / "a b.md"), "outside_workspace": False},
        {"mention": "@/etc/passwd", "path": "/etc/passwd", "outside_workspace": True},
    ]
    assert "attaches for the model itself" in requests[-1]["details"]["warning"]
    assert "/etc/passwd" in requests[-1]["details"]["warning"]

    # pi attaches an argument that begins with '@' (even after '--'): passed, and shown.
    r = session.call("agent_pi", {"prompt": "@secret.txt"})
    assert r.ok and "attached secret.txt: TOP SECRET" in r.value["output"]
    assert requests[-1]["details"]["file_mentions"] == [
        {"mention": "@secret.txt", "path": str(workspace / "secret.txt"), "outside_workspace": False}]
    r = session.call("agent_pi", {"prompt": "summarise @secret.txt"})  # not at the start: plain text to pi
    assert r.ok and agents.records()[-1]["attached"] == {} and "file_mentions" not in requests[-1]["details"]

    r = session.call("agent_codex", {"prompt": "@secret.txt and @/etc/passwd"})  # codex exec attaches nothing
    assert r.ok and agents.records()[-1]["prompt"] == "@secret.txt and @/etc/passwd"
    assert "file_mentions" not in requests[-1]["details"]


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
    # The script's interpreter runs it: that is what starts, and what is shown first.
    assert details["interpreter"] == sys.executable and details["shebang"] == f"#!{sys.executable}"
    assert details["argv"] == [sys.executable, exe, "-p", "--"]
    pins = details["pinned"]
    assert pins["binary"]["path"] == os.path.realpath(sys.executable)
    assert pins["scripts"][0]["path"] == exe
    assert pins["scripts"][0]["sha256"] == hashlib.sha256((agents.bin / "claude").read_bytes()).hexdigest()
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
        assert r.value["signal"] == "SIGTERM"  # TERM ended it: no KILL grace was waited
        assert waited < 20, "a hang guard, not a speed claim"
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


def pi_session(open_session, tmp_path, version, *, name=PI_PACKAGE, approver=None):
    prefix = tmp_path / f"pi-{version}"
    install_pi_package(prefix, version, name)
    log = tmp_path / f"pi-{version}.jsonl"
    env = {"PATH": f"{prefix / 'bin'}:/usr/bin:/bin", "FAKE_AGENT_LOG": str(log)}
    config = ASK_DELEGATE if approver else None
    session = open_session(config, env=env, approver=approver)
    return session, prefix, lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_an_older_pi_gets_no_double_dash_and_refuses_dash_prompts(open_session, tmp_path, workspace):
    requests = []
    session, prefix, records = pi_session(open_session, tmp_path, "0.80.3",
                                          approver=lambda request: requests.append(request) or "allow_once")
    # The release itself rejects "--", as pi before 0.84.3 does: with it, every prompt would fail.
    direct = subprocess.run([str(prefix / "bin" / "pi"), "-p", "--", "hi"], capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=30)
    assert direct.returncode == 1 and "Error: Unknown option: --" in direct.stderr
    for prompt in ["hi", "two words", "--- a yaml document", "$(touch x) 'quoted'", "x" * 1000]:
        if prompt.startswith("-"):
            continue
        r = session.call("agent_pi", {"prompt": prompt})
        assert r.ok and r.value["exit_code"] == 0, (prompt, r.error or r.value["output"])
        assert records()[-1]["argv"] == ["-p", prompt] and records()[-1]["prompt"] == prompt
    details = requests[-1]["details"]
    package = prefix / "lib" / "node_modules" / PI_PACKAGE / "package.json"
    assert details["argv"][-1:] == ["-p"] and "--" not in details["argv"]
    assert (details["pi_version"], details["pi_package"], details["pi_double_dash"]) == ("0.80.3", str(package), False)
    count = len(records())
    for prompt in ["- [ ] a markdown item", "--help", "-p", "---"]:
        r = session.call("agent_pi", {"prompt": prompt})
        assert r.error.code == "invalid_input" and r.error.details == {"rule": "prompt", "agent": "pi"}, prompt
        assert "this pi (0.80.3, per" in r.error.message and "from 0.84.3 on" in r.error.message
    assert len(records()) == count and not (workspace / "x").exists()


def test_pi_from_0_84_3_gets_double_dash_and_takes_dash_prompts(open_session, tmp_path):
    session, _, records = pi_session(open_session, tmp_path, "0.84.3", name="@earendil-works/pi-coding-agent")
    for prompt in ["hi", "- [ ] a markdown item", "--help me", "-p"]:
        r = session.call("agent_pi", {"prompt": prompt})
        assert r.ok and r.value["exit_code"] == 0, (prompt, r.error or r.value["output"])
        assert records()[-1]["argv"] == ["-p", "--", prompt] and records()[-1]["prompt"] == prompt


def test_a_pi_of_unknown_or_prerelease_version_is_treated_as_older(open_session, tmp_path):
    bin_dir, log = tmp_path / "bin", tmp_path / "pi.jsonl"
    bin_dir.mkdir()
    session = open_session(env={"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_AGENT_LOG": str(log)})
    for version, name, why in [("0.84.3-beta.1", PI_PACKAGE, "this pi (0.84.3-beta.1"),
                               (None, PI_PACKAGE, "has no version"),
                               ("9.9.9", "@someone/pi-fork", "is not pi's package")]:
        prefix = tmp_path / f"prefix-{name.replace('/', '_')}-{version}"
        install_pi_package(prefix, version, name)
        (bin_dir / "pi").unlink(missing_ok=True)
        (bin_dir / "pi").symlink_to(prefix / "bin" / "pi")
        r = session.call("agent_pi", {"prompt": "hello there"})
        assert r.ok and r.value["exit_code"] == 0, (version, r.error or r.value["output"])
        assert json.loads(log.read_text().splitlines()[-1])["argv"] == ["-p", "hello there"]
        r = session.call("agent_pi", {"prompt": "-v"})
        assert r.error.code == "invalid_input" and why in r.error.message, (version, r.error)


def test_a_bare_pi_script_without_a_package_is_treated_as_older(open_session, agents, tmp_path):
    bare = install_fake_agents(tmp_path / "bare", ["pi"], pi_version=None)
    session = open_session(env={**agents.env, "PATH": f"{bare}:/usr/bin:/bin"})
    assert session.call("agent_pi", {"prompt": "hello there"}).ok
    assert agents.records()[-1]["argv"] == ["-p", "hello there"]
    r = session.call("agent_pi", {"prompt": "--version"})
    assert r.error.code == "invalid_input" and "no package.json of pi within 3 directories" in r.error.message


@pytest.fixture
def interpreted(tmp_path, workspace):
    """codex as a '#!/usr/bin/env fakenode' script, 'fakenode' (this interpreter under another name) in
    an absolute PATH entry, and a planted 'fakenode' in the workspace that leaves a marker if it runs."""

    class Layout:
        bin = tmp_path / "agents-bin"
        node_dir = tmp_path / "node-bin"
        log = tmp_path / "agents.jsonl"
        marker = tmp_path / "planted-ran"

        def codex(self, shebang: str) -> Path:
            return fake_script(self.bin / "codex", shebang)

        def env(self, path: str) -> dict:
            return {"PATH": path, "FAKE_AGENT_LOG": str(self.log), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}

        def records(self) -> list[dict]:
            return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    layout = Layout()
    layout.node_dir.mkdir()
    (layout.node_dir / "fakenode").symlink_to(sys.executable)
    planted = workspace / "fakenode"
    planted.write_text(f"#!/bin/sh\necho planted > {layout.marker}\n")
    planted.chmod(0o755)
    return layout


def test_the_interpreter_of_a_script_is_found_in_absolute_path_entries_only(open_session, interpreted, workspace):
    interpreted.codex("#!/usr/bin/env fakenode")
    requests = []
    # An empty entry first (the workspace, for every command), then "." and a relative one.
    path = f":.:relative:{interpreted.bin}:{interpreted.node_dir}:/usr/bin:/bin"
    session = open_session(ASK_DELEGATE, env=interpreted.env(path),
                           approver=lambda request: requests.append(request) or "allow_once")
    r = session.call("agent_codex", {"prompt": "hello there"})
    assert r.ok and r.value["exit_code"] == 0, r.error or r.value["output"]
    assert not interpreted.marker.exists(), "the workspace's fakenode ran"
    node = str(interpreted.node_dir / "fakenode")
    script = str(interpreted.bin / "codex")
    details = requests[0]["details"]
    assert details["interpreter"] == node and details["shebang"] == "#!/usr/bin/env fakenode"
    assert details["argv"] == [node, script, "exec", "--"]
    assert details["executable"] == script and details["executable_realpath"] == script
    assert r.value["interpreter"] == node and r.value["executable"] == script
    record = interpreted.records()[-1]
    assert record["argv0"] == script and record["argv"] == ["exec", "--", "hello there"]
    # The agent's own environment has no relative PATH entry left for env or anything else to use.
    assert record["env"]["PATH"] == f"{interpreted.bin}:{interpreted.node_dir}:/usr/bin:/bin"


def test_an_interpreter_only_in_the_workspace_is_adapter_unavailable(open_session, interpreted, workspace):
    interpreted.codex("#!/usr/bin/env fakenode")
    approver_calls = []
    session = open_session(ASK_DELEGATE, env=interpreted.env(f":{interpreted.bin}:/usr/bin:/bin"),
                           approver=approver_calls.append)
    r = session.call("agent_codex", {"prompt": "hello there"})
    assert r.error.code == "adapter_unavailable", r
    assert "runs 'fakenode' ('#!/usr/bin/env fakenode')" in r.error.message
    assert "no executable 'fakenode' in the absolute entries of PATH" in r.error.message
    assert approver_calls == [] and not interpreted.marker.exists() and interpreted.records() == []


def test_interpreters_that_would_be_looked_up_in_the_workspace_are_refused(open_session, interpreted):
    session = open_session(env=interpreted.env(f"{interpreted.bin}:{interpreted.node_dir}:/usr/bin:/bin"))
    for shebang, why in [("#!fakenode", "relative interpreter 'fakenode'"),
                         ("#!./fakenode", "relative interpreter './fakenode'"),
                         ("#!/usr/bin/env ./fakenode", "relative program './fakenode'"),
                         ("#!/usr/bin/env fakenode -u", "whole name"),
                         ("#!/nonexistent/node", "/nonexistent/node cannot be opened")]:
        interpreted.codex(shebang)
        r = session.call("agent_codex", {"prompt": "hello there"})
        assert r.error.code == "adapter_unavailable" and why in r.error.message, (shebang, r.error)
    assert not interpreted.marker.exists() and interpreted.records() == []


def test_env_split_string_and_nested_interpreters(open_session, interpreted, tmp_path):
    # "-S" passes words to the interpreter; a shell-script interpreter is followed too (as the kernel does).
    interpreted.codex("#!/usr/bin/env -S fakenode -u")
    session = open_session(env=interpreted.env(f"{interpreted.bin}:{interpreted.node_dir}:/usr/bin:/bin"))
    r = session.call("agent_codex", {"prompt": "hello there"})
    assert r.ok and r.value["exit_code"] == 0, r.error or r.value["output"]
    assert interpreted.records()[-1]["argv"] == ["exec", "--", "hello there"]

    chain = tmp_path / "chain"
    chain.mkdir()
    previous = str(interpreted.node_dir / "fakenode")
    for level in range(5):  # a script whose interpreter is a script... five deep: one more than the kernel allows
        link = chain / f"level{level}"
        link.write_text(f"#!{previous}\n")
        link.chmod(0o755)
        previous = str(link)
    interpreted.codex(f"#!{previous}")
    r = session.call("agent_codex", {"prompt": "hello there"})
    assert r.error.code == "adapter_unavailable" and "more than 4 nested scripts" in r.error.message


# -- what was approved is what runs -----------------------------------------------------------------------------


def two_versions(tmp_path: Path) -> tuple[Path, Path, Path]:
    """bin/claude -> v1/claude; v2/claude is another program that leaves a marker."""
    v1 = fake_script(tmp_path / "v1" / "claude")
    v2 = tmp_path / "v2" / "claude"
    v2.parent.mkdir()
    v2.write_text(f"#!/bin/sh\necho swapped > {tmp_path / 'swapped-ran'}\n")
    v2.chmod(0o755)
    link = tmp_path / "bin" / "claude"
    link.parent.mkdir()
    link.symlink_to(v1)
    return link, v1, v2


def test_repointing_a_link_after_approval_starts_nothing(open_session, tmp_path):
    link, _, v2 = two_versions(tmp_path)
    log = tmp_path / "agents.jsonl"

    def approver(request):
        link.unlink()
        link.symlink_to(v2)  # while the approver looks, the approved path is re-pointed
        return "allow_once"

    session = open_session(ASK_DELEGATE, approver=approver,
                           env={"PATH": f"{link.parent}:/usr/bin:/bin", "FAKE_AGENT_LOG": str(log)})
    r = session.call("agent_claude", {"prompt": "hello there"})
    assert r.error.code == "adapter_unavailable", r
    assert "nothing was started" in r.error.message and r.error.details["rule"] == "pinned"
    assert not (tmp_path / "swapped-ran").exists() and not log.exists()


def test_changing_the_approved_file_in_place_starts_nothing(open_session, tmp_path):
    """Same inode, size and modification time (restored): only the content hash tells, and it does."""
    link, v1, _ = two_versions(tmp_path)
    log = tmp_path / "agents.jsonl"

    def approver(request):
        info = v1.stat()
        data = v1.read_bytes()
        tampered = data.replace(b"import json", b"import  sys", 1)  # same length, different program
        assert len(tampered) == len(data) and tampered != data
        with open(v1, "r+b") as f:
            f.write(tampered)
        os.utime(v1, ns=(info.st_atime_ns, info.st_mtime_ns))
        return "allow_once"

    session = open_session(ASK_DELEGATE, approver=approver,
                           env={"PATH": f"{link.parent}:/usr/bin:/bin", "FAKE_AGENT_LOG": str(log)})
    r = session.call("agent_claude", {"prompt": "hello there"})
    assert r.error.code == "adapter_unavailable", r
    assert "its content is not the approved content (SHA-256)" in r.error.message
    assert not log.exists()


def test_the_pinned_binary_runs_even_if_its_path_is_replaced_and_its_descriptor_is_not_inherited(tmp_path):
    """The mechanism: the binary is executed through the descriptor that was checked."""
    program_path = tmp_path / "prog"
    shutil.copy("/bin/sh", program_path)
    program = resolve_program(str(program_path), "/usr/bin:/bin")
    with pinned(program, program.pins()) as exec_path:
        fd = int(exec_path.rsplit("/", 1)[1])
        program_path.unlink()
        shutil.copy("/bin/false", program_path)  # replaced after the check
        read_end, write_end = os.pipe()
        script = f"test -e /proc/$$/fd/{fd} && echo LEAKED || echo CLEAN; exit 7"
        pid = os.posix_spawn(exec_path, [str(program_path), "-c", script], {"PATH": "/usr/bin:/bin"},
                             file_actions=[(os.POSIX_SPAWN_DUP2, write_end, 1)])
        os.close(write_end)
        _, status = os.waitpid(pid, 0)
        output = os.read(read_end, 100).decode()
        os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 7  # /bin/sh ran, not the /bin/false now at the path
    assert output == "CLEAN\n"
    with pytest.raises(ToolError, match="changed since it was approved: it is no longer the same file"), \
            pinned(program, program.pins()):
        pass


def test_the_agents_environment_never_waits_on_a_person(open_session, agents):
    session = open_session(env={**agents.env, "EDITOR": "vim", "PAGER": "less", "GIT_ASKPASS": "/usr/bin/ksshaskpass"})
    assert session.call("agent_codex", {"prompt": "hello there"}).ok
    env = agents.records()[-1]["env"]
    assert (env["EDITOR"], env["GIT_EDITOR"], env["PAGER"], env["GIT_PAGER"]) == ("false", "false", "cat", "cat")
    assert (env["GIT_TERMINAL_PROMPT"], env["GIT_ASKPASS"], env["SSH_ASKPASS_REQUIRE"]) == ("0", "false", "never")
