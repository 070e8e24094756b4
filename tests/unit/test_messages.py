"""What the supervisor accepts from a worker (pure: workers/messages.py)."""

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
