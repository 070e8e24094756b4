"""Process-tree containment (no cgroup): a command that stops its own worker and kills the supervisor
does not outlive its session. The worker, stopped, never runs its parent-death handler; the client,
told of every worker (pid and start time) by the supervisor, kills that worker's tree itself."""

from __future__ import annotations

from helpers import living, wait_for

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
