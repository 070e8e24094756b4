"""The supervisor's diagnostics never block a session, and every call the client sends is bounded.

A host that pipes the supervisor's stderr and never reads it used to stop every call after ~64 KiB
of diagnostics (the supervisor blocked in a print on its event loop, and a call that had not started
had no bound on the client). Now stderr is a bounded buffer emptied by a thread of its own, drops
are counted and said, and a call that is neither started nor answered within its bound is answered
``supervisor_died``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil

import peon.client.watchdog
from helpers import ALLOW_ALL
from peon.supervisor.diagnostics import BUFFER_BYTES

FIXTURES = Path(__file__).parent.parent / "fixtures"

HOST = textwrap.dedent("""\
    import json, sys, time
    import peon
    workspace, state, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    codes = {}
    with peon.Session(workspace, {"approval": {"read_only": "allow"}}, state_dir=state) as session:
        started = time.monotonic()
        for _ in range(calls):
            result = session.call("read", {"path": "f.txt"})
            key = "ok" if result.ok else result.error.code
            codes[key] = codes.get(key, 0) + 1
        print(json.dumps({"codes": codes, "seconds": time.monotonic() - started}), flush=True)
""")


# -- a real host --------------------------------------------------------------------------------

def _run_host(tmp_path: Path, leftovers, calls: int) -> tuple[dict, bytes]:
    """Run a host whose supervisor's stderr is a pipe nobody reads until the host printed its figures;
    every call's audit lines fail (``audit.jsonl`` is a directory), one diagnostic line each."""
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    (workspace / "f.txt").write_text("hello\n")
    (state / "audit.jsonl").mkdir(parents=True)
    script = tmp_path / "host.py"
    script.write_text(HOST)
    host = subprocess.Popen([sys.executable, str(script), str(workspace), str(state), str(calls)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=leftovers.env())
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(host.stdout.readline()), daemon=True)
    reader.start()
    reader.join(90)  # a hang guard: 500 refused calls take a few seconds
    try:
        assert line and line[0], "the host's calls were not all answered (its supervisor blocked on stderr?)"
        errors = host.stderr.read()  # only now is stderr read
        assert host.wait(30) == 0
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    return json.loads(line[0]), errors


def test_a_host_that_never_reads_stderr_gets_every_call_answered(tmp_path, leftovers):
    figures, errors = _run_host(tmp_path, leftovers, 500)
    assert figures["codes"] == {"audit_failed": 500}
    lines = errors.decode().splitlines()
    assert sum("cannot write the audit log" in line for line in lines) == 500  # nothing dropped: it fit


def test_diagnostics_past_the_bound_are_dropped_by_whole_lines_and_counted(tmp_path, leftovers):
    calls = 2 * (BUFFER_BYTES + 65536) // 120
    figures, errors = _run_host(tmp_path, leftovers, calls)
    assert figures["codes"] == {"audit_failed": calls}
    lines = errors.decode().splitlines()
    notices = [line for line in lines if "dropped: stderr was not being read" in line]
    assert len(notices) >= 1, lines[-3:]
    written = sum("cannot write the audit log" in line for line in lines)
    dropped = sum(int(notice.split()[1]) for notice in notices)
    assert written + dropped == calls  # every line either written whole or counted
    assert all(line.startswith("peon-supervisor: ") for line in lines)  # no line spliced onto another


def test_no_session_process_holds_the_hosts_stderr(open_session, containment, workspace):
    (workspace / "f.txt").write_text("hello\n")
    session = open_session({"runtime": {"containment": containment}})
    assert session.call("read", {"path": "f.txt"}).ok  # the forkserver and workers are up
    host = os.fstat(2)
    supervisor = psutil.Process(session.supervisor_pid)
    processes = [supervisor, *supervisor.children(recursive=True)]
    assert len(processes) >= 2  # the forkserver, its standbys
    looked = 0
    for process in processes:
        try:  # a worker may retire meanwhile
            names = os.listdir(f"/proc/{process.pid}/fd")
        except FileNotFoundError:
            continue
        for fd in names:
            try:
                held = os.stat(f"/proc/{process.pid}/fd/{fd}")
            except OSError:
                continue
            if process.pid != supervisor.pid or fd == "2":  # the supervisor keeps a close-on-exec copy
                assert (held.st_dev, held.st_ino) != (host.st_dev, host.st_ino), (process.pid, fd)
        looked += 1
    assert looked >= 2


# -- the client's bound on calls not yet started ------------------------------------------------

def test_a_call_the_supervisor_never_starts_is_answered_by_its_bound(open_session, monkeypatch):
    # Small allowances (a slow first start, the margin every bound gets): the call needs no worker, and the
    # bound is what is checked, whatever its size.
    monkeypatch.setattr(peon.client.watchdog, "POOL_START_SECONDS", 1.0)
    monkeypatch.setattr(peon.client.watchdog, "ANSWER_MARGIN_SECONDS", 1.0)
    limits = {"worker_start_seconds": 1.0, "worker_grace_seconds": 1.0}
    session = open_session({**ALLOW_ALL, "limits": limits}, env={"PYTHONPATH": str(FIXTURES)},
                           tools=["peon_fault_tools:HangSupervisorTool"])
    sent = time.monotonic()
    result = session.call("hang_supervisor", {})
    took = time.monotonic() - sent
    assert result.error is not None and result.error.code == "supervisor_died", result
    assert "neither started nor answered" in result.error.message
    bound = session._watchdog.start_bound()
    assert bound <= took < bound + 10  # answered at its bound (+ a check interval, a loaded machine)
    assert not session.alive


def test_a_call_waiting_for_its_approver_is_not_taken_for_a_hang(open_session, workspace, monkeypatch):
    monkeypatch.setattr(peon.client.watchdog, "POOL_START_SECONDS", 1.0)  # the pool is up long before it is needed
    monkeypatch.setattr(peon.client.watchdog, "ANSWER_MARGIN_SECONDS", 1.0)
    (workspace / "f.txt").write_text("hello\n")
    answered = threading.Event()

    def slow_approver(request):
        answered.wait(60)
        return "allow_once"

    limits = {"worker_start_seconds": 1.0, "worker_grace_seconds": 1.0, "approval_timeout_seconds": 60.0}
    session = open_session({"approval": {"read_only": "ask"}, "limits": limits}, approver=slow_approver)
    handle = session.submit("read", {"path": "f.txt"})
    deadline = time.monotonic() + session._watchdog.start_bound() + 3
    while time.monotonic() < deadline and not handle.done():
        time.sleep(0.1)
    assert not handle.done(), handle.result()  # still waiting on its approver, past the plain bound
    answered.set()
    result = handle.result(timeout=30)
    assert result.ok, result.error


def test_diagnostics_written_just_before_the_supervisor_exits_reach_stderr(tmp_path, leftovers):
    script = tmp_path / "host.py"
    script.write_text(textwrap.dedent("""\
        import sys
        import peon
        session = peon.Session(sys.argv[1], state_dir=sys.argv[2])
        session._send_bytes(b"not json\\n")  # the supervisor says it ignored it, on stderr
        session.close()  # at once: the line is written as the supervisor exits
    """))
    (tmp_path / "ws").mkdir()
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "ws"), str(tmp_path / "state")],
                          capture_output=True, text=True, env=leftovers.env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "peon-supervisor: ignored a malformed message from the client" in done.stderr
