"""Property tests: random and adversarial JSON for every registered tool, through the embedding API.

Whatever the input, a call returns a result whose error (if any) carries a stable code, the session
stays usable, and nothing leaks (the ``leftovers`` guard checks processes after the test). Process and
delegate tools run under a ``deny`` policy, so a random input that happens to be valid is refused
instead of executed; file tools run for real inside a throwaway workspace.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import peon
from helpers.fuzz import STABLE_CODES, deep, json_values, odd_text

FUZZ_POLICY = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "deny", "delegate": "deny"}}


def tool_inputs(schema: dict):
    """Inputs shaped like the tool's schema, with adversarial values, plus anything at all."""
    props = list(schema.get("properties", {}))
    keys = st.one_of(st.sampled_from(props), odd_text) if props else odd_text
    shaped = st.dictionaries(keys, json_values, max_size=len(props) + 2)
    return st.one_of(shaped, json_values, st.builds(deep, st.integers(100, 5000)))


def check(result: peon.ToolResult) -> None:
    assert isinstance(result, peon.ToolResult)
    if not result.ok:
        assert result.error.code in STABLE_CODES, result
        assert result.error.message
    else:
        json.dumps(result.value)  # values are always JSON


@pytest.fixture
def fuzz_session(open_session):
    """One session for all examples: it must stay usable through every one of them."""
    return open_session(FUZZ_POLICY)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_tool_survives_random_input(fuzz_session, data):
    session = fuzz_session
    tools = session.tools()
    for _ in range(len(tools)):
        tool = data.draw(st.sampled_from(tools))
        args = data.draw(tool_inputs(tool["input_schema"]))
        check(session.call(tool["name"], args))
    check(session.call(data.draw(odd_text), data.draw(json_values)))
    assert session.call("bash", {"command": "true"}).error.code == "denied"  # still serving, policy intact
