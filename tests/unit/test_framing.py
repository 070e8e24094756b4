"""JSON-lines framing (pure)."""

from __future__ import annotations

import json
import multiprocessing
import os
import struct

import pytest

from peon.core.framing import (
    MAX_MESSAGE_BYTES, FrameDecoder, LineDecoder, Oversize, OversizeFrame, encode, frame, head_fields,
)


def test_messages_split_anywhere_reassemble():
    data = b"".join(encode({"n": i, "s": "x\ny"}) for i in range(50))
    for step in (1, 3, 17, 1000):
        decoder = LineDecoder()
        out = []
        for i in range(0, len(data), step):
            out.extend(decoder.feed(data[i:i + step]))
        assert [json.loads(m)["n"] for m in out] == list(range(50))


def test_oversize_line_is_dropped_and_reported_once_then_stream_continues():
    decoder = LineDecoder(max_line_bytes=10)
    items = list(decoder.feed(b'{"a":"' + b"x" * 100))
    items += list(decoder.feed(b'x"}\n{"b":1}\n'))
    assert items == [Oversize(109), b'{"b":1}']
    assert decoder.pending == 0


def test_blank_lines_are_ignored():
    assert list(LineDecoder().feed(b"\n  \n{}\n")) == [b"{}"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "\ud800"])
def test_encode_refuses_what_json_cannot_carry(bad):
    with pytest.raises(ValueError):
        encode({"v": bad})


def test_encode_is_one_line():
    assert encode({"s": "a\nb\u2028"}).count(b"\n") == 1


def test_an_oversize_line_keeps_its_head_so_a_reader_can_name_it():
    decoder = LineDecoder(max_line_bytes=64)
    line = b'{"op":"result","id":"abc123","ok":true,"value":{"text":"' + b"x" * 500 + b'"}}\n'
    [item] = list(decoder.feed(line))
    assert isinstance(item, Oversize) and item.length == len(line) - 1
    assert head_fields(item.head) == {"op": "result", "id": "abc123"}
    assert head_fields(b'{"id": "with \\"quote\\"", "op": "progress"') == {"id": 'with "quote"', "op": "progress"}
    assert head_fields(b"garbage") == {}


def test_frames_are_multiprocessing_connection_frames():
    """What FrameChannel writes, Connection.recv_bytes reads, and the other way round (a real Pipe)."""
    ours, theirs = multiprocessing.Pipe(duplex=True)
    try:
        messages = [b"", b"x", b"{}" * 20000, bytes(range(256)) * 100]
        for payload in messages:
            ours.send_bytes(payload)
        decoder = FrameDecoder()
        received: list[bytes] = []
        while len(received) < len(messages):
            received.extend(decoder.feed(os.read(theirs.fileno(), 7)))  # split anywhere
        assert received == messages and decoder.pending == 0
        os.write(theirs.fileno(), b"".join(frame(payload) for payload in messages))
        assert [ours.recv_bytes() for _ in messages] == messages
    finally:
        ours.close()
        theirs.close()


def test_a_frame_header_over_the_bound_is_refused_before_its_payload():
    decoder = FrameDecoder(max_frame_bytes=1000)
    with pytest.raises(OversizeFrame) as raised:
        list(decoder.feed(struct.pack("!i", 1001)))
    assert raised.value.length == 1001
    with pytest.raises(OversizeFrame):  # the long form multiprocessing uses past 2 GiB
        list(FrameDecoder().feed(struct.pack("!i", -1) + struct.pack("!Q", 1 << 40)))
    assert list(FrameDecoder(max_frame_bytes=1000).feed(frame(b"y" * 1000))) == [b"y" * 1000]


def test_one_bound_for_every_channel():
    assert LineDecoder().max_line_bytes == MAX_MESSAGE_BYTES == FrameDecoder().max_frame_bytes
