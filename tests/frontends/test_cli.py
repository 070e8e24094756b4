"""The ``peon`` command line, run as a real subprocess (and under a pseudo-terminal where it matters)."""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pexpect
import pytest

from helpers import living, wait_for
from helpers.agents import fake_script, install_pi_package
from helpers.cli import PEON, assert_clean_failure, isolated_env, peon


# -- peon call -------------------------------------------------------------------------------------


def test_call_prints_the_result_as_json(leftovers, workspace):
    proc = peon(leftovers, workspace, "call", "bash", '{"command": "echo hi; exit 3"}', "--allow", "process")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ok"] is True and result["tool"] == "bash"
    assert result["value"]["exit_code"] == 3 and result["value"]["output"] == "hi\n"


def test_call_reads_input_from_stdin_and_uses_the_workspace(leftovers, workspace, tmp_path):
    proc = peon(leftovers, tmp_path, "call", "bash", "-", "--workspace", str(workspace), "--allow", "process",
                input='{"command": "pwd"}')
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["value"]["output"] == f"{workspace.resolve()}\n"


def test_tool_errors_exit_1(leftovers, workspace):
    invalid = peon(leftovers, workspace, "call", "bash", '{"command": 1}', "--allow", "process")
    assert invalid.returncode == 1
    assert json.loads(invalid.stdout)["error"]["code"] == "invalid_input"
    unknown = peon(leftovers, workspace, "call", "nope", "{}")
    assert unknown.returncode == 1
    assert json.loads(unknown.stdout)["error"]["code"] == "unknown_tool"


def test_without_a_terminal_asking_means_deny(leftovers, workspace):
    proc = peon(leftovers, workspace, "call", "bash", '{"command": "touch ran"}')
    assert proc.returncode == 1, proc.stdout
    assert json.loads(proc.stdout)["error"]["code"] == "denied"
    assert not (workspace / "ran").exists()


@pytest.mark.parametrize("args, words", [
    (["call", "bash", '{"command": '], ["not valid JSON"]),
    (["call", "bash", '{"command": "true"}', "--workspace", "/nonexistent/ws"],
     ["/nonexistent/ws", "not an existing directory"]),
    (["call", "bash", "{}", "--allow", "everything"], ["invalid choice", "everything"]),
    (["call", "bash"], ["required"]),
    (["frobnicate"], ["invalid choice"]),
    ([], ["required"]),
    (["tools", "--config", "/nonexistent/peon.toml"], ["/nonexistent/peon.toml", "does not exist"]),
])
def test_bad_usage_is_one_clear_message(leftovers, workspace, args, words):
    assert_clean_failure(peon(leftovers, workspace, *args), 2, *words)


def test_invalid_config_names_file_and_key(leftovers, workspace, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[limits]\nmax_timeout_seconds = "soon"\n')
    proc = peon(leftovers, workspace, "call", "bash", '{"command": "true"}', "--config", str(config), "--allow",
                "process")
    assert_clean_failure(proc, 2, str(config), "limits.max_timeout_seconds")


def test_mcp_with_a_bad_configuration_exits_before_speaking(leftovers, workspace, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[approval]\nprocess = 'sometimes'\n")
    proc = peon(leftovers, workspace, "mcp", "--config", str(config), input="")
    assert_clean_failure(proc, 2, str(config), "approval.process")
    assert proc.stdout == ""  # nothing but protocol messages on stdout, and there were none
    missing = peon(leftovers, workspace, "mcp", "--workspace", "/nonexistent/ws", input="")
    assert_clean_failure(missing, 2, "/nonexistent/ws")
    assert missing.stdout == ""


def test_config_file_and_allow_flags_combine(leftovers, workspace, tmp_path):
    config = tmp_path / "peon.toml"
    config.write_text("[limits]\nmax_timeout_seconds = 0.5\n")
    proc = peon(leftovers, workspace, "call", "bash", '{"command": "sleep 30"}', "--config", str(config), "--allow",
                "process")
    assert proc.returncode == 0, proc.stderr
    value = json.loads(proc.stdout)["value"]
    assert value["timed_out"] is True and value["timeout_seconds"] == 0.5


# -- peon call on a terminal -----------------------------------------------------------------------


def spawn(leftovers, workspace: Path, *args: str) -> pexpect.spawn:
    # As a user's terminal would: Ctrl-C and hang-up reach it with their default handling even when the
    # suite itself runs with them ignored (a shell starts a background command so, `nohup` too).
    return pexpect.spawn(PEON[0], [*PEON[1:], *args], cwd=str(workspace), env=isolated_env(leftovers, workspace),
                         encoding="utf-8", timeout=60, dimensions=(40, 200), preexec_fn=_default_signals)


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("key, ok", [("o", True), ("d", False)])
def test_interactive_approval_on_a_terminal(leftovers, workspace, key, ok):
    child = spawn(leftovers, workspace, "call", "bash", '{"command": "echo approved > marker"}')
    child.expect("Peon asks for approval")
    child.expect(r"Answer \[")
    child.sendline(key)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == (0 if ok else 1), child.before
    assert (workspace / "marker").exists() is ok


def test_live_progress_line_on_a_terminal(leftovers, workspace):
    child = spawn(leftovers, workspace, "call", "bash", '{"command": "echo start; sleep 2"}', "--allow", "process")
    child.expect(r"bash: running for \d+\.\d s, 6 bytes of output · start")  # the newest line too
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_cancels_the_call(leftovers, workspace):
    pid_file = workspace / "pids"
    child = spawn(leftovers, workspace, "call", "bash",
                  json.dumps({"command": f"echo $$ > {pid_file}; sleep 300 & echo $! >> {pid_file}; wait"}),
                  "--allow", "process")
    assert wait_for(lambda: len(pid_file.read_text().split()) == 2 if pid_file.exists() else False, 30)
    pids = [int(p) for p in pid_file.read_text().split()]
    child.sendintr()
    child.expect("cancelling")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert "── bash: cancelled · killed by SIGTERM" in child.before  # the result, for a person
    assert not living(pids)


# -- peon tools / skills ---------------------------------------------------------------------------


def test_tools_table_and_json(leftovers, workspace):
    table = peon(leftovers, workspace, "tools")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "RISK", "DESCRIPTION"]
    assert any(line.split()[:2] == ["bash", "process"] for line in lines[1:])

    listed = peon(leftovers, workspace, "tools", "--json")
    tools = {t["name"]: t for t in json.loads(listed.stdout)}
    assert tools["bash"]["input_schema"]["required"] == ["command"]
    assert tools["bash"]["risk"] == "process" and "output_schema" in tools["bash"]


def test_skills_lists_discovered_skills_and_skip_reasons(leftovers, workspace):
    good = workspace / ".peon" / "skills" / "release-checks"
    good.mkdir(parents=True)
    (good / "SKILL.md").write_text("---\nname: release-checks\ndescription: Checks before a release.\n---\nSteps.\n")
    bad = workspace / ".peon" / "skills" / "Bad_Name"
    bad.mkdir()
    (bad / "SKILL.md").write_text("---\nname: Bad_Name\ndescription: x\n---\n")
    proc = peon(leftovers, workspace, "skills")
    assert proc.returncode == 0, proc.stderr
    assert "release-checks" in proc.stdout and "Checks before a release." in proc.stdout
    assert "Skipped:" in proc.stdout and "Bad_Name" in proc.stdout
    report = json.loads(peon(leftovers, workspace, "skills", "--json").stdout)
    assert [s["name"] for s in report["available"]] == ["release-checks"]
    assert len(report["skipped"]) == 1 and report["skipped"][0]["reason"]


def test_skills_names_what_is_missing_in_its_own_words(leftovers, workspace):
    (workspace / ".peon").symlink_to("missing-dir")  # the project skill root's way leads nowhere
    proc = peon(leftovers, workspace, "skills", "--json")
    assert proc.returncode == 0, proc.stderr
    [skipped] = json.loads(proc.stdout)["skipped"]
    assert "there is no 'missing-dir'" in skipped["reason"]
    assert "write" not in skipped["reason"]  # the write tool's wording is no skill's business


def test_skills_says_when_there_are_none(leftovers, workspace):
    proc = peon(leftovers, workspace, "skills")
    assert proc.returncode == 0 and "No skills discovered." in proc.stdout


# -- peon doctor -----------------------------------------------------------------------------------


def test_doctor_reports_the_facts(leftovers, workspace, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (workspace / ".peon").mkdir()
    (workspace / ".peon" / "config.toml").write_text("[limits]\nmax_timeout_seconds = 30.0\n")
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    proc = peon(leftovers, workspace, "doctor", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["python"]["version"] == platform.python_version()
    assert facts["kernel"]["release"] == platform.release()
    assert facts["containment"]["kind"] in ("cgroup", "process-tree")
    assert isinstance(facts["cgroup_v2"]["available"], bool)
    assert facts["subreaper"]["supported"] is True
    assert facts["openat2"]["available"] in (True, False, "unknown")
    assert facts["agents"]["claude"]["resolved"] == str(fake)
    assert facts["agents"]["claude"]["argv"] == ["/bin/sh", str(fake), "-p", "--", "<prompt>"]
    assert facts["agents"]["codex"]["executable"] == "codex"
    sources = [layer["source"] for layer in facts["config"]["layers"]]
    assert sources[0] == "defaults"
    project = [layer for layer in facts["config"]["layers"] if layer["source"].endswith(".peon/config.toml")]
    assert project and project[0]["keys"] == ["limits.max_timeout_seconds"]
    assert facts["redaction"] == {"enabled": True, "allow": [], "engine": "hyperscan"}

    text = peon(leftovers, workspace, "doctor", env=env)
    assert text.returncode == 0, text.stderr
    for label in ("python", "kernel", "containment", "cgroup v2", "subreaper", "openat2", "temp dir", "agents",
                  "config layers", "redaction    on: one Hyperscan pass"):
        assert label in text.stdout
    assert str(fake) in text.stdout


def test_doctor_reports_a_session_that_cannot_start_and_fails(leftovers, workspace, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[nonsense]\nx = 1\n")
    proc = peon(leftovers, workspace, "doctor", "--config", str(config))
    assert proc.returncode == 2, proc.stderr  # an invalid configuration, as for every other command
    assert "session failed to start" in proc.stdout and "nonsense" in proc.stdout
    assert "a session cannot start here" in proc.stderr and "Traceback" not in proc.stderr


def test_without_a_writable_temp_directory_doctor_says_so_and_a_session_still_runs(leftovers):
    """A session needs no temporary directory of its own (its channels are inherited socket pairs); doctor still
    shows the fact, since the commands a session runs may want one."""
    # Every candidate of tempfile (TMPDIR, /tmp, /var/tmp, /usr/tmp, the current directory) unusable: /tmp and
    # /var/tmp bound read-only over themselves, in a mount namespace of this test's own (-r: as any user), with
    # the workspace outside them. Their content stays readable (the Python running Peon may live there), and
    # --rbind takes the mounts beneath them along: a mount namespace of one's own may not leave them out.
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -rm (a private mount namespace) is not permitted here")
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("the workspace needs a writable directory outside /tmp: /dev/shm is not")
    read_only = [d for d in ("/tmp", "/var/tmp", "/usr/tmp") if os.path.isdir(d) and not os.path.islink(d)]
    script = " && ".join(f"mount --rbind {d} {d} && mount -o remount,bind,ro {d}" for d in read_only) \
        + ' && cd /tmp && exec "$@"'
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="peon-test-") as base:
        workspace = Path(base) / "ws"
        workspace.mkdir()
        env = isolated_env(leftovers, workspace, {"TMPDIR": f"{base}/absent"})
        runs = {}
        for args in (["doctor"], ["call", "bash", '{"command": "echo ran"}', "--allow", "process", "--json"]):
            runs[args[0]] = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", *PEON, *args,
                                            "--workspace", str(workspace)],
                                           capture_output=True, text=True, timeout=90, env=env)
    doctor = runs["doctor"]
    assert doctor.returncode == 0, (doctor.stdout, doctor.stderr)
    assert "Traceback" not in doctor.stderr
    assert "temp dir     no:" in doctor.stdout and "set TMPDIR to a writable directory" in doctor.stdout
    call = runs["call"]
    assert call.returncode == 0 and json.loads(call.stdout)["value"]["output"] == "ran\n", (call.stdout, call.stderr)


def test_doctor_fails_when_the_project_configuration_is_refused(leftovers, workspace):
    (workspace / ".peon").mkdir()
    (workspace / ".peon" / "config.toml").write_text('[approval]\nprocess = "allow"\n')
    proc = peon(leftovers, workspace, "doctor", "--json")
    assert proc.returncode == 2, proc.stdout
    facts = json.loads(proc.stdout)
    assert "may only tighten" in facts["containment"]["error"] and "approval.process" in facts["containment"]["error"]


def test_doctor_resolves_agents_as_the_adapters_do(leftovers, workspace, tmp_path):
    """Relative PATH entries are not searched, a script's interpreter is shown, pi's release decides '--'."""
    install_pi_package(tmp_path / "pi-prefix", "0.80.3")
    planted = workspace / "claude"  # found by a relative PATH entry only: the adapters ignore it
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    node_dir = tmp_path / "node-bin"
    node_dir.mkdir()
    (node_dir / "fakenode").symlink_to(sys.executable)
    fake_script(tmp_path / "bin" / "codex", "#!/usr/bin/env fakenode")
    path = f".:{tmp_path / 'bin'}:{tmp_path / 'pi-prefix' / 'bin'}:{node_dir}:/usr/bin:/bin"
    proc = peon(leftovers, workspace, "doctor", "--json", env={"PATH": path})
    assert proc.returncode == 0, proc.stderr
    agents = json.loads(proc.stdout)["agents"]
    assert agents["claude"]["resolved"] is None and "no executable named 'claude'" in agents["claude"]["error"]
    assert "relative PATH entries are not searched: ['.']" in agents["claude"]["error"]
    codex = agents["codex"]
    assert codex["resolved"] == str(tmp_path / "bin" / "codex") and codex["interpreter"] == str(node_dir / "fakenode")
    assert codex["argv"] == [str(node_dir / "fakenode"), str(tmp_path / "bin" / "codex"), "exec", "--", "<prompt>"]
    pi = agents["pi"]
    assert (pi["pi_version"], pi["pi_double_dash"]) == ("0.80.3", False) and pi["argv"][-2:] == ["-p", "<prompt>"]
    text = peon(leftovers, workspace, "doctor", env={"PATH": path})
    assert f"(run by {node_dir / 'fakenode'})" in text.stdout
    assert "pi 0.80.3: no --; prompts beginning with - are refused" in text.stdout


# -- for people ------------------------------------------------------------------------------------


def test_version(leftovers, workspace):
    import peon as peon_package

    proc = peon(leftovers, workspace, "--version")
    assert proc.returncode == 0 and proc.stdout == f"peon {peon_package.__version__}\n"


def spawn_shell(leftovers, workspace: Path, command: str, extra_env: dict | None = None) -> pexpect.spawn:
    """``command`` run by sh under a pseudo-terminal (stdin, stderr and the controlling terminal)."""
    return pexpect.spawn("/bin/sh", ["-c", command], cwd=str(workspace), encoding="utf-8", timeout=60,
                         env=isolated_env(leftovers, workspace, extra_env), dimensions=(40, 200))


def terminal_text(child) -> str:
    """What a command printed on its terminal, without the notices a new session prints when it removes the
    cgroups or ends the processes another test's killed supervisor left (stderr shares the terminal)."""
    lines = child.before.replace("\r\n", "\n").splitlines(keepends=True)
    notices = ("peon-supervisor: removed ", "peon-supervisor: ended ")
    return "".join(line for line in lines if not line.startswith(notices))


def test_a_call_on_a_terminal_prints_output_then_a_status_line(leftovers, workspace):
    child = spawn(leftovers, workspace, "call", "bash", '{"command": "echo hi; exit 3"}', "--allow", "process")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0  # the call succeeded; the command's status is in the line
    assert re.fullmatch(r"hi\n── bash: exit 3 · \d+\.\d s · 3 bytes of output\n", terminal_text(child))
    child = spawn(leftovers, workspace, "call", "bash", '{"command": "echo hi"}', "--allow", "process", "--json")
    child.expect(pexpect.EOF)
    child.close()
    assert json.loads(terminal_text(child))["value"]["output"] == "hi\n"
    child = spawn(leftovers, workspace, "call", "nope", "{}")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1 and "nope failed [unknown_tool]: no tool named 'nope'" in child.before


@pytest.mark.parametrize("command", [
    "{peon} call bash '{{\"command\": \"echo piped > marker; echo done\"}}' | cat > result.json",
    "echo '{{\"command\": \"echo piped > marker; echo done\"}}' | {peon} call bash - | cat > result.json",
])
def test_a_piped_call_still_asks_the_person_at_the_terminal(leftovers, workspace, command):
    child = spawn_shell(leftovers, workspace, command.format(peon=" ".join(PEON)))
    child.expect("Peon asks for approval")
    child.expect(r"Answer \[o/D\]: ")
    shown = child.before
    assert "[o] allow once" in shown and "[d] deny (default)" in shown
    assert "[s]" not in shown and "[t]" not in shown and "[r]" not in shown  # no effect beyond this one call
    assert "this session ends with this call" in shown
    child.sendline("o")
    child.expect(pexpect.EOF)
    child.close()
    result = json.loads((workspace / "result.json").read_text())  # JSON: stdout is not a terminal
    assert result["ok"] is True and result["value"]["output"] == "done\n"
    assert (workspace / "marker").read_text() == "piped\n"


def test_ctrl_c_while_the_session_starts_exits_cleanly(leftovers, workspace, tmp_path):
    marker = tmp_path / "starting"
    config = tmp_path / "slow.toml"
    config.write_text('[tools]\nextra = ["slow_start_tool:NoopTool"]\n')
    child = pexpect.spawn(PEON[0], [*PEON[1:], "call", "bash", '{"command": "touch ran"}', "--allow", "process",
                                    "--config", str(config)],
                          cwd=str(workspace), encoding="utf-8", timeout=60,
                          env=isolated_env(leftovers, workspace,
                                           {"SLOW_START_MARKER": str(marker),
                                            "PYTHONPATH": str(Path(__file__).parent.parent / "fixtures")}))
    assert wait_for(lambda: marker.exists() and marker.read_text().strip(), 30), "the supervisor did not start"
    supervisor = int(marker.read_text().split()[0])
    child.sendintr()  # while the supervisor is still starting
    child.expect("stopping as soon as the session has started")
    Path(str(marker) + ".release").touch()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130, child.before
    assert "Traceback" not in child.before and "Error" not in child.before
    assert not (workspace / "ran").exists()  # the call was never submitted
    assert wait_for(lambda: not living([supervisor]), 10), "the supervisor outlived the command"


def test_one_shot_commands_leave_no_state_unless_asked_and_prune_removes_ended_sessions(leftovers, workspace):
    sessions = workspace.parent / "home" / ".local" / "state" / "peon" / "sessions"
    for args in (["tools"], ["call", "read", '{"path": "missing.txt"}'], ["doctor", "--json"]):
        peon(leftovers, workspace, *args)
        assert not sessions.exists() or list(sessions.iterdir()) == [], args
    assert peon(leftovers, workspace, "tools", "--keep-state").returncode == 0
    (kept,) = sessions.iterdir()
    listed = json.loads(peon(leftovers, workspace, "sessions", "--json").stdout)
    assert [(s["session_id"], s["state"], s["workspace"]) for s in listed] == [
        (kept.name, "ended", str(workspace.resolve()))]
    assert "would remove" in peon(leftovers, workspace, "sessions", "prune", "--dry-run").stdout and kept.exists()
    assert peon(leftovers, workspace, "sessions", "prune", "--older-than", "1d").returncode == 0 and kept.exists()
    pruned = peon(leftovers, workspace, "sessions", "prune")
    assert pruned.returncode == 0 and "removed 1 session directory" in pruned.stdout and not kept.exists()
