"""A TCP server on the host's loopback that counts the connections it accepts: what the egress proxy's tests
point their attacks at, to show that nothing reached it (and, for allowed requests, that something did); an
HTTP server on the loopback that answers every GET with one text (:func:`text_server`, the registry the
proxy's allowed and asked connections reach); and the attacks, request heads a sandboxed command would send
to the proxy of ``network = ["*.pythonhosted.org"]`` to reach such a server."""

from __future__ import annotations

import http.server
import socket
import threading

ANSWER = b"HTTP/1.0 200 OK\r\nContent-Length: 16\r\n\r\nloopback reached"

RULE = "a host is a name of letters, digits and hyphens"  # how the proxy's 400 answers name the rule
ATTACKS = [  # each passed the old suffix check of "*.pythonhosted.org" (or named another host) and went elsewhere
    "CONNECT ::ffff:127.0.0.1%1\0.files.pythonhosted.org:{port}",
    "CONNECT 127.0.0.1\0.files.pythonhosted.org:{port}",
    "CONNECT 127.0.0.1%00.files.pythonhosted.org:{port}",
    "CONNECT [::ffff:127.0.0.1%1]:{port}",
    "CONNECT [::1%lo]:{port}",
    "CONNECT 127.0.0.1:{port}%.files.pythonhosted.org:443",
    "CONNECT x@127.0.0.1.files.pythonhosted.org:{port}",
    "CONNECT files.pythonhosted.org@127.0.0.1:{port}",
    "CONNECT a_b.files.pythonhosted.org:{port}",
    "CONNECT -x.files.pythonhosted.org:{port}",
    "CONNECT " + "a" * 64 + ".files.pythonhosted.org:{port}",
    "CONNECT " + "a." * 120 + "files.pythonhosted.org:{port}",
    "CONNECT 127.1:{port}",
    "CONNECT 0x7f000001:{port}",
    "CONNECT 2130706433:{port}",
    "CONNECT 127.000.000.001:{port}",
    "CONNECT ::1:{port}",
    "CONNECT files.pythonhosted.org\t:{port}",
    "CONNECT f\u00efles.pythonhosted.org:{port}",
    "GET http://files.pythonhosted.org@127.0.0.1:{port}/ HTTP/1.1",
    "GET http://127.0.0.1\0.files.pythonhosted.org:{port}/",
    "GET http://[::ffff:127.0.0.1%251]:{port}/",
]


# A script a command runs: it sends each request head (hex, one per argument) to the proxy of
# ``HTTP_PROXY`` and prints each answer on a line of its own.
SEND_HEADS = r"""
import os, socket, sys, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
for head in sys.argv[1:]:
    with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as s:
        s.sendall(bytes.fromhex(head))
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    print(answer.decode("latin-1").replace("\r\n", " | ").replace("\n", " | "))
"""


def attack_head(template: str, port: int) -> bytes:
    """The request head of one of :data:`ATTACKS` against ``port``."""
    line = template.format(port=port)
    if not line.endswith("HTTP/1.1"):
        line += " HTTP/1.1"
    return line.encode("utf-8") + b"\r\n\r\n"


class CountingServer:
    """Listens on a loopback address (``127.0.0.1`` and a free port unless given); every connection is
    counted, read up to its first blank line (or end) and answered :data:`ANSWER`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sock = socket.create_server((host, port))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            data = b""
            try:
                while b"\r\n\r\n" not in data and (chunk := conn.recv(4096)):
                    data += chunk
                conn.sendall(ANSWER)
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (Linux)
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> CountingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def text_server(text: str) -> http.server.ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 (a free port) answering every GET with ``text``; ``shutdown()`` it."""
    class Registry(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
