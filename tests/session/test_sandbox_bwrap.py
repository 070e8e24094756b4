"""The bubblewrap sandbox with real processes: a read-only root but the workspace and temp dir, no network,
its own pid namespace (processes outside are out of sight), and the runner's guarantees — cancel grace,
deadline, a daemon inside gone after the call, a killed worker — holding for everything inside it.
Skipped where bwrap is not installed or cannot create namespaces (``.ci/run`` installs it)."""

from __future__ import annotations

import os
import signal

import pytest

import peon
from helpers import ALLOW_ALL, Leftovers, living, wait_for
from helpers.agents import Agents
from peon.client.config import merge
from peon.core.errors import SessionError
from helpers.sandbox import (
    Peers, bwrap_support, open_module_session, outcomes, peer_actions, probe_command, run_unsandboxed,
)
from peon.workers import proctree

SUPPORT = bwrap_support()
pytestmark = pytest.mark.skipif(not SUPPORT.works, reason=f"bwrap unusable here: {SUPPORT.detail}")
BWRAP = {"mode": "required", "kind": "bwrap", "network": False}


class Box:
    def __init__(self, root, guard: Leftovers):
        self.workspace, self.tmp, self.outside = root / "ws", root / "tmp", root / "outside"
        for directory in (self.workspace, self.tmp, self.outside):
            directory.mkdir()
        self.guard = guard
        self.session = open_module_session(self.workspace, root / "state", guard, BWRAP, {"TMPDIR": str(self.tmp)})
        self.peers = Peers(guard)

    def call(self, command: str, **args):
        return self.session.call("bash", {"command": command, **args})

    def close(self) -> None:
        self.session.close()
        self.peers.close()


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    guard = Leftovers(tmp_path_factory.mktemp("home"))
    box = Box(tmp_path_factory.mktemp("bwrap"), guard)
    yield box
    box.close()
    assert guard.kill_all() == [], "processes outlived the bwrap tests"


def test_the_session_says_bwrap(box):
    status = box.session.info["sandbox"]
    assert status["active"] is True and status["kind"] == "bwrap"
    gaps = [gap.split(" (")[0] for gap in status["not_enforced"]]
    assert gaps == ["named unix sockets of host daemons in the bound tree"]
    assert status["plan"]["bwrap"] == SUPPORT.path


def test_only_the_workspace_and_temp_dir_are_writable(box):
    actions = {
        "workspace": ["write", str(box.workspace / "inside.txt")],
        "temp_dir": ["write", str(box.tmp / "scratch.txt")],
        "dev_null": ["write", "/dev/null"],
        "outside": ["write", str(box.outside / "new.txt")],
        "outside_mkdir": ["mkdir", str(box.outside / "dir")],
        "etc": ["write", "/etc/peon-bwrap-test"],
    }
    r = box.call(probe_command(actions))
    got = outcomes(r)
    assert got.pop("workspace") == got.pop("temp_dir") == got.pop("dev_null") == "ok"
    assert set(got.values()) == {"EROFS"}, got  # a read-only bind mount, not Landlock's EACCES
    assert (box.workspace / "inside.txt").read_text() == "x"
    assert list(box.outside.iterdir()) == [] and not os.path.exists("/etc/peon-bwrap-test")
    assert r.value["sandbox"] == {"kind": "bwrap", "abi": None, "network": False,
                                  "writable": r.value["sandbox"]["writable"],
                                  "layers": ["bwrap", "network_namespace"],
                                  "not_enforced": r.value["sandbox"]["not_enforced"]}
    assert "named unix sockets" in r.value["sandbox"]["not_enforced"][0]  # said, in every result
    assert run_unsandboxed({"outside": actions["outside"]}, box.guard.env()) == {"outside": "ok"}


def test_no_network_and_no_view_of_processes_outside(box):
    actions = peer_actions(box.peers)
    got = outcomes(box.call(probe_command({"tcp_connect": actions["tcp_connect"],
                                           "abstract_connect": actions["abstract_connect"],
                                           "signal_outsider": ["kill", box.peers.outsider.pid, int(signal.SIGTERM)]})))
    assert got["tcp_connect"] in ("ENETUNREACH", "ECONNREFUSED"), got  # its own network namespace: lo only, down
    assert got["abstract_connect"] == "ECONNREFUSED"  # the name does not exist in that namespace
    assert got["signal_outsider"] == "ESRCH"  # that pid is not in its pid namespace (or is someone else there)
    assert box.peers.accepted() == 0 and box.peers.outsider.poll() is None
    control = run_unsandboxed({"tcp_connect": actions["tcp_connect"], "abstract_connect": actions["abstract_connect"]},
                              box.guard.env())
    assert control == {"tcp_connect": "ok", "abstract_connect": "ok"} and box.peers.accepted() == 1


def test_its_own_pid_namespace(box):
    r = box.call("echo $$; ps -e -o pid= | wc -l")
    pid, count = r.value["output"].split()
    assert int(pid) < 10 and int(count) < 10  # bwrap's init, bash, ps, wc: nothing of the host's


def test_a_daemon_inside_bwrap_is_gone_after_the_call(box):
    r = box.call("setsid sleep 611 & (sleep 612 &); nohup sleep 613 >/dev/null 2>&1 & disown; echo started")
    assert r.ok and r.value["output"] == "started\n"
    assert [p for p in box.guard.alive() if proctree.cmdline(p).startswith("sleep 61")] == []


def test_cancel_reaches_the_command_inside_bwrap_with_its_grace(box):
    handle = box.session.submit("bash", {"command": "trap 'sleep 0.3; echo graceful > term.txt; exit 3' TERM; "
                                                    "touch cancel-started; while :; do sleep 0.05; done"})
    assert wait_for(lambda: (box.workspace / "cancel-started").exists(), 30)
    handle.cancel()
    r = handle.result(timeout=30)
    assert r.ok and r.value["cancelled"] is True
    assert (box.workspace / "term.txt").read_text() == "graceful\n"
    assert [p for p in box.guard.alive() if "sleep 0.05" in proctree.cmdline(p)] == []


def test_deadline_kills_everything_inside_bwrap(box):
    r = box.call("sleep 614 & sleep 615", timeout_seconds=0.5)
    assert r.value["timed_out"] is True and r.value["signal"] == "SIGKILL"
    assert [p for p in box.guard.alive() if proctree.cmdline(p) in ("sleep 614", "sleep 615")] == []


def test_a_killed_worker_takes_its_bwrap_along(box):
    handle = box.session.submit("bash", {"command": "setsid sleep 616 & sleep 617 & touch kill-started; wait"})
    assert wait_for(lambda: (box.workspace / "kill-started").exists(), 30)
    [worker] = [p for p in proctree.descendants(box.session.supervisor_pid)
                if proctree.cmdline(p).startswith(f"peon-worker bash {handle.call_id}")]

    def sleepers() -> list[int]:
        return [p for p in proctree.descendants(worker) if proctree.cmdline(p) in ("sleep 616", "sleep 617")]

    assert wait_for(lambda: len(sleepers()) == 2, 30)
    inside = sleepers()
    os.kill(worker, signal.SIGKILL)
    r = handle.result(timeout=30)
    assert not r.ok and r.error.code == "worker_crashed"
    assert wait_for(lambda: living(inside) == [], 10), living(inside)
    assert box.call("echo again").value["output"] == "again\n"


# -- where bwrap cannot run ---------------------------------------------------------------------------


def start(leftovers, tmp_path, sandbox: dict, simulate: str) -> peon.Session:
    (tmp_path / "ws").mkdir(exist_ok=True)
    return peon.Session(tmp_path / "ws", merge(ALLOW_ALL, {"sandbox": sandbox}), state_dir=tmp_path / "state",
                        env=leftovers.env({"PEON_SANDBOX_SIMULATE": simulate}))


def test_required_bwrap_refuses_to_start_without_it(leftovers, tmp_path):
    with pytest.raises(SessionError) as caught:
        start(leftovers, tmp_path, BWRAP, "no-bwrap")
    assert caught.value.code.value == "sandbox_unavailable"
    assert "bwrap is reported missing" in caught.value.message and "apt-get install bubblewrap" in caught.value.message


def test_required_bwrap_refuses_abstract_socket_isolation_with_network_on(leftovers, tmp_path):
    with pytest.raises(SessionError) as caught:
        start(leftovers, tmp_path, {**BWRAP, "network": True}, "")
    assert "isolate_abstract_sockets" in caught.value.message


def test_auto_falls_back_to_landlock_without_bwrap(leftovers, tmp_path):
    session = start(leftovers, tmp_path, {**BWRAP, "mode": "auto"}, "no-bwrap")
    try:
        status = session.info["sandbox"]
        if status["landlock"]["abi"] == 0:
            assert status["active"] is False
            return
        assert status["active"] is True and status["kind"] == "landlock" and status["configured_kind"] == "bwrap"
        assert any("using Landlock instead" in note for note in status["notes"])
        assert session.call("bash", {"command": "true"}).value["sandbox"]["kind"] == "landlock"
    finally:
        session.close()


def test_an_agent_switched_on_runs_its_pinned_executable_inside_bwrap(open_session, tmp_path):
    agents = Agents(tmp_path)  # the fake agents log to tmp_path/agents.jsonl: read-only inside the sandbox
    (tmp_path / "tmp").mkdir()
    session = open_session({"agents": {"claude": {"sandbox": True}}, "sandbox": BWRAP},
                           env={**agents.env, "TMPDIR": str(tmp_path / "tmp")})
    r = session.call("agent_claude", {"prompt": "say hello"})
    assert r.ok and r.value["exit_code"] != 0 and r.value["sandbox"]["kind"] == "bwrap", r.value
    assert "Read-only file system" in r.value["output"]
    assert agents.records() == []
    r = session.call("agent_codex", {"prompt": "say hello"})  # not switched on: runs outside, logs
    assert r.ok and r.value["exit_code"] == 0 and r.value["sandbox"] is None
    assert [record["prompt"] for record in agents.records()] == ["say hello"]
