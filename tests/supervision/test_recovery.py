"""Recovery and isolation: a supervisor's death is reported, a fresh one resumes; sessions don't interfere."""

from __future__ import annotations

import os
import signal
import threading
import time

from helpers import living, wait_for, written


def test_restart_after_supervisor_death(open_session, workspace, leftovers):
    session = open_session({"limits": {"max_parallel_calls": 1}})  # the queued calls stay queued
    running = session.submit("bash", {"command": "echo $$ > run.pid; sleep 1000"})
    queued = [session.submit("bash", {"command": f"touch queued-{i}"}) for i in range(3)]
    assert wait_for(lambda: written(workspace / "run.pid"), 10)
    old = session.supervisor_pid
    os.kill(old, signal.SIGKILL)
    for handle in [running, *queued]:
        r = handle.result(timeout=30)
        assert r.error.code == "supervisor_died", r
        assert f"pid {old}" in r.error.message and "SIGKILL" in r.error.message
    assert not session.alive
    assert wait_for(lambda: living([int((workspace / "run.pid").read_text())]) == [], 10)

    session.restart()
    assert session.alive and session.supervisor_pid != old
    # Calls run in order: had the new supervisor been handed the queued calls, they would have run before
    # this one. They were failed, never silently run.
    assert session.call("bash", {"command": "echo back"}).value["output"] == "back\n"
    assert not any((workspace / f"queued-{i}").exists() for i in range(3))


def test_a_dead_supervisor_is_not_alive_while_another_thread_reaps_it(open_session):
    """``Popen.poll()`` answers None while another thread waits on the process: a supervisor killed while
    some thread reaps it must not read as alive (``peon serve`` reported ready and took a call then)."""
    session = open_session()
    assert session.alive
    reaping = session._proc._waitpid_lock  # what a thread in Popen.wait() holds while it reaps
    with reaping:
        os.kill(session.supervisor_pid, signal.SIGKILL)
        assert wait_for(lambda: not session.alive, 10), "a dead supervisor read as alive"
    assert wait_for(lambda: session.call("read", {"path": "x"}).error.code == "supervisor_died", 10)


def test_restart_of_a_running_supervisor_answers_its_calls(open_session, workspace):
    session = open_session()
    handle = session.submit("bash", {"command": "echo $$ > r.pid; sleep 1000"})
    assert wait_for(lambda: written(workspace / "r.pid"), 10)
    session.restart()
    r = handle.result(timeout=30)
    assert not r.ok or r.value["cancelled"], r
    assert living([int((workspace / "r.pid").read_text())]) == []
    assert session.call("bash", {"command": "echo ok"}).ok


def test_restart_keeps_the_state_directory(open_session, tmp_path):
    session = open_session(state_dir=tmp_path / "kept")
    session.call("bash", {"command": "true"})
    os.kill(session.supervisor_pid, signal.SIGKILL)
    assert wait_for(lambda: not session.alive, 10)
    session.restart()
    assert session.info["state_dir"] == str(tmp_path / "kept")
    assert session.info["session_id"] == session.session_id


def test_a_flood_in_one_session_does_not_stall_another(open_session, tmp_path):
    noisy = open_session(workspace=_ws(tmp_path, "noisy"))
    quiet = open_session(workspace=_ws(tmp_path, "quiet"))
    flood = noisy.submit("bash", {"command": "yes | head -c 4000000000 > /dev/null; echo done"})
    latencies = []
    for i in range(20):
        t = time.monotonic()
        r = quiet.call("bash", {"command": f"echo {i}"})
        latencies.append(time.monotonic() - t)
        assert r.value["output"] == f"{i}\n"
    # Every quiet call was answered while the flood still ran: none of them waited for the other session.
    assert not flood.done(), f"the flood should still be running (make it longer if this machine is fast): {latencies}"
    flood.cancel()
    assert flood.result(timeout=30).value["cancelled"] is True


def test_crashing_one_session_leaves_the_other_untouched(open_session, tmp_path):
    a = open_session(workspace=_ws(tmp_path, "a"))
    b = open_session(workspace=_ws(tmp_path, "b"))
    long_b = b.submit("bash", {"command": "sleep 1; echo survived"})
    os.kill(a.supervisor_pid, signal.SIGKILL)
    assert wait_for(lambda: not a.alive, 10)
    assert long_b.result(timeout=30).value["output"] == "survived\n"
    assert b.call("bash", {"command": "echo still"}).value["output"] == "still\n"
    a.close()
    assert b.call("bash", {"command": "echo still"}).ok


def test_many_sessions_at_once(open_session, tmp_path):
    sessions = [open_session(workspace=_ws(tmp_path, f"s{i}")) for i in range(12)]
    results = {}

    def work(i, s):
        results[i] = [s.call("bash", {"command": f"echo {i}-{j}"}).value["output"] for j in range(5)]

    threads = [threading.Thread(target=work, args=(i, s)) for i, s in enumerate(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == {i: [f"{i}-{j}\n" for j in range(5)] for i in range(12)}
    assert len({s.supervisor_pid for s in sessions}) == 12


def _ws(tmp_path, name):
    path = tmp_path / name
    path.mkdir()
    return path


CLIENT = """
import sys, time, peon
with peon.Session(sys.argv[1], {"approval": {"process": "allow"}}, state_dir=sys.argv[2]) as s:
    s.submit("bash", {"command": "sleep 1000 & echo $! > child.pid; setsid sleep 1000 & wait"})
    time.sleep(1000)
"""


def test_a_client_killed_with_sigkill_takes_everything_with_it(workspace, tmp_path, leftovers):
    import subprocess
    import sys

    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    client = subprocess.Popen([sys.executable, str(script), str(workspace), str(tmp_path / "state")],
                              env=leftovers.env())
    try:
        assert wait_for(lambda: written(workspace / "child.pid"), 30)
        # The client, bash and both sleeps carry the tag (the titled supervisor, forkserver and worker no longer
        # show it in /proc); the second sleep starts just after child.pid is written.
        assert wait_for(lambda: len(leftovers.alive()) >= 4, 30), leftovers.alive()
        client.kill()
        client.wait(10)
        # The supervisor sees its channel close, cancels the call and takes every process along.
        assert wait_for(lambda: not leftovers.alive(), 20), leftovers.alive()
    finally:
        if client.poll() is None:
            client.kill()
