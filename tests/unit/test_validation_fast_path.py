"""The compiled fast path of input validation (``fastjsonschema``) never accepts what ``jsonschema``
refuses, and ``validate_input`` decides exactly as ``jsonschema`` does, whichever path answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastjsonschema import JsonSchemaException
from jsonschema import Draft202012Validator

from peon.client.config import load_config
from peon.core.config_view import ResolvedConfig
from peon.core.errors import ToolError
from peon.core.tool import SessionView
from peon.tools import BUILTIN_TOOLS
from peon.approval.validation import compile_fast, fast_path_ok, validate_input

# Values of every JSON type, with the ones the two libraries could read differently: booleans against
# integers, integral floats, NaN and infinities (Python's json module reads them), huge integers, the
# empty string, NUL, a trailing newline against a pattern's ``$``, strings past a length bound.
VALUES = [None, True, False, 0, 1, -1, 1.0, 1.5, -0.0, float("nan"), float("inf"), 2**63 - 1, 2**63, 2**70,
          "", "a", "abc", "\x00", "a\x00b", "abc\n", "deadbeef" * 8, "DEADBEEF" * 8 + "\n", "x" * 70,
          "name-1", "Name", "-", "é", "\U0001f600", [], [1], ["a"], {}, {"a": 1}]


def session_schemas(tmp_path: Path) -> dict[str, dict]:
    resolved = ResolvedConfig(load_config({}, workspace=tmp_path, env={}).to_wire())
    view = SessionView(workspace=tmp_path, config=resolved.config, env={"PATH": "/usr/bin:/bin"})
    tools = [cls() for cls in BUILTIN_TOOLS]
    return {tool.name: dict(tool.schema_for(view)) for tool in tools}


def inputs_for(schema: dict) -> list[object]:
    """Inputs that probe each property with every value, alone and beside valid required fields."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    validator = Draft202012Validator(schema)
    # A valid value for each property, found among VALUES, to hold the required ones in place.
    candidates = {name: [*rule.get("enum", []), *VALUES] for name, rule in properties.items()}
    valid: dict[str, object] = {}
    for name, rule in properties.items():
        for value in candidates[name]:
            if Draft202012Validator(rule).is_valid(value):
                valid[name] = value
                break
    base = {name: valid[name] for name in required if name in valid}
    cases: list[object] = [None, [], "x", 1, {}, dict(base), {**base, "unknown": 1}]
    for name in properties:
        for value in candidates[name]:
            cases.append({**base, name: value})
            cases.append({name: value})
    if all(name in valid for name in required):  # read_skill with no skills accepts no name at all
        assert any(validator.is_valid(case) for case in cases), "the corpus holds no valid input for this schema"
    return cases


def decides(schema: dict, value: object) -> bool:
    try:
        validate_input("t", schema, value)
        return True
    except ToolError:
        return False


def test_every_builtin_schema_takes_the_fast_path(tmp_path):
    for name, schema in session_schemas(tmp_path).items():
        assert fast_path_ok(schema), name
        assert compile_fast(schema) is not None, name


def test_the_fast_path_never_accepts_what_jsonschema_refuses(tmp_path):
    checked = accepted = 0
    for name, schema in session_schemas(tmp_path).items():
        fast = compile_fast(schema)
        reference = Draft202012Validator(schema)
        for value in inputs_for(schema):
            expected = reference.is_valid(value)
            try:
                fast(value)
                fast_says = True
            except Exception:
                fast_says = False
            assert not (fast_says and not expected), (name, value)
            assert decides(schema, value) is expected, (name, value)
            checked += 1
            accepted += expected
    assert checked > 1000 and accepted > 100


@pytest.mark.parametrize("schema, value", [
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a$"}}}, {"s": "a\n"}),  # re's $
])
def test_what_only_the_fast_path_refuses_is_accepted(schema, value):
    assert fast_path_ok(schema)
    with pytest.raises(JsonSchemaException):
        compile_fast(schema)(value)
    assert Draft202012Validator(schema).is_valid(value)
    assert validate_input("t", schema, value) is value


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}},
    {"type": "object", "properties": {"a": {"type": "array", "items": [{"type": "string"}]}}},
    {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
    {"type": "object", "properties": {"a": {"type": "number", "multipleOf": 0.1}}},
    {"type": "object", "properties": {"a": {"enum": [[1], {"b": 2}]}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?!x)"}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}},
    {"type": "object", "prefixItems": []},
    {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"},
    {"type": "object", "x-unknown": True},
])
def test_schemas_outside_the_shared_keywords_are_left_to_jsonschema(schema):
    assert not fast_path_ok(schema)
    assert compile_fast(schema) is None
    json.dumps(schema)  # still a schema validate_input takes, through jsonschema alone
    assert decides(schema, {}) is Draft202012Validator(schema).is_valid({})
