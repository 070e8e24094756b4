"""The egress proxy's decisions without sockets (allowlist matching, request heads), then the proxy
itself on loopback: an allowed host is reached through CONNECT and through a plain HTTP request, a
refused one gets 403 naming it, a malformed head gets 400, and the refusals are kept, bounded."""

from __future__ import annotations

import asyncio
import errno
import http.server
import socket
import threading

import pytest

from helpers import wait_for
from peon.supervisor.egress import MAX_CONNECTIONS, REFUSALS_KEPT, BadRequest, Proxy, allowed, parse_head


@pytest.mark.parametrize("host, port, entries, verdict", [
    ("pypi.org", 443, ["pypi.org"], True),
    ("PyPI.org.", 443, ["pypi.org"], True),
    ("evil-pypi.org", 443, ["pypi.org"], False),
    ("pypi.org.evil.test", 443, ["pypi.org"], False),
    ("localhost", 8080, ["localhost:8080"], True),
    ("localhost", 8081, ["localhost:8080"], False),
    ("files.pythonhosted.org", 443, ["*.pythonhosted.org"], True),
    ("pythonhosted.org", 443, ["*.pythonhosted.org"], False),
    ("127.0.0.1", 80, ["localhost"], False),
    ("anything", 80, [], False),
])
def test_allowlist_matches_by_name_and_port(host, port, entries, verdict):
    assert allowed(host, port, entries) is verdict


def test_request_heads_are_parsed_strictly():
    connect = parse_head(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
    assert (connect.method, connect.host, connect.port, connect.head) == ("CONNECT", "pypi.org", 443, b"")
    assert parse_head(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").host == "::1"
    get = parse_head(b"GET http://localhost:8080/simple/?q=1 HTTP/1.1\r\nHost: localhost:8080\r\n\r\n")
    assert (get.host, get.port) == ("localhost", 8080)
    assert get.head == b"GET /simple/?q=1 HTTP/1.1\r\nHost: localhost:8080\r\n\r\n"
    assert parse_head(b"GET http://example.test/ HTTP/1.0\r\n\r\n").port == 80
    for bad in (b"GET /relative HTTP/1.1\r\n\r\n", b"CONNECT nohost HTTP/1.1\r\n\r\n",
                b"CONNECT h:99999 HTTP/1.1\r\n\r\n", b"GET ftp://x/ HTTP/1.1\r\n\r\n", b"garbage\r\n\r\n",
                b"GET http://x/ SPDY/3\r\n\r\n"):
        with pytest.raises(BadRequest):
            parse_head(bad)


class Upstream(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"upstream saw {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_proxy_lets_through_only_the_allowlist():
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    up = upstream.server_address[1]
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    proxy = Proxy(listener, (f"localhost:{up}",))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    serving = asyncio.run_coroutine_threadsafe(proxy.serve(), loop)
    port = listener.getsockname()[1]
    try:
        plain = exchange(port, f"GET http://localhost:{up}/simple/ HTTP/1.0\r\n\r\n".encode())
        assert plain.startswith(b"HTTP/1.0 200") and plain.endswith(b"upstream saw /simple/")
        tunnel = exchange(port, f"CONNECT localhost:{up} HTTP/1.1\r\n\r\nGET /t HTTP/1.0\r\n\r\n".encode())
        assert tunnel.startswith(b"HTTP/1.1 200 Connection Established") and tunnel.endswith(b"upstream saw /t")
        refused = exchange(port, f"GET http://127.0.0.1:{up}/ HTTP/1.0\r\n\r\n".encode())
        assert refused.startswith(b"HTTP/1.1 403") and f"127.0.0.1:{up} is not in sandbox.network".encode() in refused
        assert exchange(port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert list(proxy.refused) == [f"127.0.0.1:{up}"] and proxy.refused.maxlen == REFUSALS_KEPT
        # Bounded: connections that never send a head hold a slot each until their 30 s are up; one more than
        # the bound is answered 503 at once instead of waiting with a descriptor of the supervisor's.
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(MAX_CONNECTIONS)]
        try:
            assert wait_for(lambda: proxy._active == MAX_CONNECTIONS, 10)
            try:  # the answer, or a reset: the head it sent was never read
                assert exchange(port, b"CONNECT localhost:1 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 503")
            except OSError as exc:  # closed at once; a wait would end in TimeoutError instead
                assert exc.errno in (errno.ECONNRESET, errno.ENOTCONN, errno.EPIPE), exc
        finally:
            for sock in idle:
                sock.close()
        assert wait_for(lambda: proxy._active == 0, 10)
    finally:
        serving.cancel()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.2), loop).result(10)  # let the handlers finish
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        listener.close()
        upstream.shutdown()
        upstream.server_close()
