"""Input validation: pure functions from (schema, input) to accepted input or an ``invalid_input`` error.

Promise: an input reaches a tool only if it is a JSON object that satisfies the tool's schema under
JSON Schema 2020-12, as ``jsonschema`` decides it. The error names the field (as a JSON pointer), the
schema rule (``type``, ``required``, ``additionalProperties``...) and the offending value, shortened so
a huge value cannot flood a reply.

A schema written only in keywords that mean the same in draft 7 and 2020-12 (:func:`fast_path_ok`:
the built-in tools' schemas are) also gets a validator compiled to Python code by ``fastjsonschema``.
Its "valid" is taken as is; anything it refuses is judged again by ``jsonschema``, which has the last
word and writes the error. So the fast path can only ever say yes where ``jsonschema`` says yes
(``tests/unit/test_validation_fast_path.py`` checks that on every built-in schema), and it is only a speed:
a call's admission after the machine idled took 131 µs in ``jsonschema``'s ``is_valid`` and 8 µs in
the compiled code (a 4 KiB ``read``'s input, median of 60 after 100 ms of sleep each;
docs/architecture.md, "On a call's path"). ``jsonschema`` is imported the first time a process needs
it: a session whose tools all have fast paths and whose inputs are all valid never loads it.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, cast
from collections.abc import Callable, Iterable, Mapping

from peon.core.errors import ErrorCode, ToolError
from peon.core.text import shorten

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

FastCheck = Callable[[Any], Any]  # raises on what it refuses
# By the schema's id, with the schema itself (an id can be reused once a schema is gone).
_fast_checks: dict[int, tuple[Mapping[str, Any], Any]] = {}
_validators: dict[int, tuple[Mapping[str, Any], Any]] = {}

# Keywords whose meaning in draft 7 (what fastjsonschema compiles by default) is their meaning in
# 2020-12, and which both libraries apply alike. The rest (``$ref``, ``format``, ``items`` as an array,
# ``uniqueItems``, ``multipleOf``, ``$schema``, unknown words...) leave a schema to ``jsonschema`` alone.
_SCHEMA_MAPS = frozenset({"properties"})
_SUBSCHEMAS = frozenset({"additionalProperties", "items", "not"})
_SUBSCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf"})
_CHECKS = frozenset({"type", "required", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
                     "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems", "minProperties",
                     "maxProperties", "pattern"})
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly"})
_SCALARS = (str, int, float, bool, type(None))


def fast_path_ok(schema: Any) -> bool:
    """Whether ``schema`` uses only keywords that mean the same to both validators (see above).
    A ``pattern`` may hold no group construct ``(?`` (lookarounds, flags): fastjsonschema reads ``$``
    as ``\\Z``, which, with every assertion positive, can only match less."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, Mapping):
        return False
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key in _SCHEMA_MAPS:
            if not isinstance(value, Mapping) or not all(fast_path_ok(inner) for inner in value.values()):
                return False
        elif key in _SUBSCHEMAS:
            if not fast_path_ok(value):  # ``items`` as an array is a tuple in draft 7, an error in 2020-12
                return False
        elif key in _SUBSCHEMA_LISTS:
            if not isinstance(value, list) or not all(fast_path_ok(inner) for inner in value):
                return False
        elif key in ("enum", "const"):
            values = value if key == "enum" else [value]
            if not isinstance(values, list) or not all(isinstance(item, _SCALARS) for item in values):
                return False
        elif key == "pattern":
            if not isinstance(value, str) or "(?" in value:
                return False
            try:
                re.compile(value)
            except re.error:
                return False
        elif key not in _CHECKS:
            return False
    return True


def compile_fast(schema: Mapping[str, Any]) -> FastCheck | None:
    """The compiled check of a schema :func:`fast_path_ok` accepts (uncached); None for any other."""
    if not fast_path_ok(schema):
        return None
    import fastjsonschema

    try:  # plain dicts and lists, as it expects; no defaults written into the input, no formats asserted
        check: FastCheck = fastjsonschema.compile(json.loads(json.dumps(schema)), use_default=False,
                                                  use_formats=False, detailed_exceptions=False)
    except (fastjsonschema.JsonSchemaDefinitionException, TypeError, ValueError, RecursionError):
        return None
    return check


def load_validator(schemas: Iterable[Mapping[str, Any]] = ()) -> None:
    """Make the validators of ``schemas``: the compiled fast check where a schema has one, and
    ``jsonschema``'s only for a schema without (an extension tool's, say), importing it then. The first
    validation of a schema does it anyway. A supervisor calls this once it has answered ``ready``:
    importing the supervisor took 294 ms with ``jsonschema`` and 215 ms without (medians of 20 on the
    development machine), and the client waits for that. ``jsonschema`` and what it imports also hold
    about 6.5 MiB of a process's memory, which a session of built-in tools called with valid inputs
    never needs. A client, which checks only an input's depth, loads neither."""
    for schema in schemas:
        if _fast_check(schema) is None:
            _validator(schema)


def _cached(cache: dict[int, tuple[Mapping[str, Any], Any]], schema: Mapping[str, Any],
            make: Callable[[Mapping[str, Any]], Any]) -> Any:
    cached = cache.get(id(schema))
    if cached is None or cached[0] is not schema:
        cached = cache[id(schema)] = (schema, make(schema))
    return cached[1]


def _fast_check(schema: Mapping[str, Any]) -> FastCheck | None:
    return cast("FastCheck | None", _cached(_fast_checks, schema, compile_fast))


def _validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    def make(schema: Mapping[str, Any]) -> Draft202012Validator:
        from jsonschema import Draft202012Validator

        return Draft202012Validator(schema)

    return cast("Draft202012Validator", _cached(_validators, schema, make))


def preview(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return shorten(text, limit)


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def validate_input(tool_name: str, schema: Mapping[str, Any], args: Any) -> Mapping[str, Any]:
    if not isinstance(args, Mapping):
        raise ToolError(
            ErrorCode.INVALID_INPUT,
            f"input for {tool_name} must be a JSON object, got {json_type(args)}",
            {"rule": "type", "pointer": "", "expected": "object"},
        )
    fast = _fast_check(schema)
    if fast is not None:
        try:
            fast(args)
            return args
        except Exception:  # JsonSchemaValueException, or anything its code raises on odd input: ask jsonschema
            pass
    validator = _validator(schema)
    if validator.is_valid(args):
        return args
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(args))
    pointer = "".join(f"/{p}" for p in error.absolute_path)
    where = f"field {pointer!r}" if pointer else "the input"
    message = shorten(error.message, 300)
    raise ToolError(
        ErrorCode.INVALID_INPUT,
        f"invalid input for {tool_name}: {where} breaks rule {error.validator!r}: {message}",
        {"rule": error.validator, "pointer": pointer, "value": preview(error.instance)},
    )


MAX_INPUT_DEPTH = 64  # tool inputs are shallow; this keeps every JSON decoder on the way far from its limits


def nesting_depth(value: Any, stop_at: int = MAX_INPUT_DEPTH + 1) -> int:
    """How deeply arrays and objects nest in ``value`` (iterative; stops counting at ``stop_at``)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest >= stop_at:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_depth(tool_name: str, args: Any) -> None:
    depth = nesting_depth(args)
    if depth > MAX_INPUT_DEPTH:
        raise ToolError(
            ErrorCode.INVALID_INPUT,
            f"input for {tool_name} nests arrays/objects deeper than {MAX_INPUT_DEPTH} levels",
            {"rule": "max_depth", "pointer": "", "limit": MAX_INPUT_DEPTH},
        )


def canonical_json(value: Any) -> str:
    """The one encoding of a JSON value Peon sends, stores and compares (sorted keys, no NaN)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
