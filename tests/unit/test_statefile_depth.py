"""peon.core.statefile: a state file's JSON nesting is bounded before it is parsed."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("data, deep", [
    (b"[" * 65 + b"]" * 65, True),
    (b"[" * 64 + b"]" * 64, False),
    (b'{"a": "' + b"[" * 1000 + b'"}', False),  # brackets inside a string do not nest
    (b'{"a": "\\"' + b"[" * 1000 + b'"}', False),  # nor after an escaped quote
    (b'"' + b'\\"' * 200_000, False),  # an unterminated string is one token: linear, not quadratic
])
def test_json_nesting_is_bounded_before_parsing(data, deep):
    from peon.core.statefile import check_json_depth

    if deep:
        with pytest.raises(ValueError, match="nested too deeply"):
            check_json_depth(data, 64)
    else:
        check_json_depth(data, 64)

