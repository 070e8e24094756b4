"""What the property tests share: the stable error codes a failure may carry, and Hypothesis strategies for
adversarial JSON (odd text — lone surrogates, path tricks, megabytes — huge numbers, and nesting deeper
than any parser should follow)."""

from __future__ import annotations

from hypothesis import strategies as st

from peon.core.errors import ErrorCode

STABLE_CODES = {code.value for code in ErrorCode}

odd_text = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1,
            max_size=4),  # lone surrogates
    st.sampled_from(["", "\x00", "../../etc/passwd", "/etc/passwd", "a/../../..", "\u202e", "-rf", "@x", "\ufeff",
                     "🙂" * 50]),
    st.builds(lambda n: "x" * n, st.integers(0, 3_000_000)),
)
numbers = st.one_of(
    st.integers(), st.integers(min_value=10**300, max_value=10**400), st.floats(allow_nan=True, allow_infinity=True),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, odd_text),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(odd_text, inner, max_size=4)),
    max_leaves=12,
)


def deep(depth: int):
    value = 0
    for _ in range(depth):
        value = [value]
    return value
