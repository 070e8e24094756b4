"""Leftover cgroups: a supervisor killed together with its client leaves its empty ``peon-*`` cgroup;
the next session (and ``peon doctor --clean``) removes it, on evidence, never a live session's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import CGROUP_SUPPORT, wait_for
from peon.workers import cgroup, proctree
from peon.workers.cgroup import owner_state, remove_leftovers

needs_cgroups = pytest.mark.skipif(not CGROUP_SUPPORT.available, reason=f"cgroup v2: {CGROUP_SUPPORT.reason}")

HOST = textwrap.dedent("""\
    import json, sys, time
    import peon
    session = peon.Session(sys.argv[1], {"runtime": {"containment": "cgroup"}, "approval": {"process": "allow"}},
                           state_dir=sys.argv[2])
    assert session.call("bash", {"command": "true"}).ok  # the forkserver and a worker are in the cgroup
    print(json.dumps({"supervisor": session.supervisor_pid, "cgroup": session.info["containment"]["cgroup"]}),
          flush=True)
    time.sleep(600)
""")


def test_a_pid_is_its_owner_only_if_it_started_before_the_cgroup():
    child = subprocess.Popen(["true"])
    child.wait()
    assert owner_state(child.pid, time.time()) == "gone"
    assert owner_state(os.getpid(), time.time()) == "alive"
    assert owner_state(os.getpid(), time.time() - 3600 * 24 * 365) == "reused"  # made long before it started
    zombie = os.fork()
    if zombie == 0:
        os._exit(0)
    try:  # killed with its client: dead, not yet reaped by whoever inherited it
        assert wait_for(lambda: proctree.state(zombie) == "Z")
        assert owner_state(zombie, time.time()) == "gone"
    finally:
        os.waitpid(zombie, 0)


# -- real cgroups ---------------------------------------------------------------------------------

def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@needs_cgroups
def test_leftovers_are_removed_or_ended_and_live_ones_kept(own_parent):
    parent = own_parent  # its own: a session another test opens meanwhile sweeps the shared parent
    tag = os.urandom(4).hex()
    dead, left = parent / f"peon-{tag}dead-{_dead_pid()}", parent / f"peon-{tag}left-{_dead_pid()}"
    live, busy = parent / f"peon-{tag}live-{os.getpid()}", parent / f"peon-{tag}busy-{os.getpid()}"
    foreign = parent / f"other-{tag}-{_dead_pid()}"
    for path in (dead, left, live, busy, foreign):
        os.mkdir(path)
    os.mkdir(dead / "workers")
    os.mkdir(left / "workers")
    kept, orphan = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sleep", "60"])
    try:
        cgroup.Cgroup(busy).add(kept.pid)
        cgroup.Cgroup(left / "workers").add(orphan.pid)
        report = remove_leftovers(parent)
        assert dead.name in report.removed and not dead.exists()
        assert report.kept[busy.name] == "keep: it holds processes" and busy.exists()
        assert report.kept[live.name] == "keep: its supervisor may be alive" and live.exists()
        assert foreign.exists() and foreign.name not in report.kept
        assert kept.poll() is None  # nothing of a session whose supervisor may be alive is killed
        # Its supervisor gone, what its cgroup still holds runs for no one: killed, the cgroup removed.
        assert left.name in report.ended and not left.exists(), report
        assert orphan.wait(timeout=10) == -signal.SIGKILL
    finally:
        for process in (kept, orphan):
            process.kill()
            process.wait()
        for path in (busy, live, foreign):
            cgroup.Cgroup(path).kill_and_remove()


@pytest.fixture
def own_parent():
    """A cgroup of this test's own below the shared parent: the clients started in it make their session
    cgroups there, out of reach of the sessions other tests open meanwhile (which sweep the shared parent)."""
    parent = CGROUP_SUPPORT.parent
    assert parent is not None
    own = cgroup.Cgroup.create(parent / f"tests-{os.urandom(6).hex()}")
    yield own.path
    assert own.kill_and_remove()


def _joining(parent: Path | None):
    """A ``preexec_fn`` that moves the child into ``parent`` before it runs anything."""
    if parent is None:
        return None

    def join() -> None:
        with open(parent / "cgroup.procs", "w") as f:
            f.write("0")
    return join


def _start_host(tmp_path: Path, leftovers, parent: Path | None = None) -> tuple[subprocess.Popen, dict]:
    """A client process holding a cgroup session whose forkserver and a worker have run."""
    workspace, script = tmp_path / "host-ws", tmp_path / "host.py"
    workspace.mkdir()
    script.write_text(HOST)
    host = subprocess.Popen([sys.executable, str(script), str(workspace), str(tmp_path / "host-state")],
                            stdout=subprocess.PIPE, env=leftovers.env(), preexec_fn=_joining(parent))
    line = host.stdout.readline()
    if not line:
        host.kill()
        host.wait()
        pytest.fail("the host did not open its session")
    return host, json.loads(line)


def _kill_client_and_supervisor_together(tmp_path: Path, leftovers, parent: Path | None = None) -> Path:
    """Start a client holding a cgroup session, SIGKILL it and its supervisor at once; return the
    cgroup the supervisor leaves behind (emptied by parent-death signals, never removed)."""
    host, info = _start_host(tmp_path, leftovers, parent)
    try:
        os.kill(host.pid, signal.SIGKILL)
        os.kill(info["supervisor"], signal.SIGKILL)
    finally:
        if host.poll() is None:
            host.kill()
        host.wait()
    left = Path(info["cgroup"])
    # Its workers died with it (or the cgroup is gone already: a session another test opened meanwhile swept it).
    assert wait_for(lambda: not left.exists() or not cgroup.Cgroup(left).populated(), 30)
    return left


@needs_cgroups
def test_the_next_session_removes_the_cgroup_of_a_supervisor_killed_with_its_client(open_session, tmp_path,
                                                                                  leftovers):
    left = _kill_client_and_supervisor_together(tmp_path, leftovers)
    session = open_session({"runtime": {"containment": "cgroup"}})
    assert wait_for(lambda: not left.exists(), 30), f"{left} is still there"
    own = Path(session.info["containment"]["cgroup"])
    assert own.exists() and session.call("bash", {"command": "true"}).ok  # its own is kept


@needs_cgroups
def test_doctor_clean_removes_the_cgroup_of_a_supervisor_killed_with_its_client(tmp_path, leftovers, workspace,
                                                                               own_parent):
    left = _kill_client_and_supervisor_together(tmp_path, leftovers, own_parent)
    assert left.parent == own_parent and left.exists()
    done = subprocess.run([sys.executable, "-m", "peon.cli", "doctor", "--clean", "--json", "-w", str(workspace)],
                          capture_output=True, text=True, env=leftovers.env(), timeout=120,
                          preexec_fn=_joining(own_parent))
    facts = json.loads(done.stdout)
    assert facts["leftover_cgroups"]["parent"] == str(own_parent)
    assert left.name in facts["leftover_cgroups"]["removed"], facts["leftover_cgroups"]
    assert not left.exists()


@needs_cgroups
def test_a_stopped_supervisor_whose_client_died_is_ended_with_its_session(tmp_path, leftovers):
    host, info = _start_host(tmp_path, leftovers)
    supervisor, left = info["supervisor"], Path(info["cgroup"])
    below = proctree.descendants(supervisor)
    assert below  # the forkserver and its workers
    os.kill(supervisor, signal.SIGSTOP)
    try:
        parent = CGROUP_SUPPORT.parent
        assert parent is not None
        report = remove_leftovers(parent)  # its client lives: it is kept, whatever its state
        assert left.name in report.kept and left.name not in report.ended
        os.kill(host.pid, signal.SIGKILL)  # now nothing will ever continue or answer it
        host.wait()
        assert wait_for(lambda: proctree.stat_fields(supervisor) is not None
                        and proctree.stat_fields(supervisor)[1] != host.pid)
        if proctree.stat_fields(supervisor)[1] != 1:
            pytest.skip("a subreaper adopted the supervisor: its client's death is not evident from its parent")
        assert wait_for(lambda: proctree.state(supervisor) == "T")  # still stopped, with everything below it
        report = remove_leftovers(parent)
        assert left.name in report.ended, report
        assert not left.exists()
        assert wait_for(lambda: not any(proctree.state(pid) not in (None, "Z") for pid in [supervisor, *below]))
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        for pid in [supervisor, *below]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@needs_cgroups
def test_doctor_clean_ends_what_a_session_whose_supervisor_is_gone_left_running(tmp_path, leftovers, workspace,
                                                                              own_parent):
    """A command left in its session's cgroup after its supervisor, forkserver and client were all killed
    runs for no one: ``peon doctor --clean`` kills it and removes the cgroup."""
    left = own_parent / f"peon-{os.urandom(8).hex()}-{_dead_pid()}"
    os.mkdir(left)
    os.mkdir(left / "workers")
    command = subprocess.Popen(["sleep", "1000"], env=leftovers.env(), preexec_fn=_joining(left / "workers"))
    try:
        done = subprocess.run([sys.executable, "-m", "peon.cli", "doctor", "--clean", "--json", "-w", str(workspace)],
                              capture_output=True, text=True, env=leftovers.env(), timeout=120,
                              preexec_fn=_joining(own_parent))
        facts = json.loads(done.stdout)
        assert left.name in facts["leftover_cgroups"]["ended"], facts["leftover_cgroups"]
        assert command.wait(timeout=10) == -signal.SIGKILL
        assert not left.exists()
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
