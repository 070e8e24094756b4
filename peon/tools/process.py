"""What every process-running tool shares: the ``timeout_seconds`` field and how it is clamped, and
how a result names its OS sandbox.

Promise: a call's own ``timeout_seconds`` can only shorten the configured maximum
(``limits.max_timeout_seconds``); a larger value is clamped to the maximum, never rejected, and the
result reports the timeout that applied.
"""

from __future__ import annotations

from typing import Any, Mapping

from peon.tool import SessionView

TIMEOUT_PROPERTY = {
    "type": "number",
    "exclusiveMinimum": 0,
    "maximum": 1e9,  # bounds the number (a 1000-digit integer cannot become a float); clamping does the rest
    "description": "Seconds before the process tree is killed; at most the configured maximum (larger values are clamped).",
}

NO_NUL_PATTERN = "^[^\\u0000]*$"  # argv strings cannot carry NUL bytes


def effective_timeout(args: Mapping[str, Any], session: SessionView) -> float:
    maximum = float(session.config.limits.max_timeout_seconds)
    requested = args.get("timeout_seconds")
    return maximum if requested is None else min(float(requested), maximum)

SANDBOX_RESULT_PROPERTY = {
    "type": ["object", "null"],
    "description": "The OS sandbox the command ran in (null: none): its kind, the Landlock ABI, whether TCP "
                   "was allowed, and the paths beneath which it could write; other writes fail with EACCES.",
    "properties": {
        "kind": {"type": "string", "enum": ["landlock", "bwrap"]},
        "abi": {"type": ["integer", "null"]},
        "network": {"type": "boolean"},
        "writable": {"type": "array", "items": {"type": "string"}},
    },
}
