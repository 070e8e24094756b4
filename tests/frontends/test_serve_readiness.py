"""``peon serve``'s readiness against a fake session whose supervisor is a real process: not ready until a
standby worker runs beneath it, and not ready while draining."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from peon.mcp.revisions import ServerIdentity
from peon.serve.app import ServeOptions, ServeState
from peon.serve.guard import Guard


# -- readiness -------------------------------------------------------------------------------------------


def test_readiness_waits_for_a_standby_worker_and_fails_while_draining():

    class FakeSession:
        """A session whose 'supervisor' is a real process with a child titled like a standby worker."""

        def __init__(self, with_standby: bool):
            standby = "subprocess.Popen(['bash', '-c', 'exec -a \"peon-worker standby\" sleep 60'])"
            script = f"import subprocess, sys, time\nif len(sys.argv) > 1: {standby}\ntime.sleep(60)\n"
            self.proc = subprocess.Popen([sys.executable, "-c", script, *(["standby"] if with_standby else [])])
            self.supervisor_pid = self.proc.pid
            self.alive = True
            self.info = {"containment": {"kind": "process-tree"}}

        def tools(self):
            return [{"name": "bash"}]

    state = ServeState(Guard.build(None, "127.0.0.1"), ServerIdentity(), ServeOptions())
    assert state.readiness().startswith("starting")
    sessions = [FakeSession(False), FakeSession(True)]
    try:
        state.session, state.router = sessions[0], object()  # type: ignore[assignment]
        assert state.readiness() == "starting: no standby worker yet"
        state.session = sessions[1]
        deadline = time.monotonic() + 10
        while state.readiness() is not None and time.monotonic() < deadline:
            time.sleep(0.02)  # the fake supervisor starts its child
        assert state.readiness() is None
        state.draining = True
        assert state.readiness() == "draining"
    finally:
        for session in sessions:
            for child in psutil.Process(session.proc.pid).children(recursive=True):
                child.kill()
            session.proc.kill()
            session.proc.wait()

