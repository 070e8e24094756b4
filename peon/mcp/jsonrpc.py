"""JSON-RPC 2.0 messages, sans I/O: one decoded line in, one classified message out.

Promises:

* :func:`parse_message` turns any line into exactly one of :class:`Request`, :class:`Notification`,
  :class:`Response` or :class:`Malformed` (which carries the JSON-RPC error to send back), never an
  exception;
* a message whose ``id`` or ``method`` is not valid Unicode (a ``"\\ud800"`` escape decodes to a lone
  surrogate, which no UTF-8 stream can carry) is :class:`Malformed`, so nothing the server sends ever
  echoes an unencodable string;
* :func:`error_response` and :func:`result_response` build the only two response shapes the server sends;
  a client's value quoted in a message goes through :func:`shown` (escaped, bounded).

Nothing here knows about MCP methods or revisions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeGuard

from peon.approvers import bounded
from peon.core.text import lone_surrogate as lone_surrogate  # re-exported: part of the protocol surface

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# error.data.code of a server whose session has not started yet: the client waits error.data.retry_after_seconds
# (the HTTP Retry-After) and sends the request again.
NOT_READY = "not_ready"

RequestId = str | int


@dataclass(frozen=True)
class Request:
    id: RequestId
    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Notification:
    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Response:
    id: RequestId
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class Malformed:
    reply: dict[str, Any]


Message = Request | Notification | Response | Malformed


def error_response(id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": error}


def result_response(id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": result}


def valid_id(value: Any) -> TypeGuard[RequestId]:
    """A JSON-RPC id this server accepts: a string or an integer (never a boolean)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def shown(value: Any, limit: int = 120) -> str:
    """A client's value quoted for a message: escaped (no control, bidirectional or surrogate
    characters) and bounded, so an answer never echoes what cannot be sent or megabytes of input."""
    return bounded(repr(value), limit)


def _unencodable_id(value: Any) -> str | None:
    return lone_surrogate(value) if isinstance(value, str) else None


def parse_message(line: bytes) -> Message:
    try:
        data = json.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        return Malformed(error_response(None, PARSE_ERROR, f"Parse error: the line is not valid UTF-8 JSON ({exc})"))
    except RecursionError:
        return Malformed(error_response(None, PARSE_ERROR, "Parse error: the line nests arrays/objects too deeply"))
    if isinstance(data, list):
        return Malformed(error_response(None, INVALID_REQUEST,
                                        "Invalid Request: JSON-RPC batches are not supported; "
                                        "send one message per line"))
    if not isinstance(data, dict):
        return Malformed(error_response(None, INVALID_REQUEST,
                                        f"Invalid Request: a message must be a JSON object, got {type(data).__name__}"))
    msg_id = data.get("id")
    bad_id = _unencodable_id(msg_id)
    if bad_id is not None:
        return Malformed(error_response(None, INVALID_REQUEST,
                                        f'Invalid Request: "id" is not valid Unicode ({bad_id})'))
    reply_id = msg_id if valid_id(msg_id) else None
    if data.get("jsonrpc") != "2.0":
        return Malformed(error_response(reply_id, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"'))
    method = data.get("method")
    if method is None:
        if not valid_id(msg_id):
            return Malformed(error_response(None, INVALID_REQUEST,
                                            "Invalid Request: a response needs a string or integer id"))
        if ("result" in data) == ("error" in data):
            return Malformed(error_response(None, INVALID_REQUEST,
                                            'Invalid Request: a response has exactly one of "result" and "error"'))
        if "result" in data:
            return Response(msg_id, data["result"])
        error = data["error"]
        if not isinstance(error, dict):
            error = {"code": INTERNAL_ERROR, "message": str(error)}
        return Response(msg_id, None, error)
    if not isinstance(method, str):
        return Malformed(error_response(reply_id, INVALID_REQUEST, 'Invalid Request: "method" must be a string'))
    bad_method = lone_surrogate(method)
    if bad_method is not None:
        return Malformed(error_response(reply_id, INVALID_REQUEST,
                                        f'Invalid Request: "method" is not valid Unicode ({bad_method})'))
    params = data.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        if "id" in data and valid_id(msg_id):
            return Malformed(error_response(msg_id, INVALID_PARAMS,
                                            f'Invalid params: "params" of {method} must be an object'))
        return Malformed(error_response(None, INVALID_REQUEST,
                                        f'Invalid Request: "params" of {method} must be an object'))
    if "id" not in data:
        return Notification(method, params)
    if not valid_id(msg_id):
        return Malformed(error_response(None, INVALID_REQUEST,
                                        "Invalid Request: a request id must be a string or an integer"))
    return Request(msg_id, method, params)
