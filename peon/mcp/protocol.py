"""MCP over JSON-RPC, sans I/O: decoded lines in, decisions and messages out.

Promises:

* :func:`parse_message` turns any line into exactly one of :class:`Request`, :class:`Notification`,
  :class:`Response` or :class:`Malformed` (which carries the JSON-RPC error to send back), never an
  exception;
* :class:`Connection` answers everything that needs no tool execution itself (``initialize``,
  ``server/discover``, ``ping``, ``tools/list``, every protocol error) and hands the rest to the I/O
  layer as :class:`StartCall`, :class:`CancelRequest` or :class:`ClientReply` events;
* results are shaped for the protocol revision the request was made under: a field a revision does not
  define is not sent to a client speaking it.

Two eras are served. The handshake era (2024-11-05 … 2025-11-25) starts with ``initialize``; the
stateless 2026-07-28 revision has no handshake: every request carries its protocol version and the
client's capabilities in ``params._meta``, ``server/discover`` describes the server, results carry
``resultType``, and the server asks the client for input by answering with an ``input_required``
result that the client retries (there are no server-to-client requests). The first request that
belongs to one era locks the connection to it, as mixing them mid-stream has no defined meaning.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from peon.approvers import bounded, visible
from peon.result import ToolResult

# Newest first. A handshake answer is the client's version when listed, else the newest.
HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MODERN_VERSIONS = ("2026-07-28",)
LATEST_HANDSHAKE = HANDSHAKE_VERSIONS[0]

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNSUPPORTED_PROTOCOL_VERSION = -32022

# Revisions are an enumerated set; features are looked up by position, never by string comparison.
_ORDER = tuple(reversed(HANDSHAKE_VERSIONS)) + MODERN_VERSIONS


def at_least(version: str, minimum: str) -> bool:
    return version in _ORDER and _ORDER.index(version) >= _ORDER.index(minimum)


def is_modern(version: str) -> bool:
    return version in MODERN_VERSIONS


def negotiate(requested: Any) -> str:
    """The handshake answer: the client's version when we speak it, else our newest."""
    return requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE


# -- messages ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    id: str | int
    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Notification:
    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Response:
    id: str | int
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


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def parse_message(line: bytes) -> Message:
    try:
        data = json.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        return Malformed(error_response(None, PARSE_ERROR, f"Parse error: the line is not valid UTF-8 JSON ({exc})"))
    except RecursionError:
        return Malformed(error_response(None, PARSE_ERROR, "Parse error: the line nests arrays/objects too deeply"))
    if isinstance(data, list):
        return Malformed(error_response(None, INVALID_REQUEST,
                                        "Invalid Request: JSON-RPC batches are not supported; send one message per line"))
    if not isinstance(data, dict):
        return Malformed(error_response(None, INVALID_REQUEST,
                                        f"Invalid Request: a message must be a JSON object, got {type(data).__name__}"))
    msg_id = data.get("id")
    reply_id = msg_id if _valid_id(msg_id) else None
    if data.get("jsonrpc") != "2.0":
        return Malformed(error_response(reply_id, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"'))
    method = data.get("method")
    if method is None:
        if not _valid_id(msg_id):
            return Malformed(error_response(None, INVALID_REQUEST, "Invalid Request: a response needs a string or integer id"))
        if ("result" in data) == ("error" in data):
            return Malformed(error_response(None, INVALID_REQUEST, 'Invalid Request: a response has exactly one of "result" and "error"'))
        if "result" in data:
            return Response(msg_id, data["result"])
        error = data["error"]
        return Response(msg_id, None, error if isinstance(error, dict) else {"code": INTERNAL_ERROR, "message": str(error)})
    if not isinstance(method, str):
        return Malformed(error_response(reply_id, INVALID_REQUEST, 'Invalid Request: "method" must be a string'))
    params = data.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        if "id" in data and _valid_id(msg_id):
            return Malformed(error_response(msg_id, INVALID_PARAMS, f'Invalid params: "params" of {method} must be an object'))
        return Malformed(error_response(None, INVALID_REQUEST, f'Invalid Request: "params" of {method} must be an object'))
    if "id" not in data:
        return Notification(method, params)
    if not _valid_id(msg_id):
        return Malformed(error_response(None, INVALID_REQUEST, "Invalid Request: a request id must be a string or an integer"))
    return Request(msg_id, method, params)


# -- tools ---------------------------------------------------------------------------------------------

# Every hint set explicitly: a client assumes the worst for a missing one.
_HINTS = {
    "read_only": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
    "filesystem": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": False},
    "process": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True},
    "delegate": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True},
}


def annotations_for(risk: str) -> dict[str, bool]:
    """Hints from a declared risk; an unknown risk gets the most cautious set."""
    return dict(_HINTS.get(risk, _HINTS["delegate"]))


def tool_descriptor(tool: Mapping[str, Any], version: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": tool["name"],
        "description": tool["description"],
        "inputSchema": tool["input_schema"],
    }
    if at_least(version, "2025-06-18"):
        out["outputSchema"] = tool.get("output_schema") or {"type": "object"}
    if at_least(version, "2025-03-26"):
        out["annotations"] = annotations_for(str(tool["risk"]))
    return out


def render_text(value: Any) -> str:
    """The text block: the structured value serialized as JSON, as clients without structured output read it."""
    return json.dumps(value, ensure_ascii=False, indent=2)


def call_result(result: ToolResult, version: str) -> dict[str, Any]:
    """A ``tools/call`` result. Tool failures are results with ``isError`` and the stable code."""
    if result.ok:
        structured: dict[str, Any] = dict(result.value or {})
        text = render_text(structured)
        out: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        assert result.error is not None
        error: dict[str, Any] = {"code": result.error.code, "message": result.error.message}
        if result.error.details:
            error["details"] = result.error.details
        structured = {"error": error}
        text = f"{result.error.code}: {result.error.message}"
        out = {"content": [{"type": "text", "text": text}], "isError": True}
    if at_least(version, "2025-06-18"):
        out["structuredContent"] = structured
    return out


def progress_notification(token: Any, update: Mapping[str, Any], last: float | None) -> tuple[dict[str, Any], float] | None:
    """A progress notification for a process update, or ``None`` when it would not increase ``progress``.

    ``progress`` is the elapsed time in milliseconds, so it only grows; an update that does not move it
    forward is dropped instead of being sent out of order.
    """
    elapsed = update.get("elapsed_ms")
    if not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool):
        return None
    progress = float(elapsed)
    if last is not None and progress <= last:
        return None
    parts = [f"running for {progress / 1000:.1f} s"]
    output = update.get("output_bytes")
    if isinstance(output, int) and not isinstance(output, bool):
        parts.append(f"{output} bytes of output so far")
    params = {"progressToken": token, "progress": progress, "message": ", ".join(parts)}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}, progress


# -- approval through elicitation ----------------------------------------------------------------------

DECISIONS = (("allow_once", "Allow once"), ("allow_session", "Allow for this session"), ("deny", "Deny"))
SCOPES = {"call": "this exact call", "tool": "every call of this tool", "risk": "every call of this risk"}


def can_elicit_form(capabilities: Any) -> bool:
    """Whether declared client capabilities include form elicitation (``{}`` means form)."""
    if not isinstance(capabilities, Mapping):
        return False
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, Mapping):
        return False
    return "form" in elicitation or "url" not in elicitation


def _enum_property(title: str, options: Iterable[tuple[str, str]], default: str, version: str) -> dict[str, Any]:
    options = list(options)
    prop: dict[str, Any] = {"type": "string", "title": title, "default": default}
    if at_least(version, "2025-11-25"):
        prop["oneOf"] = [{"const": value, "title": label} for value, label in options]
    else:  # the enum + enumNames shape of earlier revisions
        prop["enum"] = [value for value, _ in options]
        prop["enumNames"] = [label for _, label in options]
    return prop


def approval_message(request: Mapping[str, Any]) -> str:
    """The request as text, with control and bidirectional characters made visible (a command cannot
    repaint or reorder what the user reads) and every part bounded."""
    tool, risk = visible(str(request.get("tool"))), visible(str(request.get("risk")))
    lines = [
        f"Peon asks for approval to run {tool} ({risk} risk: {bounded(str(request.get('risk_reason', '')), 500)}).",
        f"action: {bounded(str(request.get('summary', '')))}",
    ]
    details = request.get("details") or {}
    if isinstance(details, Mapping):
        for key, value in details.items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            lines.append(f"{visible(str(key))}: {bounded(shown, 1000)}")
    lines.append(f"input: {bounded(str(request.get('canonical_input', '')))}")
    return "\n".join(lines)


def approval_elicitation(request: Mapping[str, Any], version: str) -> dict[str, Any]:
    """``elicitation/create`` params that show an approval request and offer the three decisions."""
    properties: dict[str, Any] = {"decision": _enum_property("Decision", DECISIONS, "deny", version)}
    scopes = [s for s in request.get("scopes") or () if s in SCOPES]
    if scopes:
        properties["scope"] = _enum_property(
            "Remember the session grant for", [(s, SCOPES[s]) for s in scopes], scopes[0], version)
    params: dict[str, Any] = {
        "message": approval_message(request),
        "requestedSchema": {"type": "object", "properties": properties, "required": ["decision"]},
    }
    if at_least(version, "2025-11-25"):
        params["mode"] = "form"
    return params


def decision_from_elicitation(result: Any, error: Any = None, scopes: Iterable[str] = ()) -> dict[str, Any]:
    """Turn the client's answer (an ``ElicitResult`` or an error) into an approver answer."""
    if error is not None or not isinstance(result, Mapping):
        message = error.get("message") if isinstance(error, Mapping) else "no usable answer"
        return {"decision": "deny", "reason": f"the client could not ask the user: {message}"}
    action = result.get("action")
    if action != "accept":
        verb = {"decline": "declined", "cancel": "dismissed"}.get(str(action), f"answered {action!r} to")
        return {"decision": "deny", "reason": f"the user {verb} the approval request"}
    content = result.get("content") if isinstance(result.get("content"), Mapping) else {}
    decision = content.get("decision")
    if decision not in {value for value, _ in DECISIONS}:
        return {"decision": "deny", "reason": f"the approval form came back with decision {decision!r}"}
    answer: dict[str, Any] = {"decision": decision, "reason": "answered by the user through the MCP client"}
    scope = content.get("scope")
    if decision == "allow_session":
        offered = list(scopes)
        answer["scope"] = scope if scope in offered else (offered[0] if offered else "call")
    return answer


class RequestStateSigner:
    """Opaque ``requestState`` tokens that only this server process can have issued."""

    def __init__(self, key: bytes):
        self._key = key

    def sign(self, ref: str) -> str:
        return f"{ref}.{self._mac(ref)}"

    def verify(self, token: Any) -> str | None:
        if not isinstance(token, str) or "." not in token:
            return None
        ref, _, mac = token.rpartition(".")
        return ref if hmac.compare_digest(mac, self._mac(ref)) else None

    def _mac(self, ref: str) -> str:
        return hmac.new(self._key, ref.encode(), hashlib.sha256).hexdigest()


def input_required(key: str, elicitation: dict[str, Any], state: str) -> dict[str, Any]:
    return {
        "resultType": "input_required",
        "inputRequests": {key: {"method": "elicitation/create", "params": elicitation}},
        "requestState": state,
    }


# -- the connection state machine ----------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """Write this message now."""

    message: dict[str, Any]


@dataclass(frozen=True)
class StartCall:
    """Run a tool (or resume one waiting for input, when ``request_state`` is set)."""

    id: str | int
    name: str
    arguments: dict[str, Any]
    version: str
    progress_token: Any = None
    can_elicit: bool = False
    request_state: Any = None
    input_responses: dict[str, Any] | None = None


@dataclass(frozen=True)
class CancelRequest:
    request_id: Any
    reason: str = ""


@dataclass(frozen=True)
class ClientReply:
    """A response to a request this server sent (an ``elicitation/create``)."""

    id: str | int
    result: Any
    error: dict[str, Any] | None


@dataclass(frozen=True)
class Ignored:
    why: str


Event = Reply | StartCall | CancelRequest | ClientReply | Ignored


@dataclass
class ServerIdentity:
    name: str = "peon"
    version: str = "0"
    title: str = "Peon"
    instructions: str = ""

    def implementation(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "title": self.title}


@dataclass
class Connection:
    """What one stdio connection has negotiated, and how each incoming message is answered."""

    tools: list[dict[str, Any]]
    identity: ServerIdentity = field(default_factory=ServerIdentity)
    era: str | None = None  # "handshake" or "modern", fixed by the first request that belongs to one
    version: str | None = None  # the negotiated handshake version
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    client_info: dict[str, Any] = field(default_factory=dict)
    initialized: bool = False  # the client sent notifications/initialized

    def __post_init__(self) -> None:
        self._by_name = {tool["name"]: tool for tool in self.tools}

    # -- entry point --

    def receive(self, message: Message) -> Event:
        if isinstance(message, Malformed):
            return Reply(message.reply)
        if isinstance(message, Response):
            return ClientReply(message.id, message.result, message.error)
        if isinstance(message, Notification):
            return self._notification(message)
        return self._request(message)

    def can_elicit(self) -> bool:
        """Handshake era: whether the client can be sent ``elicitation/create``."""
        return (self.era == "handshake" and self.version is not None and at_least(self.version, "2025-06-18")
                and can_elicit_form(self.client_capabilities))

    # -- notifications --

    def _notification(self, note: Notification) -> Event:
        if note.method == "notifications/initialized":
            self.initialized = True
            return Ignored("initialized")
        if note.method == "notifications/cancelled":
            request_id = note.params.get("requestId")
            if not _valid_id(request_id):
                return Ignored("a cancellation without a valid requestId")
            return CancelRequest(request_id, str(note.params.get("reason") or ""))
        return Ignored(f"notification {note.method}")

    # -- requests --

    def _request(self, req: Request) -> Event:
        meta = req.params.get("_meta")
        enveloped = isinstance(meta, Mapping) and PROTOCOL_VERSION_KEY in meta
        if req.method == "initialize":
            return self._initialize(req)
        if enveloped or req.method == "server/discover":
            return self._modern(req, meta if isinstance(meta, Mapping) else {})
        if self.era == "modern":
            return self._error(req, INVALID_PARAMS,
                               f"this connection speaks {MODERN_VERSIONS[-1]}: every request needs params._meta with "
                               f"{PROTOCOL_VERSION_KEY!r} and {CLIENT_CAPABILITIES_KEY!r}")
        if req.method == "ping":
            return Reply(result_response(req.id, {}))
        if self.era != "handshake":
            return self._error(req, INVALID_REQUEST,
                               f"{req.method} before initialize: send initialize first (or use the "
                               f"{MODERN_VERSIONS[-1]} per-request _meta envelope)")
        return self._dispatch(req, self.version or LATEST_HANDSHAKE, self.can_elicit(), meta)

    def _initialize(self, req: Request) -> Event:
        if self.era == "modern":
            requested = req.params.get("protocolVersion")
            return Reply(error_response(req.id, UNSUPPORTED_PROTOCOL_VERSION,
                                        f"this connection speaks {MODERN_VERSIONS[-1]}, which has no initialize handshake",
                                        {"supported": list(MODERN_VERSIONS), "requested": requested}))
        if self.era == "handshake":
            return self._error(req, INVALID_REQUEST, "initialize was already received on this connection")
        capabilities = req.params.get("capabilities")
        if not isinstance(capabilities, Mapping):
            return self._error(req, INVALID_PARAMS, 'initialize needs "capabilities" (an object)')
        self.era = "handshake"
        self.version = negotiate(req.params.get("protocolVersion"))
        self.client_capabilities = dict(capabilities)
        info = req.params.get("clientInfo")
        self.client_info = dict(info) if isinstance(info, Mapping) else {}
        result: dict[str, Any] = {
            "protocolVersion": self.version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": self.identity.implementation(),
        }
        if self.identity.instructions:
            result["instructions"] = self.identity.instructions
        return Reply(result_response(req.id, result))

    def _modern(self, req: Request, meta: Mapping[str, Any]) -> Event:
        if self.era == "handshake":
            return self._error(req, INVALID_REQUEST,
                               f"this connection was opened with initialize ({self.version}); requests carrying the "
                               f"{MODERN_VERSIONS[-1]} envelope are not accepted on it")
        missing = [key for key in (PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY) if key not in meta]
        if missing:
            return self._error(req, INVALID_PARAMS, f"params._meta is missing the required key(s): {', '.join(missing)}")
        version = meta[PROTOCOL_VERSION_KEY]
        if not isinstance(version, str):
            return self._error(req, INVALID_PARAMS, f"{PROTOCOL_VERSION_KEY} must be a string, got {version!r}")
        if version not in MODERN_VERSIONS:
            return Reply(error_response(req.id, UNSUPPORTED_PROTOCOL_VERSION,
                                        f"protocol version {version!r} is not served per request; supported: "
                                        f"{', '.join(MODERN_VERSIONS)} (or {', '.join(HANDSHAKE_VERSIONS)} through initialize)",
                                        {"supported": list(MODERN_VERSIONS), "requested": version}))
        capabilities = meta[CLIENT_CAPABILITIES_KEY]
        if not isinstance(capabilities, Mapping):
            return self._error(req, INVALID_PARAMS, f"{CLIENT_CAPABILITIES_KEY} must be an object")
        self.era = "modern"
        if req.method == "server/discover":
            return Reply(self._complete(req.id, version, {
                "supportedVersions": list(MODERN_VERSIONS),
                "capabilities": {"tools": {"listChanged": False}},
                **({"instructions": self.identity.instructions} if self.identity.instructions else {}),
                "ttlMs": 0, "cacheScope": "private",
            }))
        return self._dispatch(req, version, can_elicit_form(capabilities), meta)

    def _dispatch(self, req: Request, version: str, can_elicit: bool, meta: Any) -> Event:
        if req.method == "ping":
            return Reply(self._complete(req.id, version, {}))
        if req.method == "tools/list":
            if req.params.get("cursor") is not None:
                return self._error(req, INVALID_PARAMS, "unknown cursor: every tool is listed in the first page")
            result: dict[str, Any] = {"tools": [tool_descriptor(tool, version) for tool in self.tools]}
            if is_modern(version):
                result.update(ttlMs=0, cacheScope="private")
            return Reply(self._complete(req.id, version, result))
        if req.method == "tools/call":
            return self._call(req, version, can_elicit, meta)
        return self._error(req, METHOD_NOT_FOUND, f"Method not found: {req.method}")

    def _call(self, req: Request, version: str, can_elicit: bool, meta: Any) -> Event:
        name = req.params.get("name")
        if not isinstance(name, str):
            return self._error(req, INVALID_PARAMS, 'tools/call needs "name" (a string)')
        if name not in self._by_name:
            return self._error(req, INVALID_PARAMS, f"Unknown tool: {name!r}; available: {', '.join(self._by_name)}")
        arguments = req.params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return self._error(req, INVALID_PARAMS, f'"arguments" of tools/call must be an object, got {type(arguments).__name__}')
        token = meta.get("progressToken") if isinstance(meta, Mapping) else None
        if not (isinstance(token, str) or (isinstance(token, int) and not isinstance(token, bool))):
            token = None
        responses = req.params.get("inputResponses") if is_modern(version) else None
        return StartCall(req.id, name, arguments, version, token, can_elicit,
                         req.params.get("requestState") if is_modern(version) else None,
                         responses if isinstance(responses, dict) else None)

    # -- shaping --

    def _complete(self, request_id: Any, version: str, result: dict[str, Any]) -> dict[str, Any]:
        return respond(request_id, version, result, self.identity)

    def _error(self, req: Request, code: int, message: str) -> Reply:
        return Reply(error_response(req.id, code, message))


def respond(request_id: Any, version: str, result: dict[str, Any], identity: ServerIdentity) -> dict[str, Any]:
    """A result response; under the stateless revision it says what it is and who sent it."""
    if is_modern(version):
        result = {"resultType": "complete", **result}
        meta = dict(result.get("_meta") or {})
        meta.setdefault(SERVER_INFO_KEY, identity.implementation())
        result["_meta"] = meta
    return result_response(request_id, result)
