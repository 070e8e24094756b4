"""Input validation: pure functions from (schema, input) to accepted input or an ``invalid_input`` error.

Promise: an input reaches a tool only if it is a JSON object that satisfies the tool's schema. The
error names the field (as a JSON pointer), the schema rule (``type``, ``required``,
``additionalProperties``...) and the offending value, shortened so a huge value cannot flood a reply.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from collections.abc import Iterable, Mapping

from .errors import ErrorCode, ToolError
from .shorten import shorten

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

_validators: dict[int, tuple[Mapping[str, Any], Draft202012Validator]] = {}


def load_validator() -> None:
    """Import the schema validator (``jsonschema``). The first validation does it anyway. A supervisor
    calls this once it has answered ``ready``: importing the supervisor took 294 ms with it and 215 ms
    without (medians of 20 on the development machine), and the client waits for that. A client, which
    checks only an input's depth, never loads it."""
    import jsonschema.exceptions  # noqa: F401


def _validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    cached = _validators.get(id(schema))
    if cached is None or cached[0] is not schema:
        from jsonschema import Draft202012Validator

        cached = (schema, Draft202012Validator(schema))
        _validators[id(schema)] = cached
    return cached[1]


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
