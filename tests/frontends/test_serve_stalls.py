"""``peon serve`` under stalled connections (slowloris): probes and calls still answered, stalled heads and
bodies closed within their deadlines."""

from __future__ import annotations

import socket
import time

import pytest

from helpers import wait_for
from helpers.serve import ServeProcess, initialize, serve_env

HEAD = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"  # never finished


@pytest.fixture
def stalled_server(leftovers, workspace, tmp_path):
    server = ServeProcess(workspace, serve_env(leftovers, tmp_path), tmp_path, "--allow", "read_only",
                          "--header-timeout-seconds", "2", "--body-timeout-seconds", "1",
                          "--max-pending-connections", "16")
    yield server
    server.stop()


def open_stalled(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(HEAD)
        sockets.append(sock)
    return sockets


def closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.01)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_half_open_connections_do_not_block_probes_or_calls(stalled_server):
    port = stalled_server.port
    stalled = open_stalled(port, 200)
    try:
        started = time.monotonic()
        for path in ("/healthz", "/readyz", "/metrics"):
            status, _, _ = stalled_server.get(path)
            assert status == 200, path
        assert initialize(port)  # a real client's request goes through
        assert time.monotonic() - started < 10
        # Beyond the cap the oldest were closed at once; the rest within the head deadline.
        assert sum(closed_by_server(sock) for sock in stalled[:150]) >= 150 - 16
        assert wait_for(lambda: all(closed_by_server(sock) for sock in stalled), 15)
        metrics = stalled_server.get("/metrics")[2].decode()
        assert 'peon_limits_hit_total{limit="pending_connections"}' in metrics
        assert 'peon_limits_hit_total{limit="request_head"}' in metrics
    finally:
        for sock in stalled:
            sock.close()


def test_a_stalled_body_is_answered_408(stalled_server):
    with socket.create_connection(("127.0.0.1", stalled_server.port), timeout=10) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"")
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = sock.recv(4096)
            assert chunk, response
            response += chunk
        assert response.startswith(b"HTTP/1.1 408"), response
