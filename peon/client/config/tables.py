"""Plain configuration tables, before any validation: nesting bound, merging, dotted keys.

Promise: :func:`check_nesting` refuses a table whose tables and arrays nest deeper than
:data:`MAX_CONFIG_DEPTH` levels with a ``config_invalid`` error naming its source (walked without
recursion, so any depth is refused cleanly, never a ``RecursionError``), which makes every later,
recursive step on a checked table safe; :func:`merge` and :func:`dotted_keys` never change what they
are given. This module owns operations on a table as TOML gives it; what a key means is the model's.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from peon.core.errors import ConfigError

# The model nests at most four levels (approval.rules[i].tool); anything far deeper is a mistake or an
# attack on the recursive steps that follow (merging, validation, error messages).
MAX_CONFIG_DEPTH = 16


def nesting_error(source: str, key: str | None) -> ConfigError:
    """The error of a layer nested deeper than :data:`MAX_CONFIG_DEPTH` (``key``: where, when known)."""
    where = f" (at {key!r})" if key else ""
    return ConfigError(
        f"invalid configuration in {source}: tables and arrays nest deeper than {MAX_CONFIG_DEPTH} levels{where}; "
        f"Peon's configuration never nests more than a few",
        {"source": source, "rule": "max_depth", "limit": MAX_CONFIG_DEPTH},
    )


def check_nesting(data: Any, source: str, limit: int | None = None) -> None:
    """Refuse tables and arrays nested deeper than ``limit`` levels (walked without recursion, so any
    depth is refused cleanly and every later, recursive step is safe)."""
    limit = MAX_CONFIG_DEPTH if limit is None else limit
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    while stack:
        value, depth, key = stack.pop()
        if isinstance(value, Mapping):
            children = [(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            children = [(v, f"{key}[{i}]") for i, v in enumerate(value)]
        else:
            continue
        if depth >= limit and children:
            raise nesting_error(source, key or None)
        stack.extend((child, depth + 1, name) for child, name in children)


def merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two tables; values in ``top`` win, sub-tables merge key by key."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def dotted_keys(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The leaf keys a table sets, e.g. ``limits.max_output_bytes``; rules as ``approval.rules[i]``."""
    keys = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            keys.extend(dotted_keys(value, name + "."))
        elif name == "approval.rules" and isinstance(value, (list, tuple)):
            keys.extend(f"{name}[{i}]" for i in range(len(value)))
        else:
            keys.append(name)
    return keys
