"""The sentences a refused configuration gets, and the validation that produces them.

Promise: :func:`validate` returns a :class:`~peon.client.config.model.PeonConfig` or raises one
:class:`~peon.core.errors.ConfigError` naming the source (a file path, "overrides", ...) and, for every
problem, the dotted key and what was expected — an unknown key (with the closest known one), a missing
key, a value of the wrong type or out of bounds — never a silent default or a coercion. Its details
list each problem's key and kind. This module owns the wording; the rules are the model's.
"""

from __future__ import annotations

import difflib
import json
import typing
from typing import Any
from collections.abc import Mapping

from pydantic import BaseModel, ValidationError

from peon.client.config.model import PeonConfig
from peon.core.errors import ConfigError
from peon.core.text import shorten


_EXPECTED = {
    "int_type": "an integer", "int_from_float": "an integer", "float_type": "a number",
    "bool_type": "true or false", "string_type": "a string", "tuple_type": "an array", "list_type": "an array",
    "model_type": "a table", "model_attributes_type": "a table", "dict_type": "a table",
}


def toml_type(value: Any) -> str:
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"),
                       ((list, tuple), "array"), (Mapping, "table")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def show_value(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return shorten(text, limit)


def _key_name(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] | None = PeonConfig
    for part in loc:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part) if model else None
        model = _model_in(info.annotation) if info else None
        if model is None:
            return []
    return list(model.model_fields) if model else []


def _problem(err: Mapping[str, Any]) -> str:
    loc = tuple(err["loc"])
    key = _key_name(loc)
    value = err.get("input")
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _known_keys(loc[:-1]), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown key {key!r}{hint}"
    if err["type"] == "missing":
        return f"missing key {key!r}"
    if err["type"] in _EXPECTED:
        return f"key {key!r} must be {_EXPECTED[err['type']]}, got {toml_type(value)} {show_value(value)}"
    if err["type"] == "literal_error":
        return f"key {key!r} must be one of {err['ctx']['expected']}, got {show_value(value)}"
    message = err["msg"].removeprefix("Value error, ")
    message = message[0].lower() + message[1:] if message else message
    return f"key {key!r}: {message} (got {show_value(value)})"


def describe_validation_error(source: str, exc: ValidationError) -> ConfigError:
    """One sentence per problem naming source, dotted key and expectation."""
    errors = exc.errors()
    return ConfigError(
        f"invalid configuration in {source}: " + "; ".join(_problem(e) for e in errors),
        {"source": source, "errors": [{"key": _key_name(tuple(e["loc"])), "type": e["type"]} for e in errors]},
    )


def _arrays_as_tuples(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _arrays_as_tuples(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(_arrays_as_tuples(v) for v in value)
    return value


def validate(data: Mapping[str, Any], source: str) -> PeonConfig:
    try:
        return PeonConfig.model_validate(_arrays_as_tuples(data))
    except ValidationError as exc:
        raise describe_validation_error(source, exc) from None
