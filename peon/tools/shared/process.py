"""What every process-running tool shares: the ``timeout_seconds`` field and how it is resolved, and
how a result names its OS sandbox.

Promise: a call that gives no ``timeout_seconds`` runs for ``limits.default_timeout_seconds``; a call
that gives one runs for that long; either way never longer than ``limits.max_timeout_seconds`` — a
larger value (the call's or the configured default) is clamped to the maximum, never rejected, and the
result and the approval request report the timeout that applied.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from peon.core.tool import SessionView

TIMEOUT_PROPERTY = {
    "type": "number",
    "exclusiveMinimum": 0,
    "maximum": 1e9,  # bounds the number (a 1000-digit integer cannot become a float); clamping does the rest
    "description": "Seconds before the process tree is killed; when omitted, the configured default; at most the "
                   "configured maximum (larger values are clamped).",
}

NO_NUL_PATTERN = "^[^\\u0000]*$"  # argv strings cannot carry NUL bytes


def effective_timeout(args: Mapping[str, Any], session: SessionView) -> float:
    limits = session.config.limits
    maximum = float(limits.max_timeout_seconds)
    requested = args.get("timeout_seconds")
    wanted = float(limits.default_timeout_seconds) if requested is None else float(requested)
    return min(wanted, maximum)


def timeout_property(session: SessionView) -> dict[str, Any]:
    """``TIMEOUT_PROPERTY`` with this session's default and maximum in its description (for the model)."""
    limits = session.config.limits
    maximum = float(limits.max_timeout_seconds)
    default = min(float(limits.default_timeout_seconds), maximum)
    return {**TIMEOUT_PROPERTY,
            "description": f"Seconds before the process tree is killed: {default:g} when omitted, at most {maximum:g} "
                           "(larger values are clamped)."}


def with_session_timeout(schema: Mapping[str, Any], session: SessionView) -> dict[str, Any]:
    """An input schema whose ``timeout_seconds`` property describes this session's limits."""
    properties = dict(schema["properties"])
    properties["timeout_seconds"] = timeout_property(session)
    return {**schema, "properties": properties}


SANDBOX_RESULT_PROPERTY = {
    "type": ["object", "null"],
    "description": "The OS sandbox the command ran in (null: none): its kind, the Landlock ABI, whether the "
                   "network was allowed, the paths beneath which it could write (other writes fail with EACCES or "
                   "EROFS), the layers enforcing it, what this machine does not enforce, and the hosts the "
                   "session's egress allowlist refused while the call ran; connections: each connection attempt "
                   "through that allowlist begun while the call ran (host, port, address, decision, bytes each way, "
                   "duration; at most 100, then connections_not_shown); set_aside: what the command created "
                   "at agent-control paths (or, where they could not be made read-only, changed there) and where "
                   "it went, so no program run later finds it.",
    "properties": {
        "kind": {"type": "string", "enum": ["landlock", "bwrap"]},
        "abi": {"type": ["integer", "null"]},
        "network": {"type": "boolean"},
        "writable": {"type": "array", "items": {"type": "string"}},
        "layers": {"type": "array", "items": {"type": "string"}},
        "not_enforced": {"type": "array", "items": {"type": "string"}},
        "refused": {"type": "array", "items": {"type": "string"}},
        "connections": {"type": "array", "items": {
            "type": "object", "required": ["host", "port", "decision"],
            "properties": {"host": {"type": "string"}, "port": {"type": "integer"},
                           "address": {"type": ["string", "null"]}, "decision": {"type": "string"},
                           "reason": {"type": "string"}, "bytes_sent": {"type": "integer"},
                           "bytes_received": {"type": "integer"}, "duration_seconds": {"type": "number"}}}},
        "connections_not_shown": {"type": "integer"},
        "set_aside": {"type": "array", "items": {
            "type": "object", "required": ["path"],
            "properties": {"path": {"type": "string"}, "moved_to": {"type": "string"},
                           "removed": {"type": "string"}, "left": {"type": "string"}}}},
    },
}
