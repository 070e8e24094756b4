"""The shared output bound (pure)."""

from __future__ import annotations

import pytest

from peon.core.output.truncation import HeadTail, utf8_prefix_end, utf8_suffix_start


def feed_all(limit: int, chunks) -> HeadTail:
    buf = HeadTail(limit)
    for chunk in chunks:
        buf.feed(chunk)
    return buf


def test_small_output_is_kept_whole():
    out = feed_all(100, [b"hello ", b"world"]).render()
    assert out.text == "hello world" and not out.truncated
    assert out.total_bytes == out.kept_bytes == 11


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000, 100_000])
def test_head_and_tail_whatever_the_chunking(chunk):
    data = bytes(range(97, 123)) * 4000  # 104000 bytes of a..z
    buf = feed_all(1000, [data[i:i + chunk] for i in range(0, len(data), chunk)])
    assert buf.total == len(data)
    assert bytes(buf.head) == data[:500] and bytes(buf.tail) == data[-500:]
    out = buf.render()
    assert out.truncated and out.kept_bytes == 1000
    assert out.text.startswith(data[:500].decode()) and out.text.endswith(data[-500:].decode())
    assert f"[... {len(data) - 1000} bytes omitted ...]" in out.text


def test_exactly_at_the_limit_is_not_truncated():
    out = feed_all(10, [b"0123456789"]).render()
    assert out.text == "0123456789" and not out.truncated


def test_cuts_never_split_a_character():
    data = "é€😀".encode() * 1000
    for limit in range(2, 40):
        out = feed_all(limit, [data]).render()
        assert not out.invalid_utf8, limit
        assert "\ufffd" not in out.text


def test_utf8_boundary_helpers():
    s = "aé€😀".encode()  # 1 + 2 + 3 + 4 bytes
    assert [utf8_prefix_end(s, n) for n in range(11)] == [0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10]
    assert [utf8_suffix_start(s, n) for n in range(11)] == [0, 1, 3, 3, 6, 6, 6, 10, 10, 10, 10]


def test_invalid_bytes_are_flagged_and_replaced():
    out = feed_all(100, [b"a\xffb"]).render()
    assert out.invalid_utf8 and out.text == "a\ufffdb"
