"""The Landlock sandbox with real processes: real EACCES outside the writable paths, a real loopback
listener the command cannot reach, real signals it cannot send, a worker it cannot trace; the runner's
guarantees inside the sandbox; the approval request; and sessions on machines that lack Landlock or
part of it (the probe forced with PEON_SANDBOX_SIMULATE in the session's environment)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket

import pytest

import peon
from helpers import ALLOW_ALL, Leftovers, living, wait_for
from helpers.agents import Agents
from helpers.cli import assert_clean_failure, peon as run_peon
from peon.client.config import merge
from peon.core.agent_control import AGENT_CONTROL_PATHS, command_paths
from peon.core.errors import SessionError
from helpers.sandbox import (
    Peers, open_module_session, outcomes, peer_actions, probe_command, run_unsandboxed, splice,
)
from peon.workers.sandbox import landlock as ll
from peon.workers import proctree

ABI = ll.abi_version().abi
needs = {abi: pytest.mark.skipif(abi > ABI, reason=f"needs Landlock ABI {abi}; this kernel has ABI {ABI} "
                                                     "(see `peon doctor`)")
         for abi in (1, 3, 4, 6)}
landlock = needs[1]  # the tests below that run commands inside a real Landlock domain
STRICT = {"mode": "required", "kind": "landlock", "network": False}
# Landlock alone refuses with EACCES; its mount view (root) with EROFS.
DENIED = re.compile("Permission denied|Read-only file system")


class Box:
    """One sandboxed session for the module, its directories, and what the tests start around it."""

    def __init__(self, root, guard: Leftovers):
        self.workspace, self.tmp, self.outside = root / "ws", root / "tmp", root / "outside"
        for directory in (self.workspace, self.tmp, self.outside):
            directory.mkdir()
        (self.outside / "precious").write_text("keep me")
        self.guard = guard
        # The sandbox's temp dir: outside/ is outside every writable path. Landlock alone (the layer every
        # kernel with Landlock has): the mount view and network namespace are tested in test_sandbox_workflow.py.
        self.env = {"TMPDIR": str(self.tmp), "PEON_SANDBOX_SIMULATE": "no-namespaces"}
        # "auto": what Landlock alone leaves out (unix sockets by path, metadata) is listed, not refused.
        sandbox = {**STRICT, "mode": "auto", "network": ABI < ll.NET_ABI, "isolate_signals": ABI >= ll.SCOPE_ABI,
                   "isolate_abstract_sockets": ABI >= ll.SCOPE_ABI}
        self.session = open_module_session(self.workspace, root / "state", guard, sandbox, self.env)
        self.peers = Peers(guard)

    def call(self, command: str, **args):
        return self.session.call("bash", {"command": command, **args})

    def close(self) -> None:
        self.session.close()
        self.peers.close()


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    if ABI < 1:
        pytest.skip("this kernel has no Landlock (see `peon doctor`)")
    guard = Leftovers(tmp_path_factory.mktemp("home"))
    box = Box(tmp_path_factory.mktemp("landlock"), guard)
    yield box
    box.close()
    assert guard.kill_all() == [], "processes outlived the sandbox tests"


def test_writes_outside_the_writable_paths_fail_with_eacces(box):
    actions = {
        "workspace": ["write", str(box.workspace / "inside.txt")],
        "temp_dir": ["write", str(box.tmp / "scratch.txt")],
        "dev_null": ["write", "/dev/null"],
        "outside_new": ["write", str(box.outside / "new.txt")],
        "outside_existing": ["write", str(box.outside / "precious")],
        "outside_mkdir": ["mkdir", str(box.outside / "dir")],
        "outside_unlink": ["unlink", str(box.outside / "precious")],
        "outside_rename_in": ["rename", str(box.outside / "precious"), str(box.workspace / "stolen")],
        "outside_symlink": ["symlink", "/etc/passwd", str(box.outside / "link")],
        "home": ["write", os.path.join(box.guard.home, "dotfile")],
    }
    if ABI >= 3:
        actions["outside_truncate"] = ["truncate", str(box.outside / "precious"), 0]
    r = box.call(probe_command(actions))
    got = outcomes(r)
    assert got.pop("workspace") == got.pop("temp_dir") == got.pop("dev_null") == "ok"
    assert set(got.values()) == {"EACCES"}, got
    assert (box.workspace / "inside.txt").read_text() == "x"
    assert (box.outside / "precious").read_text() == "keep me"
    assert sorted(p.name for p in box.outside.iterdir()) == ["precious"]
    assert r.value["sandbox"]["kind"] == "landlock" and r.value["sandbox"]["abi"] == ABI
    assert str(box.workspace.resolve()) in r.value["sandbox"]["writable"]
    # The control: the same attempts outside the sandbox succeed, so the EACCES above is the sandbox's.
    control = run_unsandboxed({"outside_new": actions["outside_new"]}, box.guard.env())
    assert control == {"outside_new": "ok"}


def test_reads_and_the_shell_still_work(box):
    r = box.call("cat /etc/hostname >/dev/null && ls / >/dev/null && echo hi | tee -a out.txt >/dev/stderr "
                 "&& sort out.txt | uniq -c | wc -l")
    assert r.ok and r.value["exit_code"] == 0, r.value
    assert r.value["output"] == "hi\n1\n"


def test_errors_name_the_commands_own_lines(box):
    """The login profile is read before the command, yet bash numbers the command's lines from 1 and
    parses it after the profile ran; $0 and the positional parameters are bash -c's."""
    r = box.call("nosuch_command_x")
    assert r.value["exit_code"] == 127 and "line 1: nosuch_command_x: command not found" in r.value["output"], r.value
    assert "line 2" not in r.value["output"]
    r = box.call("echo (")
    assert r.value["exit_code"] == 2 and "line 1: `echo ('" in r.value["output"] and "profile" not in r.value["output"]
    r = box.call('echo "$LINENO $# $0"\necho $LINENO\nexit 3')
    assert r.value["exit_code"] == 3 and r.value["output"] == "1 0 /bin/bash\n2\n", r.value


@needs[4]
def test_tcp_to_a_loopback_listener_is_refused_with_network_false(box):
    actions = peer_actions(box.peers)
    got = outcomes(box.call(probe_command({k: actions[k] for k in ("tcp_connect", "tcp_bind")})))
    assert got == {"tcp_connect": "EACCES", "tcp_bind": "EACCES"}
    assert box.peers.accepted() == 0
    control = run_unsandboxed({"tcp_connect": actions["tcp_connect"]}, box.guard.env())
    assert control == {"tcp_connect": "ok"} and box.peers.accepted() == 1


@needs[4]
def test_without_namespaces_seccomp_refuses_what_landlock_does_not_see(box, tmp_path):
    """Landlock alone (no root for the namespaces): UDP (DNS included), packet sockets and setuid bits
    are refused by the seccomp filter; the session names what stays unenforced."""
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(0.5)
    (box.workspace / "tool").write_text("#!/bin/sh\n")
    actions = {"udp": ["udp_send", "127.0.0.1", receiver.getsockname()[1]],
               "packet": ["open_socket", socket.AF_PACKET, socket.SOCK_RAW],
               "setuid": ["chmod", str(box.workspace / "tool"), 0o4755]}
    try:
        got = outcomes(box.call(probe_command(actions)))
        assert got == {"udp": "EACCES", "packet": "EAFNOSUPPORT", "setuid": "EPERM"}
        with pytest.raises(TimeoutError):
            receiver.recvfrom(16)
        assert run_unsandboxed({"udp": actions["udp"]}, box.guard.env()) == {"udp": "ok"}
        assert receiver.recvfrom(16)[0] == b"x"
    finally:
        receiver.close()
    status = box.session.info["sandbox"]
    assert status["layers"] == ["landlock", "seccomp"]
    assert any("named unix sockets" in gap for gap in status["not_enforced"])
    assert any("utimes" in gap for gap in status["not_enforced"])


@needs[6]
def test_signals_and_abstract_sockets_outside_the_call_are_refused(box):
    outsider = box.peers.outsider.pid
    actions = peer_actions(box.peers)
    command = splice(probe_command({"abstract_connect": actions["abstract_connect"],
                                    "sigterm_outsider": ["kill", outsider, int(signal.SIGTERM)],
                                    "sigkill_worker": ["kill", "PPID", int(signal.SIGKILL)]}), "PPID", "$PPID")
    r = box.call(f"sleep 30 & inner=$!; kill $inner && wait $inner; echo inner=$?; {command}")
    got = outcomes(r)
    assert got == {"abstract_connect": "EPERM", "sigterm_outsider": "EPERM", "sigkill_worker": "EPERM"}
    assert "inner=143" in r.value["output"]  # signals inside the call still work
    assert box.peers.outsider.poll() is None
    control = run_unsandboxed({"abstract_connect": actions["abstract_connect"], "signal_outsider": ["kill", outsider]},
                              box.guard.env())
    assert control == {"abstract_connect": "ok", "signal_outsider": "ok"}


def test_the_command_cannot_trace_its_worker(box):
    """The worker's spawning thread was in the domain for a moment: the worker is non-dumpable and the
    command has no capabilities, so ptrace of the worker fails, while a child of the command can be traced."""
    command = splice(probe_command({"trace_worker": ["ptrace_seize", "PPID"]}), "PPID", "$PPID")  # bash's parent
    child = splice(probe_command({"trace_own_child": ["ptrace_seize", "CHILD"]}), "CHILD", "$child")
    r = box.call(f"{command}; sleep 30 & child=$!; {child}; kill $child")
    lines = r.value["output"].strip().splitlines()
    assert '"trace_worker": "EPERM"' in lines[0], r.value["output"]
    assert '"trace_own_child": "ok"' in lines[-1], r.value["output"]
    r = box.call("grep -E '^(CapInh|CapPrm|CapEff|CapAmb|NoNewPrivs)' /proc/self/status; touch mine; "
                 "chown 1:1 mine && echo chown-ok")
    lines = r.value["output"].splitlines()
    fields = dict(line.split(":\t") for line in lines[:5])
    assert fields == {"CapInh": "0" * 16, "CapPrm": "0" * 16, "CapEff": "0" * 16, "CapAmb": "0" * 16,
                      "NoNewPrivs": "1"}, r.value["output"]
    assert "Operation not permitted" in lines[-1]  # even when Peon runs as root: no CAP_CHOWN


def test_daemons_started_inside_the_sandbox_are_gone_after_the_call(box):
    r = box.call("setsid sleep 601 & echo $! > d1; (sleep 602 & echo $! > d2); nohup sleep 603 >/dev/null 2>&1 & "
                 "echo $! > d3; disown; echo started")
    assert r.ok and r.value["output"] == "started\n"
    pids = [int((box.workspace / name).read_text()) for name in ("d1", "d2", "d3")]
    assert living(pids) == []


def test_cancel_gives_the_sandboxed_command_its_grace(box):
    handle = box.session.submit("bash", {"command": "trap 'sleep 0.2; echo graceful > term.txt; exit 3' TERM; "
                                                    "touch cancel-started; while :; do sleep 0.05; done"})
    assert wait_for(lambda: (box.workspace / "cancel-started").exists(), 30)
    handle.cancel()
    r = handle.result(timeout=30)
    assert r.ok and r.value["cancelled"] is True and r.value["exit_code"] == 3
    assert (box.workspace / "term.txt").read_text() == "graceful\n"


def test_deadline_kills_the_sandboxed_tree(box):
    r = box.call("sleep 604 & sleep 605", timeout_seconds=0.5)
    assert r.value["timed_out"] is True and r.value["signal"] == "SIGKILL"
    assert [p for p in box.guard.alive() if proctree.cmdline(p) in ("sleep 604", "sleep 605")] == []


@landlock
def test_a_writable_path_replaced_by_a_symlink_fails_closed(tmp_path, leftovers):
    extra, elsewhere, ws = tmp_path / "extra", tmp_path / "elsewhere", tmp_path / "ws"
    for directory in (extra, elsewhere, ws):
        directory.mkdir()
    session = open_module_session(ws, tmp_path / "state", leftovers, {**STRICT, "network": True,
                                  "isolate_signals": False, "isolate_abstract_sockets": False,
                                  "writable": [str(extra)]})
    try:
        assert session.call("bash", {"command": f"touch {extra}/a"}).value["exit_code"] == 0
        extra.rename(tmp_path / "old-extra")
        extra.symlink_to(elsewhere)  # the approved path now leads somewhere else
        r = session.call("bash", {"command": "touch started"})
        assert not r.ok and r.error.code == "sandbox_unavailable", r
        assert "nothing was started" in r.error.message and str(extra) in r.error.message
        assert not (ws / "started").exists()
    finally:
        session.close()


@landlock
def test_the_approver_sees_the_sandbox(open_session, workspace, tmp_path):
    seen = []

    def approver(request):
        seen.append(request)
        return "allow_once"

    session = open_session({"approval": {"process": "ask"}, "sandbox": {"mode": "auto"}}, approver=approver,
                           env={"TMPDIR": str(tmp_path)})
    assert session.info["sandbox"]["active"] is True
    r = session.call("bash", {"command": "true"})
    assert r.ok
    sandbox = seen[0]["details"]["sandbox"]
    assert sandbox["active"] is True and sandbox["mode"] == "auto" and sandbox["kind"] == "landlock"
    assert sandbox["abi"] == ABI and sandbox["network"] is True and sandbox["readable"] == ["/"]
    assert sandbox["writable"][:2] == [str(workspace.resolve()), str(tmp_path.resolve())]
    assert "/dev/null" in sandbox["writable"] and "/dev/shm" in sandbox["writable"]
    assert "risk_reason" in seen[0] and "inside the OS sandbox" in seen[0]["risk_reason"]


# -- machines without (all of) Landlock ---------------------------------------------------------------


def start(leftovers, tmp_path, sandbox: dict, simulate: str, approver=None, **config) -> peon.Session:
    (tmp_path / "ws").mkdir(exist_ok=True)
    return peon.Session(tmp_path / "ws", merge(merge(ALLOW_ALL, {"sandbox": sandbox}), config),
                        state_dir=tmp_path / "state", env=leftovers.env({"PEON_SANDBOX_SIMULATE": simulate}),
                        approver=approver)


def test_required_refuses_to_start_without_landlock(leftovers, tmp_path):
    with pytest.raises(SessionError) as caught:
        start(leftovers, tmp_path, {"mode": "required"}, "no-landlock")
    assert caught.value.code.value == "sandbox_unavailable"
    assert "Landlock is unavailable" in caught.value.message and "fix:" in caught.value.message
    assert caught.value.details["feature"] == "landlock"


@needs[6]
@pytest.mark.parametrize("simulate, sandbox, missing", [
    ("landlock-abi=3", {"network": False}, "sandbox.network = false (TCP rules need Landlock ABI 4"),
    ("landlock-abi=5", {}, "sandbox.isolate_signals (needs Landlock ABI 6"),
    ("landlock-abi=2", {"isolate_signals": False, "isolate_abstract_sockets": False}, "truncate(2)"),
])
def test_required_refuses_what_the_kernel_cannot_enforce(leftovers, tmp_path, simulate, sandbox, missing):
    with pytest.raises(SessionError) as caught:
        start(leftovers, tmp_path, {"mode": "required", **sandbox}, simulate)
    assert caught.value.code.value == "sandbox_unavailable" and missing in caught.value.message


def test_auto_without_landlock_runs_unsandboxed_and_says_so(leftovers, tmp_path):
    seen = []
    session = start(leftovers, tmp_path, {"mode": "auto"}, "no-landlock",
                    approver=lambda request: seen.append(request) or "allow_once", approval={"process": "ask"})
    try:
        status = session.info["sandbox"]
        assert status["active"] is False and "Landlock is unavailable" in status["reason"] and status["fixes"]
        outside = tmp_path / "outside.txt"
        r = session.call("bash", {"command": f"echo x > {outside}"})
        assert r.ok and r.value["exit_code"] == 0 and r.value["sandbox"] is None
        assert outside.exists()
        assert seen[0]["details"]["sandbox"] == {"active": False, "mode": "auto", "reason": status["reason"]}
    finally:
        session.close()


@needs[6]
def test_auto_with_an_older_abi_names_what_is_not_enforced(leftovers, tmp_path):
    session = start(leftovers, tmp_path, {"mode": "auto", "network": False}, "landlock-abi=5")
    try:
        status = session.info["sandbox"]
        assert status["active"] is True and status["plan"]["abi"] == 5
        assert [gap.split(" (")[0] for gap in status["not_enforced"]] == [
            "sandbox.isolate_signals", "sandbox.isolate_abstract_sockets"]
        r = session.call("bash", {"command": "grep NoNewPrivs /proc/self/status"})
        assert r.value["output"] == "NoNewPrivs:\t1\n" and r.value["sandbox"]["abi"] == 5
    finally:
        session.close()


@landlock
@pytest.mark.parametrize("containment", ["process-tree", "cgroup"])
def test_cleanup_holds_in_both_containments(open_session, workspace, containment):
    from helpers import CGROUP_SUPPORT

    if containment == "cgroup" and not CGROUP_SUPPORT.available:
        pytest.skip(f"cgroup v2 unavailable: {CGROUP_SUPPORT.reason}")
    session = open_session({"runtime": {"containment": containment}, "sandbox": {"mode": "required",
                            "isolate_signals": ABI >= 6, "isolate_abstract_sockets": ABI >= 6}})
    r = session.call("bash", {"command": "setsid sleep 606 & echo $! > pid; echo ok"})
    assert r.ok and r.value["sandbox"] is not None
    assert living([int((workspace / "pid").read_text())]) == []
    # The worker's own thread is outside the domain: it can still kill a tree that ignores TERM.
    handle = session.submit("bash", {"command": "trap '' TERM; touch started; sleep 607"})
    assert wait_for(lambda: (workspace / "started").exists(), 30)
    handle.cancel()
    r = handle.result(timeout=30)
    assert r.value["cancelled"] is True and r.value["signal"] == "SIGKILL"


def test_no_descriptor_of_peons_reaches_the_sandboxed_command(box):
    r = box.call("ls -l /proc/self/fd | tail -n +2 | awk '{print $9, $11}'")
    fds = dict(line.split(" ", 1) for line in r.value["output"].strip().splitlines())
    assert set(fds) <= {"0", "1", "2", "3"} and fds["0"] == "/dev/null"  # 3: the directory ls is reading


@landlock
def test_agent_adapters_are_sandboxed_only_when_switched_on(open_session, tmp_path):
    agents = Agents(tmp_path)  # the fake agents log to tmp_path/agents.jsonl: outside every writable path
    (tmp_path / "tmp").mkdir()
    seen = []
    session = open_session(
        {"approval": {"delegate": "ask"}, "agents": {"claude": {"sandbox": True}},
         "sandbox": {"mode": "required", "isolate_signals": ABI >= 6, "isolate_abstract_sockets": ABI >= 6}},
        env={**agents.env, "TMPDIR": str(tmp_path / "tmp")},
        approver=lambda request: seen.append(request) or "allow_once")
    inside = session.call("agent_claude", {"prompt": "say hello"})
    assert inside.ok and inside.value["exit_code"] != 0, inside.value
    assert DENIED.search(inside.value["output"]) and inside.value["sandbox"]["kind"] == "landlock"
    assert agents.records() == []  # its log is outside the sandbox's writable paths
    assert seen[0]["details"]["sandbox"]["active"] is True

    outside = session.call("agent_codex", {"prompt": "say hello"})
    assert outside.ok and outside.value["exit_code"] == 0 and outside.value["sandbox"] is None
    assert [r["prompt"] for r in agents.records()] == ["say hello"]
    details = seen[1]["details"]["sandbox"]
    assert details["active"] is False and "agents.codex.sandbox is false" in details["reason"]


@landlock
def test_doctor_reports_the_sandbox_and_known_fixes(leftovers, workspace, tmp_path):
    config = tmp_path / "auto.toml"
    config.write_text('[sandbox]\nmode = "auto"\nisolate_signals = false\nisolate_abstract_sockets = false\n')
    facts = json.loads(run_peon(leftovers, workspace, "doctor", "--json", "--config", str(config)).stdout)["sandbox"]
    assert facts["landlock"] == {"available": True, "abi": ABI, "detail": f"Landlock ABI {ABI}", "fixes": []}
    assert facts["session"]["active"] is True and facts["session"]["plan"]["abi"] == ABI
    assert isinstance(facts["bwrap"]["available"], bool)

    missing = {"PEON_SANDBOX_SIMULATE": "no-landlock,no-bwrap"}
    text = run_peon(leftovers, workspace, "doctor", "--config", str(config), env=missing).stdout
    assert "sandbox      auto: not sandboxed (Landlock is unavailable" in text
    assert "landlock     no: " in text and "fix: use a kernel built with CONFIG_SECURITY_LANDLOCK=y" in text
    assert "bwrap        no: " in text and "fix: install bubblewrap" in text
    # The layers beside Landlock: each said available or not, with the fix; the session lists each rule.
    layered = {"PEON_SANDBOX_SIMULATE": "no-namespaces,no-seccomp"}
    text = run_peon(leftovers, workspace, "doctor", "--config", str(config), env=layered).stdout
    assert "namespaces   no: reported unavailable" in text and "fix: run Peon as root" in text
    assert "seccomp      no: reported unavailable" in text and "fix: install libseccomp2" in text
    assert "layers landlock;" in text and "NOT enforced: chmod of ordinary mode bits and utimes" in text
    assert "enforced: writes outside the writable paths are refused" in text
    config.write_text('[sandbox]\nmode = "required"\n')
    call = run_peon(leftovers, workspace, "call", "bash", '{"command": "true"}', "--config", str(config), env=missing)
    assert_clean_failure(call, 1, 'sandbox.mode is "required" but Landlock is unavailable')


@landlock
def test_doctor_names_the_one_agent_control_list_the_file_tools_and_the_sandbox_read(leftovers, workspace):
    facts = json.loads(run_peon(leftovers, workspace, "doctor", "--json").stdout)
    commands = list(command_paths(AGENT_CONTROL_PATHS))
    assert facts["agent_control"] == {"file_tools": list(AGENT_CONTROL_PATHS), "commands": commands}
    assert facts["sandbox"]["session"]["plan"]["protected"] == commands
    text = run_peon(leftovers, workspace, "doctor").stdout
    assert "agent-control write, edit and apply_patch ask before writing beneath: **/.git, .git/hooks" in text
    assert ".envrc" in text and "**/AGENTS.md" in text


@landlock
def test_unattended_sandboxed_commands_run_and_still_stop_at_the_boundary(open_session, workspace, tmp_path):
    """approval.process_sandboxed = "allow" with process = "ask" and nobody to ask: a sandboxed call runs
    without a person, its writes outside the workspace still fail; without the sandbox the same call is
    denied."""
    approval = {"approval": {"process": "ask", "process_sandboxed": "allow"}}
    isolation = {"isolate_signals": ABI >= 6, "isolate_abstract_sockets": ABI >= 6}
    outside = tmp_path / "outside"
    outside.mkdir()
    sandboxed = open_session({**approval, "sandbox": {"mode": "required", **isolation}},
                             env={"TMPDIR": str(tmp_path / "ws")})
    r = sandboxed.call("bash", {"command": f"touch inside; touch {outside}/escape"})
    assert r.ok, r.error
    assert DENIED.search(r.value["output"]) and (workspace / "inside").exists()
    assert list(outside.iterdir()) == []
    unsandboxed = open_session({**approval, "sandbox": {"mode": "off"}})
    r = unsandboxed.call("bash", {"command": "touch inside-again"})
    assert not r.ok and r.error.code == "denied" and not (workspace / "inside-again").exists()
