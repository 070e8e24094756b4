"""A command that stops its own worker and kills the supervisor does not outlive its session. With its
client alive (process-tree containment), the client, told of every worker (pid and start time) by the
supervisor, kills that worker's tree itself; with the client killed too (both containments), the
session's own processes do: the forkserver ends every worker's tree, and the kernel continues a stopped
worker (and forkserver) whose process group the deaths orphaned."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from helpers import ALLOW_ALL, living, wait_for
from peon.workers import proctree

PPID = "ppid() { sed 's/.*) //' /proc/$1/stat | cut -d' ' -f2; }; "  # the parent of a pid (titles have spaces)


def test_a_command_that_stops_its_worker_and_kills_the_supervisor_dies_with_the_session(open_session, workspace):
    # The command signals Peon's own processes, which the default sandbox refuses: it runs unsandboxed.
    session = open_session({"runtime": {"containment": "process-tree"}, "sandbox": {"mode": "off"}})
    assert session.info["containment"]["kind"] == "process-tree"
    supervisor = session.supervisor_pid
    command = (PPID + "W=$PPID; S=$(ppid $(ppid $W)); echo $W > worker.pid; echo $$ > shell.pid; "
               "sleep 1000 & echo $! > bg.pid; kill -STOP $W; kill -KILL $S; sleep 1000")
    r = session.call("bash", {"command": command, "timeout_seconds": 60})
    assert not r.ok and r.error.code == "supervisor_died", r
    assert "SIGKILL" in r.error.message, r.error.message
    pids = [int((workspace / name).read_text()) for name in ("worker.pid", "shell.pid", "bg.pid")]
    assert wait_for(lambda: living([supervisor, *pids]) == [], 10), living([supervisor, *pids])


def test_a_pid_whose_start_time_differs_is_never_killed(open_session, leftovers):
    """A tracked pid that now names another process (reused) is left alone when the supervisor dies."""
    import os
    import signal
    import subprocess

    import psutil

    session = open_session({"runtime": {"containment": "process-tree"}})
    assert session.call("bash", {"command": "true"}).ok
    bystander = subprocess.Popen(["sleep", "1000"], env=leftovers.env(), start_new_session=True)
    try:
        started = psutil.Process(bystander.pid).create_time()
        # As if the supervisor had told of a worker with this pid that started at another time.
        session._rescue.track_worker({"op": "worker", "pid": bystander.pid, "start_time": started - 1.0})
        os.kill(session.supervisor_pid, signal.SIGKILL)
        assert wait_for(lambda: not session.alive, 10)
        assert not session.call("bash", {"command": "true"}).ok
        assert bystander.poll() is None, "a process that merely reused a worker's pid was killed"
    finally:
        bystander.kill()
        bystander.wait()


CLIENT = textwrap.dedent("""\
    import json, sys
    import peon
    config = json.loads(sys.argv[3])
    session = peon.Session(sys.argv[1], config, state_dir=sys.argv[2])
    session.call("bash", {"command": sys.argv[4], "timeout_seconds": 120})
""")


# Each stop has taken effect before the kills (STOPPED): a worker whose stop is still pending when the
# last of its forkserver, supervisor and client dies misses the kernel's continue (docs/security.md).
STOPPED = "until [ $(sed 's/.*) //' /proc/$W/stat | cut -d' ' -f1) = T ]; do :; done; "


# The client is killed first: a death before it (the forkserver's, the supervisor's) wakes the session's own
# clean-up, which may end this command — and with it the rest of its kills — before the client is reached.
@pytest.mark.parametrize("attack", ["kill -STOP $W; " + STOPPED + "kill -KILL $C $S",
                                    "kill -STOP $W $F; " + STOPPED + "kill -KILL $C $S",
                                    "kill -STOP $W; " + STOPPED + "kill -KILL $C $F $S"],
                         ids=["stop-worker", "stop-worker-and-forkserver", "stop-worker-kill-forkserver"])
def test_nothing_of_a_session_outlives_its_client_and_supervisor_killed_by_a_command_that_stopped_its_worker(
        attack, containment, workspace, tmp_path, leftovers):
    """No client is left to kill the recorded workers: the session's own processes end it — the stopped
    worker (and forkserver) included, with the command and what it left in the background (a daemon that
    setsid-ed too)."""
    config = {**ALLOW_ALL, "runtime": {"containment": containment}, "sandbox": {"mode": "off"}}
    command = (PPID + "W=$PPID; F=$(ppid $W); S=$(ppid $F); C=$(ppid $S); echo $W > worker.pid; echo $$ > shell.pid; "
               "echo $S > supervisor.pid; echo $C > client.pid; sleep 1000 & echo $! > bg.pid; "
               "(setsid sleep 1000 & echo $! > daemon.pid); echo $F > forkserver.pid; " + attack + "; sleep 1000")
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    client = subprocess.Popen([sys.executable, str(script), str(workspace), str(tmp_path / "state"),
                               json.dumps(config), command], env=leftovers.env())
    try:
        assert client.wait(timeout=60) == -signal.SIGKILL
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert int((workspace / "client.pid").read_text()) == client.pid
    names = ("supervisor.pid", "forkserver.pid", "worker.pid", "shell.pid", "bg.pid", "daemon.pid")
    pids = [int((workspace / name).read_text()) for name in names]
    states = lambda: dict(zip(names, [proctree.state(pid) for pid in pids], strict=True))  # noqa: E731
    assert wait_for(lambda: living(pids) == [], 20), states()
    assert leftovers.alive() == []
