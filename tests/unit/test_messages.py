"""What the supervisor accepts from a worker and from the job host (pure: workers/messages.py): results,
progress, output chunks of the running call or job only, and a worker's offer to serve again."""

from __future__ import annotations

import json

import pytest

from peon.workers.messages import ProtocolError, parse_worker_message

CALL = "c0ffee"


def encoded(message) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode()


GOOD = [
    {"op": "result", "id": CALL, "ok": True, "value": {"exit_code": 0, "output": "é\u2028 \U0001F600"}},
    {"op": "result", "id": CALL, "ok": False, "error": {"code": "not_found", "message": "gone"}},
    {"op": "result", "id": CALL, "ok": False, "error": {"code": "too_large", "message": "big",
                                                        "details": {"limit": 1}}},
    {"op": "progress", "id": CALL, "elapsed_ms": 500, "output_bytes": 12},
]


@pytest.mark.parametrize("message", GOOD)
def test_well_formed_messages_of_the_current_call_pass(message):
    assert parse_worker_message(encoded(message), CALL) == message


BAD = {
    "invalid utf-8": b'{"op":"result","id":"c0ffee","ok":true,"value":{"s":"\xff"}}',
    "not json": b'{"op": "result", "id": "c0ffee", "ok": tru',
    "lone surrogate": b'{"op":"result","id":"c0ffee","ok":true,"value":{"s":"\\udc80"}}',
    "surrogate in a key": b'{"op":"result","id":"c0ffee","ok":true,"value":{"\\ud800":1}}',
    "nested too deeply": b"[" * 100000 + b"]" * 100000,
    "not an object": b'["c0ffee"]',
    "unknown op": encoded({"op": "call", "id": CALL}),
    "no op": encoded({"id": CALL, "ok": True, "value": {}}),
    "another call": encoded({"op": "result", "id": "someone-else", "ok": True, "value": {}}),
    "no id": encoded({"op": "progress"}),
    "ok not a boolean": encoded({"op": "result", "id": CALL, "ok": "yes", "value": {}}),
    "value not an object": encoded({"op": "result", "id": CALL, "ok": True, "value": [1]}),
    "both value and error": encoded({"op": "result", "id": CALL, "ok": True, "value": {},
                                     "error": {"code": "not_found", "message": "x"}}),
    "error without code": encoded({"op": "result", "id": CALL, "ok": False, "error": {"message": "x"}}),
    "unknown error code": encoded({"op": "result", "id": CALL, "ok": False, "error": {"code": "fine", "message": "x"}}),
    "error details not an object": encoded({"op": "result", "id": CALL, "ok": False,
                                            "error": {"code": "not_found", "message": "x", "details": 3}}),
    "extra fields": encoded({"op": "result", "id": CALL, "ok": True, "value": {}, "status": "forged"}),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_anything_else_is_a_protocol_error_with_a_sentence(name):
    with pytest.raises(ProtocolError) as raised:
        parse_worker_message(BAD[name], CALL)
    assert str(raised.value)


def test_escaped_backslashes_before_u_are_not_surrogates():
    message = {"op": "result", "id": CALL, "ok": True, "value": {"s": "\\ud800 is only text"}}
    assert parse_worker_message(encoded(message), CALL) == message


def test_output_messages_are_checked_like_every_worker_message():
    from peon.workers.messages import MAX_OUTPUT_CHUNK, ProtocolError, encode_output, parse_worker_message

    message = parse_worker_message(encode_output("c", 7, b"\x00\xffhi"), "c")
    assert message == {"op": "output", "id": "c", "offset": 7, "data": b"\x00\xffhi"}
    for bad in (encode_output("other", 0, b"x"), encode_output("c", 0, b"x" * (MAX_OUTPUT_CHUNK + 1)), b"\x00\x05c",
                json.dumps({"op": "output", "id": "c", "offset": 0, "data": "aGk="}).encode(),
                json.dumps({"op": "spawned", "id": "c", "pid": 1}).encode()):
        with pytest.raises(ProtocolError):
            parse_worker_message(bad, "c")


def test_a_worker_may_offer_reuse_in_its_result_and_nothing_else_there():
    base = {"op": "result", "id": "c", "ok": True, "value": {}}
    assert parse_worker_message(json.dumps({**base, "reuse": True}).encode(), "c")["reuse"] is True
    for bad in (False, 1, "yes", None):
        with pytest.raises(ProtocolError, match="reuse"):
            parse_worker_message(json.dumps({**base, "reuse": bad}).encode(), "c")


def test_the_job_hosts_messages_are_checked_against_the_jobs_it_runs():
    from peon.workers.messages import ProtocolError, encode_output, parse_host_message

    running = {"job-3", "job-4"}
    assert parse_host_message(encode_output("job-4", 0, b"x"), running)["id"] == "job-4"
    assert parse_host_message(b'{"op":"spawned","id":"job-3"}', running)["op"] == "spawned"
    for payload in (encode_output("job-5", 0, b"x"), b'{"op":"spawned","id":"job-5"}', b'{"op":"spawned"}',
                    b'{"op":"result","id":"job-3","ok":"yes"}', b"[1]", b"\xff"):
        with pytest.raises(ProtocolError):
            parse_host_message(payload, running)


def test_a_job_may_say_its_input_closed_and_nothing_more_in_that_message():
    closed = {"op": "input_closed", "id": CALL}
    assert parse_worker_message(encoded(closed), CALL) == closed
    with pytest.raises(ProtocolError, match="unknown fields"):
        parse_worker_message(encoded({**closed, "why": "x"}), CALL)


def test_input_messages_carry_bounded_bytes_and_the_end_of_input():
    from peon.workers.messages import MAX_INPUT_BYTES, encode_input, parse_input

    message = encode_input("job-1", b"\x00\xffprint(1)\r", True)
    assert json.loads(json.dumps(message)) == message
    assert parse_input(dict(message)) == (b"\x00\xffprint(1)\r", True)
    assert parse_input({**message, "data": "not base64!"}) is None
    assert parse_input({**message, "eof": "yes"}) is None
    assert parse_input({**message, "data": "A" * ((MAX_INPUT_BYTES * 4) // 3 + 8)}) is None
