"""The pure part of ``read``: range selection and decoding, against a direct statement of the rules, on
arbitrary bytes."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peon.core.errors import ToolError
from peon.core.paths import parse_file_path
from peon.tools.read import CONTEXT_BYTES, decode_range, select_range
from peon.workers import fs


def valid(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


SAMPLES = st.one_of(st.binary(max_size=40), st.text(max_size=14).map(str.encode),
                    st.lists(st.sampled_from([b"a", "é".encode(), "€".encode(), "😀".encode(), b"\x80", b"\xff"]),
                             max_size=12).map(b"".join))


@settings(max_examples=600, deadline=None)
@given(data=SAMPLES, offset=st.integers(0, 50), limit=st.none() | st.integers(0, 50), max_bytes=st.integers(1, 50))
def test_range_selection_and_decoding_property(data, offset, limit, max_bytes):
    """The pure part of read, against a direct statement of the rules, on arbitrary bytes."""
    path = parse_file_path("f")
    total = len(data)
    if offset > total:
        with pytest.raises(ToolError) as info:
            select_range(path, total, offset, limit, max_bytes)
        assert info.value.code.value == "invalid_input"
        return
    rng = select_range(path, total, offset, limit, max_bytes)
    requested_end = total if limit is None else min(total, offset + limit)
    assert rng.end == min(requested_end, offset + max_bytes) and rng.cut_by_max == (rng.end < requested_end)
    lo, hi = max(0, offset - CONTEXT_BYTES), min(total, rng.end + CONTEXT_BYTES)
    try:
        text, end, reported_total = decode_range(path, fs.Window(data[lo:hi], lo, total), rng)
    except ToolError as exc:
        code, details = exc.code.value, exc.details
        if not rng.cut_by_max:
            assert code == "not_utf8" and not valid(data[offset:rng.end])
        elif code == "too_large":  # one character at the offset is wider than the maximum
            assert data[offset] >= 0xC0 and max_bytes < 4
            assert not any(valid(data[offset:k]) for k in range(offset + 1, rng.end + 1))
        else:  # cut by the maximum: a genuinely invalid byte, not merely a character cut at the end
            assert code == "not_utf8"
            with pytest.raises(UnicodeDecodeError):
                codecs.getincrementaldecoder("utf-8")().decode(data[offset:rng.end], final=False)
        if code == "not_utf8":
            assert offset - 3 <= details["offset"] <= rng.end
            if details["reason"] == "starts_inside_character":
                assert details["offset"] == offset and 0x80 <= data[offset] < 0xC0
            if details["reason"] == "ends_inside_character":
                assert details["offset"] == rng.end < total and not rng.cut_by_max
        return
    assert reported_total == total and text.encode() == data[offset:end]
    if rng.cut_by_max:
        assert rng.end - 3 <= end <= rng.end
        assert end == rng.end or not valid(data[offset:rng.end])  # backs off only over a cut character
    else:
        assert end == rng.end

