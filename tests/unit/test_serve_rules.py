"""The sans-I/O parts of ``peon serve`` without processes: the guard, the HTTP wire rules, the idempotency
store, and the metrics' labels."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peon.core.errors import ErrorCode
from peon.client.result import ToolResult
from peon.serve import wire
from peon.serve.guard import Guard, bind_problem, is_loopback_host, split_host_header
from peon.serve.idempotency import Conflict, Follow, Full, IdempotencyStore, Replay, Run, fingerprint, key_problem
from peon.serve.metrics import Metrics

TOKEN = "s3cret-token-0123456789"


# -- the guard -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.9.9.9", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("LOCALHOST.", True), ("a.localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.1", False),
    ("evil.example.com", False), ("localhost.evil.com", False), ("", False),
])
def test_loopback_hosts(host, loopback):
    assert is_loopback_host(host) is loopback


def test_a_network_address_needs_a_token():
    assert bind_problem("127.0.0.1", has_token=False) is None
    assert bind_problem("0.0.0.0", has_token=True) is None
    for host in ("0.0.0.0", "::", "192.0.2.1"):
        assert "not a loopback address" in bind_problem(host, has_token=False)


@pytest.mark.parametrize("value, parsed", [
    ("localhost:8765", ("localhost", 8765)), ("127.0.0.1", ("127.0.0.1", None)), ("[::1]:80", ("[::1]", 80)),
    ("Example.COM", ("example.com", None)), ("a:b", None), ("[::1", None), ("x/y", None), ("u@h", None),
    ("h:1234567", None), ("", None),
])
def test_host_header_parsing(value, parsed):
    assert split_host_header(value) == parsed


def test_loopback_server_accepts_only_loopback_hosts_and_origins():
    guard = Guard.build(None, "127.0.0.1")
    assert guard.check("127.0.0.1:8765", None, None) is None
    assert guard.check("localhost:1", "http://localhost:3000", None) is None
    assert guard.check("[::1]:8765", "https://127.0.0.1", None) is None
    assert guard.check("evil.example.com:8765", None, None).status == 421
    assert guard.check("127.0.0.1:8765", "http://evil.example.com", None).status == 403
    assert guard.check("127.0.0.1:8765", "null", None).status == 403
    assert guard.check(None, None, None).status == 421
    allowed = Guard.build(None, "127.0.0.1", hosts=["peon.internal"], origins=["https://app.example.com/"])
    assert allowed.check("peon.internal:9", "https://APP.example.com", None) is None


def test_network_server_checks_the_token_last_and_in_the_right_order():
    guard = Guard.build(TOKEN, "0.0.0.0")
    assert guard.check("10.1.2.3:8765", None, f"Bearer {TOKEN}") is None
    assert guard.check("peon.default.svc", None, f"bearer  {TOKEN} ") is None
    missing = guard.check("10.1.2.3", None, None)
    assert missing.status == 401 and missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert guard.check("10.1.2.3", None, "Basic abc").status == 401
    wrong = guard.check("10.1.2.3", None, "Bearer " + TOKEN[:-1] + "x")
    assert wrong.status == 401 and TOKEN not in wrong.message
    assert guard.check("10.1.2.3", "http://evil.example.com", None).status == 403  # Origin before the token
    assert guard.check("10.1.2.3", None, None, needs_token=False) is None  # the probes
    assert guard.check("10.1.2.3", None, "Bearer \udcff").status == 401  # undecodable bytes, no exception
    assert guard.check("10.1.2.3", None, None, peon_token=TOKEN) is None  # behind a proxy that eats Authorization
    assert guard.check("10.1.2.3", None, f"Bearer {TOKEN}", peon_token="wrong").status == 401


def test_refusals_show_values_escaped_and_bounded():
    refusal = Guard.build(None, "127.0.0.1").check("evil\x1b[2J" + "x" * 500, None, None)
    assert refusal.status == 421 and "\x1b" not in refusal.message and len(refusal.message) < 400


# -- the wire --------------------------------------------------------------------------------------------


def body(method="tools/call", name="bash", version="2026-07-28"):
    params = {"_meta": {"io.modelcontextprotocol/protocolVersion": version,
                        "io.modelcontextprotocol/clientCapabilities": {}}}
    if name is not None:
        params["name"] = name
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def headers(version="2026-07-28", method="tools/call", name="bash"):
    out = [("MCP-Protocol-Version", version), ("Mcp-Method", method)]
    if name is not None:
        out.append(("Mcp-Name", name))
    return out


def test_route():
    assert wire.route({}, body()) == "modern"
    assert wire.route({"mcp-protocol-version": "2026-07-28"}, {"params": {}}) == "modern"
    assert wire.route({"mcp-protocol-version": "2025-11-25"}, {"params": {}}) == "handshake"
    assert wire.route({"mcp-session-id": "x"}, {"method": "tools/list"}) == "handshake"


def test_modern_headers_must_match_the_body():
    assert wire.check_modern_headers(headers(), body()) is None
    b64 = "=?base64?" + base64.b64encode("outil é".encode()).decode() + "?="
    assert wire.check_modern_headers(headers(name=b64), body(name="outil é")) is None
    for bad, fragment in [
        (headers(version="2025-11-25"), "does not match"), (headers(method="tools/list"), "Mcp-Method"),
        (headers(name="read"), "Mcp-Name"), (headers(name=None), "Mcp-Name header is missing"),
        (headers()[1:], "MCP-Protocol-Version header is missing"),
        ([*headers(), ("mcp-name", "bash")], "more than once"),
        (headers(name="=?base64?abc?="), "not visible ASCII or a valid"), (headers(name="bash\x01"), "not visible"),
    ]:
        error = wire.check_modern_headers(bad, body())
        assert error["error"]["code"] == wire.HEADER_MISMATCH and fragment in error["error"]["message"], bad
    assert wire.check_modern_headers(headers(name=None, method="tools/list"), body("tools/list", None)) is None


def test_accept_and_statuses():
    assert wire.accepts("application/json, text/event-stream") == (True, True)
    assert wire.accepts("*/*") == (True, True)
    assert wire.accepts("application/json") == (True, False)
    assert wire.accepts(None) == (False, False)
    error = {"error": {"code": -32601}}
    assert wire.http_status(error, "modern") == 404 and wire.http_status(error, "handshake") == 200
    assert wire.http_status({"error": {"code": -32700}}, "handshake") == 400
    assert wire.http_status({"result": {}}, "modern") == 200
    assert wire.check_handshake_version(None) is None and wire.check_handshake_version("2025-06-18") is None
    assert "unsupported" in wire.check_handshake_version("2026-07-28")


@settings(max_examples=80, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=10))
def test_an_sse_event_is_one_data_line(value):
    frame = wire.sse_event({"jsonrpc": "2.0", "method": "x", "params": {"v": value}}).decode()
    lines = frame.split("\n")
    assert lines[0] == "event: message" and lines[1].startswith("data: ") and lines[2:] == ["", ""]
    assert json.loads(lines[1][6:])["params"]["v"] == value


def test_keepalive_is_a_comment():
    assert wire.KEEPALIVE.startswith(b":") and wire.KEEPALIVE.endswith(b"\n\n")


# -- idempotency -----------------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_keys():
    assert key_problem("0d6c1f3a-uuid") is None
    for bad in ("", "a b", "x" * 201, 7, None, "é"):
        assert key_problem(bad) is not None


def test_a_key_runs_once_then_replays_within_the_window():
    clock = Clock()
    store: IdempotencyStore[str] = IdempotencyStore(60, 10, clock)
    fp = fingerprint("bash", {"command": "true"})
    assert store.claim("k", fp) == Run("k")
    assert store.claim("k", fp) == Follow("k")
    seen = []
    store.follow("k", seen.append)
    store.finish("k", "result")
    assert seen == ["result"]
    assert store.claim("k", fp) == Replay("result")
    assert isinstance(store.claim("k", fingerprint("bash", {"command": "false"})), Conflict)
    clock.now = 61
    assert store.claim("k", fp) == Run("k"), "the window has passed"


def test_argument_order_does_not_change_the_fingerprint():
    assert fingerprint("t", {"a": 1, "b": [1, 2]}) == fingerprint("t", {"b": [1, 2], "a": 1})
    assert fingerprint("t", {"a": 1}) != fingerprint("u", {"a": 1})


def test_the_store_is_bounded_and_never_forgets_a_running_call():
    clock = Clock()
    store: IdempotencyStore[str] = IdempotencyStore(600, 3, clock)
    for key in "abc":
        assert store.claim(key, key) == Run(key)
    assert isinstance(store.claim("d", "d"), Full), "three running calls fill it"
    store.finish("b", "done")
    assert store.claim("d", "d") == Run("d"), "a finished entry makes room"
    assert isinstance(store.claim("b", "b"), Full), "b was the one evicted (no replay), and a, c, d run"
    assert len(store) == 3 and store.claim("a", "a") == Follow("a")
    store.finish("a", "done")
    assert store.claim("b", "b") == Run("b")


def test_a_call_that_never_started_can_be_forgotten():
    store: IdempotencyStore[str] = IdempotencyStore(600, 3, Clock())
    store.claim("k", "f")
    store.forget("k")
    assert store.claim("k", "f") == Run("k")


# -- metrics ---------------------------------------------------------------------------------------------


def test_metric_labels_come_from_closed_sets():
    metrics = Metrics(["bash", "read"])
    metrics.record_result(ToolResult("1", "evil\nname", True, value={}), 0.1)
    metrics.record_result(ToolResult.failure("2", "bash", ErrorCode.WORKER_OOM, "oom"), 1.0)
    limited = {"limit_exceeded": "memory: 10 > 5", "truncated": True}
    metrics.record_result(ToolResult("3", "bash", True, value=limited), 2)
    metrics.record_result(ToolResult("4", "bash", True, value={"cancelled": True}), 2)
    metrics.record_http("/../../etc", 404)
    text = metrics.exposition().decode()
    assert 'tool="(unknown)"' in text and "evil" not in text
    assert 'peon_worker_failures_total{kind="worker_oom"} 1.0' in text
    assert 'peon_limits_hit_total{limit="memory"} 1.0' in text and 'peon_limits_hit_total{limit="output"} 1.0' in text
    assert 'peon_process_kills_total{reason="limit"} 1.0' in text
    assert 'peon_process_kills_total{reason="cancel"} 1.0' in text
    assert 'endpoint="(other)"' in text and "etc" not in text
