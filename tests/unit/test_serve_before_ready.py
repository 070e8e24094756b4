"""``peon serve``'s HTTP server run in this process on loopback, with a session that never starts: metrics
answer and readiness says not ready. And the bound on pending request heads: the oldest is shed first."""

from __future__ import annotations

import http.client
import threading

from helpers import wait_for
from peon.mcp.protocol import ServerIdentity
from peon.serve.main import ServeConfig, run
from peon.serve.app import ServeOptions
from peon.serve.stalls import PendingHeads


def test_pending_heads_shed_the_oldest():
    closed: list[int] = []
    pending = PendingHeads(3)
    for key in range(3):
        assert pending.add(key, lambda key=key: closed.append(key)) == []
    for close in pending.add(3, lambda: closed.append(3)):
        close()
    assert closed == [0] and len(pending) == 3 and pending.shed == 1
    pending.discard(1)
    assert pending.add(4, lambda: None) == [] and len(pending) == 3


def test_metrics_answer_before_the_session_is_ready(tmp_path):
    release = threading.Event()
    port_file = tmp_path / "port"

    def slow_session(approver):
        release.wait(30)
        raise RuntimeError("this test's session never starts")

    config = ServeConfig(port=0, port_file=str(port_file), options=ServeOptions())
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(run(tmp_path, slow_session, ServerIdentity(), config)))
    thread.start()
    try:
        assert wait_for(port_file.exists, 30)
        port = int(port_file.read_text())
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read().decode()
        conn.close()
        assert response.status == 200, body
        assert "peon_ready 0.0" in body
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/readyz")
        assert conn.getresponse().status == 503
        conn.close()
    finally:
        release.set()
        thread.join(30)
    assert codes == [1]

