"""``peon serve``'s HTTP server run in this process on loopback, with a session that never starts: metrics
answer, readiness says not ready, ``/mcp`` answers 503 with ``Retry-After`` and no port file is written.
And the bound on pending request heads: the oldest is shed first."""

from __future__ import annotations

import http.client
import json
import threading

from helpers import wait_for
from peon.mcp.protocol import ServerIdentity
from peon.serve import main as serve_main
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


def test_metrics_answer_before_the_session_is_ready(tmp_path, monkeypatch):
    release = threading.Event()
    port_file = tmp_path / "port"
    listening: list[int] = []

    def listen(host, port):  # the port is known from the socket: the port file waits for the session
        sock = real_listen(host, port)
        listening.append(sock.getsockname()[1])
        return sock

    real_listen = serve_main.listen
    monkeypatch.setattr(serve_main, "listen", listen)

    def slow_session(approver):
        release.wait(30)
        raise RuntimeError("this test's session never starts")

    config = ServeConfig(port=0, port_file=str(port_file), options=ServeOptions())
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(run(tmp_path, slow_session, ServerIdentity(), config)))
    thread.start()
    try:
        assert wait_for(lambda: listening, 30)
        port = listening[0]
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
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/mcp", body=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
                     headers={"content-type": "application/json", "accept": "application/json, text/event-stream"})
        response = conn.getresponse()
        assert response.status == 503 and response.getheader("retry-after") == "1"
        assert "not ready: starting" in json.loads(response.read())["error"]["message"]
        conn.close()
        assert not port_file.exists()  # written only once the session serves /mcp
    finally:
        release.set()
        thread.join(30)
    assert codes == [1] and not port_file.exists()

