"""MCP's Streamable HTTP transport, sans I/O: which era a POST belongs to, the request metadata headers,
HTTP statuses for JSON-RPC errors, and Server-Sent Events framing.

Promises:

* :func:`route` puts every POST in exactly one era from its headers and body: a request carrying the
  2026-07-28 envelope (or that protocol version in ``MCP-Protocol-Version``) is stateless, anything
  else belongs to the handshake era (``initialize`` and ``Mcp-Session-Id``);
* :func:`check_modern_headers` enforces the 2026-07-28 rule that ``MCP-Protocol-Version``,
  ``Mcp-Method`` and ``Mcp-Name`` are present, appear once and match the body (``Mcp-Name`` after
  decoding its ``=?base64?…?=`` form), answering ``-32020`` (HeaderMismatch) otherwise;
* :func:`http_status` maps a JSON-RPC error to the status the revision asks for;
* :func:`sse_event` frames one JSON-RPC message as one ``message`` event; :data:`KEEPALIVE` is an SSE
  comment, which clients ignore and proxies see as traffic.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from peon.mcp.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, error_response
from peon.mcp.revisions import HANDSHAKE_VERSIONS, MODERN_VERSIONS, PROTOCOL_VERSION_KEY, UNSUPPORTED_PROTOCOL_VERSION

HEADER_MISMATCH = -32020

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"
_ROUTING = (VERSION_HEADER, METHOD_HEADER, NAME_HEADER)
NAME_PARAMS = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name", "tasks/get": "taskId",
               "tasks/update": "taskId", "tasks/cancel": "taskId"}

KEEPALIVE = b": keep-alive\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}

Era = Literal["handshake", "modern"]

_VISIBLE = re.compile(r"^[\x20-\x7e]*$")
_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>[A-Za-z0-9+/=]*)\?=$")


def sse_event(message: Mapping[str, Any]) -> bytes:
    """One JSON-RPC message as one SSE event (JSON escapes newlines, so ``data`` is a single line)."""
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return f"event: message\ndata: {data}\n\n".encode()


def accepts(accept: str | None) -> tuple[bool, bool]:
    """Whether an ``Accept`` header admits (``application/json``, ``text/event-stream``)."""
    if accept is None:
        return False, False
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    anything = "*/*" in types
    return (anything or "application/json" in types or "application/*" in types,
            anything or "text/event-stream" in types or "text/*" in types)


def _enveloped(body: Any) -> bool:
    if not isinstance(body, Mapping):
        return False
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    return isinstance(meta, Mapping) and PROTOCOL_VERSION_KEY in meta


def route(headers: Mapping[str, str], body: Any) -> Era:
    """The era of one POST (see the module promise)."""
    if headers.get(VERSION_HEADER, "").strip() in MODERN_VERSIONS or _enveloped(body):
        return "modern"
    return "handshake"


def decode_header_value(value: str) -> str | None:
    """A header value with the ``=?base64?…?=`` sentinel decoded; ``None`` when it is malformed."""
    match = _SENTINEL.match(value)
    if match is None:
        return value if _VISIBLE.match(value) else None
    try:
        raw = base64.b64decode(match.group("payload"), validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def _mismatch(request_id: Any, message: str) -> dict[str, Any]:
    return error_response(request_id, HEADER_MISMATCH, f"Header mismatch: {message}")


def check_modern_headers(raw_headers: Iterable[tuple[str, str]], body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The HeaderMismatch error for a 2026-07-28 request whose metadata headers disagree with its body."""
    request_id = body.get("id")
    seen: dict[str, str] = {}
    for name, value in raw_headers:
        key = name.lower()
        if key in _ROUTING:
            if key in seen:
                return _mismatch(request_id, f"the {key} header appears more than once")
            seen[key] = value.strip()
    raw_params = body.get("params")
    params: Mapping[str, Any] = raw_params if isinstance(raw_params, Mapping) else {}
    raw_meta = params.get("_meta")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    version = meta.get(PROTOCOL_VERSION_KEY)
    if VERSION_HEADER not in seen:
        return _mismatch(request_id, "the MCP-Protocol-Version header is missing")
    if seen[VERSION_HEADER] != version:
        return _mismatch(request_id, f"MCP-Protocol-Version {seen[VERSION_HEADER][:40]!r} does not match the body's "
                                     f"protocol version {str(version)[:40]!r}")
    method = body.get("method")
    if METHOD_HEADER not in seen:
        return _mismatch(request_id, "the Mcp-Method header is missing")
    if seen[METHOD_HEADER] != method:
        return _mismatch(request_id, f"Mcp-Method {seen[METHOD_HEADER][:80]!r} does not match the body's method "
                                     f"{str(method)[:80]!r}")
    name_key = NAME_PARAMS.get(str(method))
    if name_key is not None and isinstance(params.get(name_key), str):
        if NAME_HEADER not in seen:
            return _mismatch(request_id, f"the Mcp-Name header is missing (it mirrors params.{name_key})")
        decoded = decode_header_value(seen[NAME_HEADER])
        if decoded is None:
            return _mismatch(request_id, "the Mcp-Name header is not visible ASCII or a valid =?base64?...?= value")
        if decoded != params[name_key]:
            return _mismatch(request_id, f"Mcp-Name {decoded[:80]!r} does not match params.{name_key} "
                                         f"{params[name_key][:80]!r}")
    return None


def check_handshake_version(value: str | None) -> str | None:
    """Why an ``MCP-Protocol-Version`` header on a handshake-era request is refused, or ``None``."""
    if value is None:
        return None  # clients before 2025-06-18 did not send it
    if value.strip() in HANDSHAKE_VERSIONS:
        return None
    return (f"unsupported MCP-Protocol-Version {value[:40]!r}; this session speaks one of "
            f"{', '.join(HANDSHAKE_VERSIONS)}")


# Statuses for JSON-RPC errors. The stateless revision requires 400 for a bad request and 404 for an
# unknown method; under the handshake era, errors about the request's meaning (unknown method, bad
# params) are ordinary JSON-RPC answers with 200, and only transport-level problems are 4xx.
_MODERN_STATUS = {PARSE_ERROR: 400, INVALID_REQUEST: 400, INVALID_PARAMS: 400, HEADER_MISMATCH: 400,
                  UNSUPPORTED_PROTOCOL_VERSION: 400, METHOD_NOT_FOUND: 404}
_HANDSHAKE_STATUS = {PARSE_ERROR: 400, INVALID_REQUEST: 400}


def http_status(message: Mapping[str, Any], era: Era) -> int:
    error = message.get("error")
    if not isinstance(error, Mapping):
        return 200
    table = _MODERN_STATUS if era == "modern" else _HANDSHAKE_STATUS
    return table.get(error.get("code"), 200)  # type: ignore[arg-type]
