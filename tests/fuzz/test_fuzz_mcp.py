"""Property tests through the MCP server: random tool calls and random bytes on stdin.

Whatever arrives, every line the server writes is a JSON-RPC message; a tool call gets a result whose
failure carries a stable code (or a JSON-RPC error for a malformed request); the server keeps serving
(a ``ping`` after each example is answered); nothing leaks (``leftovers``). Process and delegate tools
run under ``deny``, so a random valid command is refused, never executed.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.fuzz import STABLE_CODES, deep, json_values, odd_text
from helpers.mcp import raw_error_code

POLICY = '[approval]\nread_only = "allow"\nfilesystem = "allow"\nprocess = "deny"\ndelegate = "deny"\n'
# Above every id the raw lines below use (5-8): a probe must never be taken for the answer to one of them.
ids = itertools.count(1000)


@pytest.fixture
def fuzz_server(raw_server, tmp_path):
    config = tmp_path / "fuzz.toml"
    config.write_text(POLICY)
    server = raw_server("--config", str(config))
    server.initialize()
    server.request(next(ids), "tools/list")
    server.tools = [tool["name"] for tool in server.recv()["result"]["tools"]]
    return server


def until_reply(server, request_id) -> list[dict]:
    """Every message up to and including the reply to ``request_id``."""
    seen = []
    while True:
        message = server.recv(timeout=60)
        seen.append(message)
        if message.get("id") == request_id and ("result" in message or "error" in message):
            return seen


def check(message: dict) -> None:
    assert message["jsonrpc"] == "2.0"
    if "error" in message:
        assert isinstance(message["error"]["code"], int) and message["error"]["message"]
        return
    result = message.get("result")
    if isinstance(result, dict) and result.get("isError"):
        assert raw_error_code(result) in STABLE_CODES, result


raw_lines = st.one_of(
    st.binary(max_size=300).map(lambda b: b.replace(b"\n", b" ")),
    st.sampled_from([b"{", b"[]", b"null", b'{"jsonrpc":"2.0"}', b'{"jsonrpc":"2.0","id":{},"method":"x"}',
                     b'{"jsonrpc":"2.0","id":1e999,"method":"tools/call"}', b'{"jsonrpc":"1.0","id":1,"method":"ping"}',
                     b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":[]}', b"\xff\xfe", b"[" * 5000,
                     # lone surrogates: valid JSON escapes that no UTF-8 answer can carry back
                     b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
                     b'{"jsonrpc":"2.0","id":6,"method":"\\udfff"}',
                     b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"\\ud800","arguments":{}}}',
                     b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"read","arguments":{"path":"\\ud800"},'
                     b'"_meta":{"progressToken":"\\ud800"}}}']),
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_server_survives_random_input(fuzz_server, data):
    server = fuzz_server
    kind = data.draw(st.sampled_from(["call", "call", "params", "raw"]))
    request_id = next(ids)
    if kind == "call":
        name = data.draw(st.one_of(st.sampled_from(server.tools), odd_text))
        args = data.draw(st.one_of(json_values, st.dictionaries(odd_text, json_values, max_size=3),
                                   st.builds(deep, st.integers(65, 500))))
        server.request(request_id, "tools/call", {"name": name, "arguments": args})
        for message in until_reply(server, request_id):
            check(message)
    elif kind == "params":
        server.request(request_id, data.draw(st.sampled_from(["tools/call", "tools/list", "ping", "nope"])),
                       data.draw(json_values))
        for message in until_reply(server, request_id):
            check(message)
    else:
        server.send(data.draw(raw_lines))
    probe = next(ids)
    server.request(probe, "ping")
    replies = until_reply(server, probe)
    for message in replies:
        check(message)
    assert "result" in replies[-1], replies[-1]


def test_denied_stays_denied_after_fuzzing(fuzz_server):
    request_id = next(ids)
    fuzz_server.request(request_id, "tools/call", {"name": "bash", "arguments": {"command": "echo hi"}})
    [reply] = [m for m in until_reply(fuzz_server, request_id) if m.get("id") == request_id]
    assert raw_error_code(reply["result"]) == "denied"
    assert json.dumps(reply)
