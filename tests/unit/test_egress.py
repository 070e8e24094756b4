"""The egress proxy's decisions without sockets (allowlist matching, request heads), then the proxy
itself on loopback: an allowed host is reached through CONNECT and through a plain HTTP request, a
refused one gets 403 naming it, a malformed head gets 400, and the refusals are kept, bounded."""

from __future__ import annotations

import asyncio
import errno
import http.server
import ipaddress
import socket
import threading

import pytest

from helpers import wait_for
from helpers.proxy import running_proxy
from helpers.loopback import ATTACKS, RULE, CountingServer, attack_head
from peon.approval.network_allowlist import parse_entry, parse_host, reachable, special_reason
from peon.client.config.layers import load_config
from peon.core.errors import ConfigError
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


# -- the host grammar, the entries and the addresses: the proxy decides and connects on the same thing -----------


@pytest.mark.parametrize("template", ATTACKS)
def test_hosts_outside_the_grammar_are_refused_naming_the_rule(template):
    with pytest.raises(BadRequest) as refused:
        parse_head(attack_head(template, 8080))
    message = str(refused.value)
    assert RULE in message or "userinfo" in message or "port" in message, message


def test_names_are_checked_as_they_are_connected_to():
    assert parse_head(b"CONNECT Files.PythonHosted.org.:443 HTTP/1.1\r\n\r\n").host == "files.pythonhosted.org"
    v6 = parse_head(b"CONNECT [0:0::1]:443 HTTP/1.1\r\n\r\n")
    assert (v6.host, v6.address) == ("::1", ipaddress.IPv6Address("::1"))
    mapped = parse_head(b"GET http://[::ffff:127.0.0.1]:80/x HTTP/1.1\r\n\r\n")
    assert mapped.address == ipaddress.IPv6Address("::ffff:127.0.0.1") and mapped.head.startswith(b"GET /x ")
    assert parse_host("a-1.b2.example").name == "a-1.b2.example" and parse_host("x" * 63 + ".test")
    assert not allowed("files.pythonhosted.org\0", 443, ["*.pythonhosted.org"])
    assert not allowed("127.0.0.1", 443, ["*.0.0.1"])


@pytest.mark.parametrize("entry, verdict", [
    ("pypi.org", True), ("*.pythonhosted.org:443", True), ("127.0.0.1", True), ("[::1]:8080", True),
    ("[fd00:ec2::254]", True), ("localhost:8080", True),
    ("*.127.0.0.1", False), ("[::1%1]", False), ("::1", False), ("a_b.test", False), ("pypi.org:0", False),
    ("pypi.org:65536", False), ("*.", False), ("bad host!", False), ("x.test:8a", False), ("127.1", False),
])
def test_entries_are_read_with_the_hosts_grammar(entry, verdict):
    if verdict:
        parse_entry(entry)
        assert load_config({"sandbox": {"network": [entry]}}, env={}).config.sandbox.network == (entry,)
    else:
        with pytest.raises(ValueError):
            parse_entry(entry)
        with pytest.raises(ConfigError) as refused:
            load_config({"sandbox": {"network": [entry]}}, env={})
        assert "sandbox.network" in refused.value.message


@pytest.mark.parametrize("address, reason", [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("10.1.2.3", "private (RFC 1918)"), ("172.16.0.1", "private (RFC 1918)"), ("192.168.1.1", "private (RFC 1918)"),
    ("fd12:3456::1", "unique local (ULA)"), ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
    ("::ffff:127.0.0.1", "an IPv4-mapped IPv6 address"), ("::ffff:8.8.8.8", "an IPv4-mapped IPv6 address"),
    ("::127.0.0.1", "an IPv4-compatible IPv6 address"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("224.0.0.1", "multicast"), ("ff0e::1", "multicast"),
    ("169.254.169.254", "a cloud metadata service"), ("fd00:ec2::254", "a cloud metadata service"),
    ("168.63.129.16", "a cloud metadata service"), ("100.100.100.200", "a cloud metadata service"),
    ("2002:7f00:1::", "an IPv6 address carrying the special IPv4 address 127.0.0.1"),
    ("64:ff9b::a00:1", "an IPv6 address carrying the special IPv4 address 10.0.0.1"),
    ("100.64.0.1", "not a global address (special-purpose)"), ("192.0.2.1", "not a global address (special-purpose)"),
    ("240.0.0.1", "not a global address (special-purpose)"),
    ("8.8.8.8", None), ("2606:4700:4700::1111", None), ("64:ff9b::808:808", None),
])
def test_special_addresses_are_named_by_their_class(address, reason):
    assert special_reason(ipaddress.ip_address(address)) == reason


def test_only_an_entry_naming_a_special_address_lets_it_through():
    def split(addresses, port, entries):
        kept, refused = reachable([ipaddress.ip_address(a) for a in addresses], port, [parse_entry(e) for e in entries])
        return [str(a) for a in kept], [(str(a), why) for a, why in refused]

    assert split(["127.0.0.1", "8.8.8.8", "8.8.8.8"], 443, ["registry.test"]) == (
        ["8.8.8.8"], [("127.0.0.1", "loopback")])
    assert split(["127.0.0.1"], 443, ["registry.test", "127.0.0.1"]) == (["127.0.0.1"], [])
    assert split(["127.0.0.1"], 443, ["registry.test", "127.0.0.1:80"]) == ([], [("127.0.0.1", "loopback")])
    assert split(["127.0.0.1", "::1"], 80, ["localhost:80"]) == (["127.0.0.1", "::1"], [])
    assert split(["127.0.0.2"], 80, ["localhost"]) == ([], [("127.0.0.2", "loopback")])
    mapped = str(ipaddress.ip_address("::ffff:127.0.0.1"))  # "::ffff:7f00:1" before Python 3.13
    assert split(["::ffff:127.0.0.1"], 80, ["127.0.0.1"]) == ([], [(mapped, "an IPv4-mapped IPv6 address")])
    assert split(["169.254.169.254"], 80, ["*.internal", "metadata.google.internal"])[0] == []


class Resolver:
    """The proxy's resolver, by a table: every question is kept, and a name it does not know fails."""

    def __init__(self, table: dict[str, list[str]]):
        self.table, self.asked = table, []

    async def __call__(self, name: str, port: int):
        self.asked.append(name)
        answers = self.table.get(name)
        if answers is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ipaddress.ip_address(a) for a in answers]




def test_the_nul_byte_attack_and_its_relatives_never_reach_a_loopback_server():
    """``network = ["*.pythonhosted.org"]``: what a sandboxed command sends to reach the host's loopback."""
    resolver = Resolver({})
    with CountingServer() as target, running_proxy(("*.pythonhosted.org",), resolver) as (_, port):
        for template in ATTACKS:
            answer = exchange(port, attack_head(template, target.port))
            assert answer.startswith(b"HTTP/1.1 400 "), (template, answer)
            assert RULE.encode() in answer or b"userinfo" in answer or b"port" in answer, (template, answer)
        assert target.accepted == 0 and resolver.asked == []


def test_a_name_resolving_to_loopback_is_refused_unless_an_entry_names_the_address():
    resolver = Resolver({"registry.test": ["127.0.0.1"], "cdn.example.test": ["169.254.169.254", "fd00:ec2::254"]})
    with CountingServer() as target:
        up = target.port
        with running_proxy((f"registry.test:{up}", "*.example.test"), resolver) as (proxy, port):
            answer = exchange(port, f"CONNECT registry.test:{up} HTTP/1.1\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 403 ") and b"127.0.0.1 (loopback)" in answer, answer
            answer = exchange(port, f"GET http://registry.test:{up}/ HTTP/1.1\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 403 ") and b"names it literally" in answer, answer
            answer = exchange(port, b"CONNECT cdn.example.test:80 HTTP/1.1\r\n\r\n")
            assert b"169.254.169.254 (a cloud metadata service)" in answer and b"fd00:ec2::254" in answer, answer
            assert exchange(port, b"CONNECT nowhere.example.test:80 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 502 ")
            assert target.accepted == 0 and list(proxy.refused) == [f"registry.test:{up}"] * 2 + ["cdn.example.test:80"]
        # Named literally, the loopback address is reached — the one the name resolved to, resolved once.
        with running_proxy((f"registry.test:{up}", f"127.0.0.1:{up}"), resolver) as (proxy, port):
            asked = len(resolver.asked)
            tunnel = exchange(port, f"CONNECT registry.test:{up} HTTP/1.1\r\n\r\nGET / HTTP/1.0\r\n\r\n".encode())
            assert tunnel.startswith(b"HTTP/1.1 200 Connection Established") and tunnel.endswith(b"loopback reached")
            assert target.accepted == 1 and resolver.asked[asked:] == ["registry.test"]
            plain = exchange(port, f"GET http://127.0.0.1:{up}/ HTTP/1.1\r\n\r\n".encode())
            assert plain.endswith(b"loopback reached") and target.accepted == 2 and len(resolver.asked) == asked + 1


def test_the_proxy_connects_to_the_address_it_checked_whatever_the_name_resolves_to_next():
    """DNS rebinding: the name resolves to an address an entry names, then to another one. The proxy asks
    once per request and connects to the address it checked, never to the later answer."""
    class Rebinding(Resolver):
        async def __call__(self, name, port):
            self.asked.append(name)
            return [ipaddress.ip_address("127.0.0.2" if len(self.asked) == 1 else "127.0.0.1")]

    resolver = Rebinding({})
    with CountingServer() as later, CountingServer("127.0.0.2", later.port) as checked:
        up = later.port
        with running_proxy((f"rebind.test:{up}", f"127.0.0.2:{up}"), resolver) as (_, port):
            tunnel = exchange(port, f"CONNECT rebind.test:{up} HTTP/1.1\r\n\r\nGET / HTTP/1.0\r\n\r\n".encode())
            assert tunnel.endswith(b"loopback reached") and resolver.asked == ["rebind.test"]
            assert (checked.accepted, later.accepted) == (1, 0)
            refused = exchange(port, f"CONNECT rebind.test:{up} HTTP/1.1\r\n\r\n".encode())
            assert refused.startswith(b"HTTP/1.1 403 ") and b"127.0.0.1 (loopback)" in refused
            assert (checked.accepted, later.accepted) == (1, 0)
