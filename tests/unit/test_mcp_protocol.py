"""The MCP protocol layer without processes: parsing, negotiation, shaping, the connection's answers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peon.core.errors import ErrorCode
from peon.core.framing import encode
from peon.mcp import protocol as p
from peon.client.result import ToolResult

BASH = {
    "name": "bash", "description": "Run a command.", "risk": "process",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"],
                     "additionalProperties": False},
    "output_schema": {"type": "object", "properties": {"exit_code": {"type": ["integer", "null"]}}},
}
READ = {"name": "read", "description": "Read a file.", "risk": "read_only",
        "input_schema": {"type": "object", "properties": {}, "additionalProperties": False}, "output_schema": None}
MODERN_META = {p.PROTOCOL_VERSION_KEY: "2026-07-28", p.CLIENT_CAPABILITIES_KEY: {}}


def line(obj) -> bytes:
    return json.dumps(obj).encode()


def request(id, method, params=None) -> bytes:
    message = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return line(message)


def initialize(version="2025-11-25", capabilities=None) -> bytes:
    return request(1, "initialize", {"protocolVersion": version, "capabilities": capabilities or {},
                                     "clientInfo": {"name": "test", "version": "1"}})


def connection() -> p.Connection:
    return p.Connection([BASH, READ], p.ServerIdentity(version="1.2.3"))


def receive(conn: p.Connection, data: bytes) -> p.Event:
    return conn.receive(p.parse_message(data))


def reply(conn: p.Connection, data: bytes) -> dict:
    event = receive(conn, data)
    assert isinstance(event, p.Reply), event
    return event.message


# -- parsing -------------------------------------------------------------------------------------------


def test_parse_error_has_null_id():
    parsed = p.parse_message(b"{not json")
    assert isinstance(parsed, p.Malformed)
    assert parsed.reply["id"] is None and parsed.reply["error"]["code"] == p.PARSE_ERROR


def test_invalid_utf8_is_a_parse_error():
    parsed = p.parse_message(b'{"jsonrpc":"2.0","id":1,"method":"\xff"}')
    assert isinstance(parsed, p.Malformed) and parsed.reply["error"]["code"] == p.PARSE_ERROR


@pytest.mark.parametrize("data, code, reply_id", [
    (b"[]", p.INVALID_REQUEST, None),
    (b"42", p.INVALID_REQUEST, None),
    (b'{"id":1,"method":"ping"}', p.INVALID_REQUEST, 1),
    (b'{"jsonrpc":"2.0","id":1,"method":7}', p.INVALID_REQUEST, 1),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', p.INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', p.INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":3,"method":"tools/list","params":[1]}', p.INVALID_PARAMS, 3),
    (b'{"jsonrpc":"2.0","id":3,"result":{},"error":{}}', p.INVALID_REQUEST, None),
])
def test_invalid_messages_name_the_rule(data, code, reply_id):
    parsed = p.parse_message(data)
    assert isinstance(parsed, p.Malformed)
    assert parsed.reply["error"]["code"] == code
    assert parsed.reply["id"] == reply_id


def test_classification():
    assert p.parse_message(request(1, "ping")) == p.Request(1, "ping", {})
    assert p.parse_message(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') == \
        p.Notification("notifications/initialized", {})
    assert p.parse_message(b'{"jsonrpc":"2.0","id":"a","result":{"x":1}}') == p.Response("a", {"x": 1})
    error = p.parse_message(b'{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"no"}}')
    assert error == p.Response("a", None, {"code": -1, "message": "no"})


# A lone surrogate decodes from JSON ("\\ud800") but no UTF-8 stream can carry it back out.
LONE = "\\ud800"


@pytest.mark.parametrize("data, reply_id, field", [
    (f'{{"jsonrpc":"2.0","id":"{LONE}","method":"ping"}}', None, "id"),
    (f'{{"jsonrpc":"2.0","id":"a{LONE}","result":{{}}}}', None, "id"),
    (f'{{"jsonrpc":"2.0","id":3,"method":"tools/{LONE}"}}', 3, "method"),
    (f'{{"jsonrpc":"2.0","method":"{LONE}"}}', None, "method"),
])
def test_lone_surrogates_in_id_or_method_are_invalid_requests(data, reply_id, field):
    parsed = p.parse_message(data.encode())
    assert isinstance(parsed, p.Malformed)
    assert parsed.reply["id"] == reply_id and parsed.reply["error"]["code"] == p.INVALID_REQUEST
    assert f'"{field}" is not valid Unicode (lone surrogate U+D800' in parsed.reply["error"]["message"]
    encode(parsed.reply)  # sendable as UTF-8


def test_lone_surrogates_in_version_and_progress_token_are_invalid_params():
    conn = connection()
    bad_version = f'{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":' \
                  f'{{"_meta":{{"{p.PROTOCOL_VERSION_KEY}":"{LONE}",' \
                  f'"{p.CLIENT_CAPABILITIES_KEY}":{{}}}}}}}}'
    error = reply(conn, bad_version.encode())
    assert error["id"] == 1 and error["error"]["code"] == p.INVALID_PARAMS
    assert "not valid Unicode" in error["error"]["message"]
    encode(error)
    assert conn.era is None  # nothing was negotiated by the refused request
    reply(conn, initialize())
    bad_token = ('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"x"},'
                 f'"_meta":{{"progressToken":"{LONE}"}}}}}}')
    error = reply(conn, bad_token.encode())
    assert error["id"] == 2 and error["error"]["code"] == p.INVALID_PARAMS
    assert "progressToken" in error["error"]["message"]
    encode(error)
    # A handshake initialize with such a version is answered with the newest served version.
    fresh = connection()
    answered = reply(fresh, (f'{{"jsonrpc":"2.0","id":0,"method":"initialize",'
                             f'"params":{{"protocolVersion":"{LONE}","capabilities":{{}}}}}}').encode())
    assert answered["result"]["protocolVersion"] == p.LATEST_HANDSHAKE


def test_client_values_in_error_messages_are_escaped_and_bounded():
    conn = connection()
    huge = reply(conn, request(1, "tools/list", {"_meta": {**MODERN_META, p.PROTOCOL_VERSION_KEY: "x" * 100_000}}))
    assert huge["error"]["code"] == p.UNSUPPORTED_PROTOCOL_VERSION and huge["error"]["data"]["requested"] is None
    assert len(huge["error"]["message"]) < 1000
    unknown = reply(conn, request(2, "tools/call", {"name": "\u202e" + "y" * 100_000, "_meta": MODERN_META}))["error"]
    assert len(unknown["message"]) < 1000 and "\\u202e" in unknown["message"] and "\u202e" not in unknown["message"]
    later = connection()
    reply(later, request(1, "tools/list", {"_meta": MODERN_META}))
    refused = reply(later, (f'{{"jsonrpc":"2.0","id":2,"method":"initialize",'
                            f'"params":{{"protocolVersion":"{LONE}","capabilities":{{}}}}}}').encode())
    assert refused["error"]["code"] == p.UNSUPPORTED_PROTOCOL_VERSION and refused["error"]["data"]["requested"] is None
    encode(refused)


def test_request_state_verification_takes_any_string():
    signer = p.RequestStateSigner(b"k" * 32)
    for token in ("a.\u00e9", "a.\ud800", "\ud800.abc", "é.é", "." * 3):
        assert signer.verify(token) is None
    assert signer.verify(signer.sign("\u00e9t\u00e9")) == "\u00e9t\u00e9"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_classify_without_raising(data):
    parsed = p.parse_message(data)
    assert isinstance(parsed, (p.Request, p.Notification, p.Response, p.Malformed))
    if isinstance(parsed, p.Malformed):
        encode(parsed.reply)  # always a sendable error


# -- negotiation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("requested, answered", [
    ("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"), ("2025-03-26", "2025-03-26"),
    ("2024-11-05", "2024-11-05"), ("2099-01-01", "2025-11-25"), (None, "2025-11-25"), ("2026-07-28", "2025-11-25"),
])
def test_initialize_answers_the_clients_version_or_the_newest(requested, answered):
    conn = connection()
    result = reply(conn, initialize(requested))["result"]
    assert result["protocolVersion"] == answered
    assert result["capabilities"] == {"tools": {"listChanged": False}, "prompts": {"listChanged": True},
                                      "resources": {"subscribe": True, "listChanged": False}, "completions": {},
                                      "logging": {}}
    assert result["serverInfo"]["name"] == "peon" and result["serverInfo"]["version"] == "1.2.3"


def test_requests_before_initialize_are_refused_except_ping():
    conn = connection()
    assert reply(conn, request(1, "ping")) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    error = reply(conn, request(2, "tools/list"))["error"]
    assert error["code"] == p.INVALID_REQUEST and "before initialize" in error["message"]
    assert reply(conn, initialize())["result"]["protocolVersion"] == "2025-11-25"
    assert "tools" in reply(conn, request(3, "tools/list"))["result"]


def test_second_initialize_is_refused():
    conn = connection()
    reply(conn, initialize())
    assert reply(conn, initialize())["error"]["code"] == p.INVALID_REQUEST


def test_unknown_method_is_method_not_found():
    conn = connection()
    reply(conn, initialize())
    assert reply(conn, request(5, "sampling/createMessage"))["error"]["code"] == p.METHOD_NOT_FOUND
    assert isinstance(receive(conn, request(6, "resources/list")), p.Feature)


# -- tools/list ----------------------------------------------------------------------------------------


def test_annotations_are_explicit_for_every_risk():
    expected = {
        "read_only": (True, False, False),
        "filesystem": (False, True, False),
        "process": (False, True, True),
        "delegate": (False, True, True),
    }
    for risk, (read_only, destructive, open_world) in expected.items():
        hints = p.annotations_for(risk)
        assert set(hints) == {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
        shown = (hints["readOnlyHint"], hints["destructiveHint"], hints["openWorldHint"])
        assert shown == (read_only, destructive, open_world)
    assert p.annotations_for("something-new") == p.annotations_for("delegate")


def test_tools_list_shape_follows_the_revision():
    conn = connection()
    reply(conn, initialize("2025-06-18"))
    tools = reply(conn, request(2, "tools/list"))["result"]["tools"]
    bash, read = tools
    assert bash["inputSchema"] == BASH["input_schema"] and bash["outputSchema"] == BASH["output_schema"]
    assert read["outputSchema"] == {"type": "object"}  # a tool without one still declares an object result
    assert read["annotations"]["readOnlyHint"] is True and bash["annotations"]["openWorldHint"] is True

    old = connection()
    reply(old, initialize("2024-11-05"))
    tool = reply(old, request(2, "tools/list"))["result"]["tools"][0]
    assert "outputSchema" not in tool and "annotations" not in tool


def test_tools_list_has_one_page():
    conn = connection()
    reply(conn, initialize())
    result = reply(conn, request(2, "tools/list"))["result"]
    assert "nextCursor" not in result and len(result["tools"]) == 2
    assert reply(conn, request(3, "tools/list", {"cursor": "x"}))["error"]["code"] == p.INVALID_PARAMS


# -- tools/call ----------------------------------------------------------------------------------------


def test_tools_call_becomes_a_start_event():
    conn = connection()
    reply(conn, initialize("2025-11-25", {"elicitation": {}}))
    event = receive(conn, request(7, "tools/call", {"name": "bash", "arguments": {"command": "true"},
                                                    "_meta": {"progressToken": "tok"}}))
    assert event == p.StartCall(7, "bash", {"command": "true"}, "2025-11-25", "tok", True)


def test_tools_call_errors_are_protocol_errors():
    conn = connection()
    reply(conn, initialize())
    unknown = reply(conn, request(1, "tools/call", {"name": "nope", "arguments": {}}))["error"]
    assert unknown["code"] == p.INVALID_PARAMS and "nope" in unknown["message"]
    assert reply(conn, request(2, "tools/call", {"arguments": {}}))["error"]["code"] == p.INVALID_PARAMS
    assert reply(conn, request(3, "tools/call", {"name": "bash",
                                                 "arguments": [1]}))["error"]["code"] == p.INVALID_PARAMS
    # Missing arguments mean an empty object; the tool's own validation then names what is missing.
    assert receive(conn, request(4, "tools/call", {"name": "bash"})).arguments == {}


def test_call_results_carry_structured_content_and_text():
    ok = ToolResult("c", "bash", True, value={"exit_code": 3, "output": "x\n"})
    shaped = p.call_result(ok, "2025-06-18")
    assert shaped["isError"] is False
    assert shaped["structuredContent"] == {"exit_code": 3, "output": "x\n"}
    assert json.loads(shaped["content"][0]["text"]) == shaped["structuredContent"]
    assert "structuredContent" not in p.call_result(ok, "2025-03-26")

    failed = ToolResult.failure("c", "bash", ErrorCode.DENIED, "bash was denied by policy", {"risk": "process"})
    for version in ("2024-11-05", "2025-11-25", "2026-07-28"):
        shaped = p.call_result(failed, version)
        assert shaped["isError"] is True
        # structuredContent must match the tool's outputSchema, so an error result carries none.
        assert "structuredContent" not in shaped
        assert shaped["_meta"][p.ERROR_META_KEY] == {"code": "denied", "message": "bash was denied by policy",
                                                     "details": {"risk": "process"}}
        assert shaped["content"] == [{"type": "text",
                                      "text": 'denied: bash was denied by policy\ndetails: {"risk": "process"}'}]
    bare = p.call_result(ToolResult.failure("c", "read", ErrorCode.NOT_FOUND, "path 'x' does not exist"), "2025-11-25")
    assert bare["content"][0]["text"] == "not_found: path 'x' does not exist"
    modern = p.respond(1, "2026-07-28", p.call_result(failed, "2026-07-28"), p.ServerIdentity())["result"]
    assert modern["_meta"][p.ERROR_META_KEY]["code"] == "denied" and p.SERVER_INFO_KEY in modern["_meta"]


def test_cancellation_notification():
    conn = connection()
    note = line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4, "reason": "x"}})
    assert receive(conn, note) == p.CancelRequest(4, "x")
    bad = line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}})
    assert isinstance(receive(conn, bad), p.Ignored)


# -- progress ------------------------------------------------------------------------------------------


def test_progress_is_strictly_increasing():
    sent = []
    last = None
    for update in ({"elapsed_ms": 500, "output_bytes": 10}, {"elapsed_ms": 500, "output_bytes": 12},
                   {"elapsed_ms": 400}, {"elapsed_ms": 1000, "output_bytes": 30}, {"output_bytes": 5}):
        shaped = p.progress_notification("t", update, last)
        if shaped:
            message, last = shaped
            sent.append(message["params"])
    assert [s["progress"] for s in sent] == [500.0, 1000.0]
    assert sent[0]["progressToken"] == "t" and "10 bytes" in sent[0]["message"]


# -- approval ------------------------------------------------------------------------------------------

APPROVAL = {
    "request_id": "r1", "call_id": "c1", "tool": "agent_claude", "risk": "delegate",
    "risk_reason": "declared risk of agent_claude", "summary": "ask claude: review",
    "details": {"executable": "/usr/bin/claude", "argv": ["/usr/bin/claude", "-p", "--", "review"],
                "prompt": "review", "workspace": "/w", "warning": "the agent may run commands"},
    "canonical_input": '{"prompt":"review"}', "scopes": ["call", "tool", "risk"],
}


def test_elicitation_shows_the_request_and_offers_three_decisions():
    params = p.approval_elicitation(APPROVAL, "2025-11-25")
    assert params["mode"] == "form"
    for fact in ("agent_claude", "delegate", "/usr/bin/claude", '"-p"', "review", "/w", "may run commands"):
        assert fact in params["message"]
    schema = params["requestedSchema"]
    assert schema["required"] == ["decision"]
    assert [o["const"] for o in schema["properties"]["decision"]["oneOf"]] == ["allow_once", "allow_session", "deny"]
    assert [o["const"] for o in schema["properties"]["scope"]["oneOf"]] == ["call", "tool", "risk"]

    legacy = p.approval_elicitation(APPROVAL, "2025-06-18")
    assert "mode" not in legacy
    assert legacy["requestedSchema"]["properties"]["decision"]["enum"] == ["allow_once", "allow_session", "deny"]


def test_the_users_reason_is_kept_quoted_and_bounded():
    params = p.approval_elicitation(APPROVAL, "2025-11-25")
    assert params["requestedSchema"]["properties"]["reason"]["type"] == "string"
    assert "reason" not in params["requestedSchema"]["required"]
    answer = p.decision_from_elicitation({"action": "accept", "content": {"decision": "deny",
                                                                           "reason": "not on \u202efridays\x1b[2J"}})
    assert answer["decision"] == "deny" and "not on" in answer["reason"]
    assert "\u202e" not in answer["reason"] and "\x1b" not in answer["reason"]
    long = p.decision_from_elicitation({"action": "accept",
                                        "content": {"decision": "allow_once", "reason": "x" * 10000}})
    assert long["decision"] == "allow_once" and len(long["reason"]) < 700


def test_elicitation_message_cannot_be_repainted_by_the_command():
    request = {**APPROVAL, "tool": "bash", "summary": "run: echo \u202eevil\x1b[2J" + "x" * 10000,
               "details": {"argv": ["/bin/bash", "-lc", "echo \u202eevil"]}}
    message = p.approval_elicitation(request, "2025-11-25")["message"]
    assert "\u202e" not in message and "\x1b" not in message
    assert "\\u202e" in message and "\\x1b" in message
    assert len(message) < 8000 and "more characters not shown" in message


@pytest.mark.parametrize("result, error, expected", [
    ({"action": "accept", "content": {"decision": "allow_once"}}, None, {"decision": "allow_once"}),
    ({"action": "accept", "content": {"decision": "allow_session", "scope": "tool"}}, None,
     {"decision": "allow_session", "scope": "tool"}),
    ({"action": "accept", "content": {"decision": "allow_session", "scope": "galaxy"}}, None,
     {"decision": "allow_session", "scope": "call"}),
    ({"action": "accept", "content": {"decision": "yes please"}}, None, {"decision": "deny"}),
    ({"action": "decline"}, None, {"decision": "deny"}),
    ({"action": "cancel"}, None, {"decision": "deny"}),
    (None, {"code": -32601, "message": "Method not found"}, {"decision": "deny"}),
])
def test_elicitation_answers_become_decisions(result, error, expected):
    answer = p.decision_from_elicitation(result, error, ["call", "tool", "risk"])
    assert {k: answer[k] for k in expected} == expected
    assert answer["reason"]


def test_elicitation_capability():
    assert p.can_elicit_form({"elicitation": {}})
    assert p.can_elicit_form({"elicitation": {"form": {}, "url": {}}})
    assert not p.can_elicit_form({"elicitation": {"url": {}}})
    assert not p.can_elicit_form({})
    conn = connection()
    reply(conn, initialize("2025-03-26", {"elicitation": {}}))
    assert not conn.can_elicit()  # elicitation does not exist before 2025-06-18


def test_request_state_is_tamper_evident():
    signer = p.RequestStateSigner(b"k" * 32)
    token = signer.sign("abc")
    assert signer.verify(token) == "abc"
    assert signer.verify(token[:-1] + ("0" if token[-1] != "0" else "1")) is None
    assert signer.verify("abc") is None and signer.verify(None) is None
    assert p.RequestStateSigner(b"j" * 32).verify(token) is None


# -- the stateless 2026-07-28 revision ----------------------------------------------------------------


def test_discover_without_handshake():
    conn = connection()
    result = reply(conn, request("d", "server/discover", {"_meta": MODERN_META}))["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == ["2026-07-28"]
    assert result["capabilities"] == {"tools": {"listChanged": False}, "prompts": {"listChanged": True},
                                      "resources": {"subscribe": True, "listChanged": False}, "completions": {}}
    assert result["_meta"][p.SERVER_INFO_KEY]["name"] == "peon"
    assert {"ttlMs", "cacheScope"} <= set(result)
    listed = reply(conn, request(2, "tools/list", {"_meta": MODERN_META}))["result"]
    assert listed["resultType"] == "complete" and listed["tools"][0]["name"] == "bash"


def test_modern_envelope_rules():
    conn = connection()
    missing = reply(conn, request(1, "tools/list", {"_meta": {p.PROTOCOL_VERSION_KEY: "2026-07-28"}}))["error"]
    assert missing["code"] == p.INVALID_PARAMS and p.CLIENT_CAPABILITIES_KEY in missing["message"]
    future_meta = {**MODERN_META, p.PROTOCOL_VERSION_KEY: "2030-01-01"}
    unsupported = reply(conn, request(2, "tools/list", {"_meta": future_meta}))
    assert unsupported["error"]["code"] == p.UNSUPPORTED_PROTOCOL_VERSION
    assert unsupported["error"]["data"] == {"supported": ["2026-07-28"], "requested": "2030-01-01"}
    assert reply(conn, request(3, "server/discover"))["error"]["code"] == p.INVALID_PARAMS
    # Once a request opened the connection in the stateless revision, the handshake does not exist.
    reply(conn, request(4, "tools/list", {"_meta": MODERN_META}))
    assert reply(conn, initialize())["error"]["code"] == p.UNSUPPORTED_PROTOCOL_VERSION
    assert reply(conn, request(5, "tools/list"))["error"]["code"] == p.INVALID_PARAMS


def test_ping_does_not_exist_in_the_stateless_revision():
    conn = connection()
    error = reply(conn, request(1, "ping", {"_meta": MODERN_META}))["error"]
    assert error["code"] == p.METHOD_NOT_FOUND and "2026-07-28" in error["message"]
    handshake = connection()
    assert reply(handshake, request(1, "ping")) == {"jsonrpc": "2.0", "id": 1, "result": {}}  # before initialize
    reply(handshake, initialize())
    assert reply(handshake, request(2, "ping")) == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_envelope_on_a_handshake_connection_is_refused():
    conn = connection()
    reply(conn, initialize())
    assert reply(conn, request(2, "tools/list", {"_meta": MODERN_META}))["error"]["code"] == p.INVALID_REQUEST


def test_modern_call_carries_capabilities_and_retry_fields():
    conn = connection()
    meta = {**MODERN_META, p.CLIENT_CAPABILITIES_KEY: {"elicitation": {"form": {}}}, "progressToken": 9}
    event = receive(conn, request(1, "tools/call", {"name": "bash", "arguments": {"command": "x"}, "_meta": meta,
                                                    "requestState": "s", "inputResponses": {"approval": {}}}))
    assert event == p.StartCall(1, "bash", {"command": "x"}, "2026-07-28", 9, True, "s", {"approval": {}})


def test_input_required_and_results_in_the_modern_revision():
    identity = p.ServerIdentity()
    message = p.respond(3, "2026-07-28", p.input_required("approval", {"message": "m"}, "state"), identity)
    assert message["result"]["resultType"] == "input_required"
    assert message["result"]["inputRequests"]["approval"]["method"] == "elicitation/create"
    assert message["result"]["requestState"] == "state"
    legacy = p.respond(3, "2025-11-25", {"content": []}, identity)
    assert legacy == {"jsonrpc": "2.0", "id": 3, "result": {"content": []}}


TEXT = st.text(max_size=8) | st.text(st.characters(codec=None, categories=["Cs"]), min_size=1, max_size=2)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)
METHODS = st.sampled_from(["initialize", "ping", "tools/list", "tools/call", "server/discover",
                           "notifications/cancelled", "notifications/initialized", "resources/list", "x", "\ud800"])
VERSIONS = st.sampled_from(["2026-07-28", "2025-11-25", 3, "\udfff"])
META = st.fixed_dictionaries({}, optional={p.PROTOCOL_VERSION_KEY: VERSIONS, p.CLIENT_CAPABILITIES_KEY: JSON,
                                           "progressToken": JSON})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(METHODS, st.one_of(st.none(), st.integers(), TEXT),
                          st.dictionaries(st.sampled_from(["name", "arguments", "protocolVersion", "capabilities",
                                                           "requestId", "cursor", "requestState"]), JSON, max_size=4),
                          st.one_of(st.none(), META)), max_size=6))
def test_any_sequence_of_messages_gets_an_event_and_sendable_replies(messages):
    conn = connection()
    for method, msg_id, params, meta in messages:
        with_meta = {**params, **({"_meta": meta} if meta is not None else {})}
        message = {"jsonrpc": "2.0", "method": method, "params": with_meta}
        if msg_id is not None:
            message["id"] = msg_id
        event = receive(conn, json.dumps(message).encode())  # ASCII JSON: a lone surrogate travels as an escape
        assert isinstance(event, (p.Reply, p.StartCall, p.Feature, p.CancelRequest, p.ClientReply, p.Ignored))
        if isinstance(event, p.Reply):
            encode(event.message)  # sendable as UTF-8, whatever came in
            decoded_id = json.loads(json.dumps(msg_id))  # an escaped surrogate pair decodes to one character
            sendable_id = decoded_id is None or p.lone_surrogate(str(decoded_id)) is None
            assert event.message["id"] == (decoded_id if sendable_id else None)
