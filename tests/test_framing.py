"""JSON-lines framing (pure)."""

from __future__ import annotations

import json

import pytest

from peon.framing import LineDecoder, Oversize, encode


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
