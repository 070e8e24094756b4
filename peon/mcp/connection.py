"""The state machine of one MCP connection, sans I/O: classified messages in, events out.

Promises:

* :meth:`Connection.receive` turns every message into exactly one event, never an exception;
* it answers everything that needs no tool execution itself (``initialize``, ``server/discover``,
  ``ping``, ``tools/list``, ``logging/setLevel``, every protocol error) as a :class:`Reply`, and hands
  the rest to the I/O layer as :class:`StartCall`, :class:`Feature`, :class:`CancelRequest` or
  :class:`ClientReply` events;
* it advertises what it serves: tools, prompts, resources and completions in both eras, and in the
  handshake era logging; resource subscriptions through ``resources/subscribe`` (handshake era) or
  ``subscriptions/listen`` (2026-07-28) where the transport can notify — ``resources/subscribe`` and
  ``logging/setLevel``, which the stateless revision removed, are ``-32601`` there; where the transport
  can notify, the client is also told when the prompts change (``listChanged``);
* ``ping`` is answered in the handshake era only: the 2026-07-28 revision removed it, so an enveloped
  ``ping`` is ``-32601`` like any method the revision does not define;
* the first request that belongs to an era locks the connection to it, as mixing the handshake and the
  stateless revision mid-stream has no defined meaning;
* on a transport that serves MCP tasks (``serves_tasks``) it advertises them where the revision defines
  them — 2025-11-25's ``tasks`` capability with every tool's ``execution.taskSupport`` ``optional``,
  2026-07-28's ``io.modelcontextprotocol/tasks`` extension — marks the ``tools/call`` that becomes a task
  (``StartCall.task_ttl``) and hands the revision's ``tasks/*`` requests on as :class:`TaskRequest`; on
  any other transport ``params.task`` is ignored (the plain call) and ``tasks/*`` is ``-32601``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from peon.mcp.elicitation import can_elicit_form
from peon.mcp.features import FEATURE_METHODS
from peon.mcp.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    Malformed,
    Message,
    Notification,
    Request,
    Response,
    error_response,
    lone_surrogate,
    result_response,
    shown,
    valid_id,
)
from peon.mcp.revisions import (
    CLIENT_CAPABILITIES_KEY,
    HANDSHAKE_VERSIONS,
    LATEST_HANDSHAKE,
    MODERN_VERSIONS,
    PROTOCOL_VERSION_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    Era,
    ServerIdentity,
    at_least,
    is_modern,
    negotiate,
    respond,
)
from peon.mcp.logs import LevelProblem, LogFeed, check_level
from peon.mcp.tasks import TASKS_EXTENSION, TASKS_REVISION, task_methods, task_wanted
from peon.mcp.tools import tool_descriptor

STATELESS_UNSERVED = frozenset({"resources/subscribe", "resources/unsubscribe", "logging/setLevel"})


def server_capabilities(era: Era, subscribes: bool = True, logs: bool = True, tasks: bool = False) -> dict[str, Any]:
    """What a server of this era advertises (``subscribes``: the transport can notify a connection of
    resource updates at any time; ``logs``: it can send log messages, at least with the calls they concern;
    ``tasks``: it serves MCP tasks for this revision, :mod:`peon.mcp.tasks`).
    Such a transport also tells the client when the prompts change: a handshake-era one at once
    (:meth:`Connection.tells_prompt_changes`), a 2026-07-28 one on a ``subscriptions/listen`` stream."""
    capabilities: dict[str, Any] = {"tools": {"listChanged": False},
                                    "prompts": {"listChanged": subscribes},
                                    "resources": {"subscribe": subscribes,
                                                  "listChanged": False}, "completions": {}}
    if era == "handshake" and logs:
        capabilities["logging"] = {}
    if tasks and era == "handshake":
        capabilities["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    elif tasks:
        capabilities["extensions"] = {TASKS_EXTENSION: {}}
    return capabilities


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
    meta: Any = field(default=None, compare=False)  # the request's params._meta (its trace context)
    task_ttl: int | None = None  # it becomes an MCP task kept this long (ms): peon.mcp.tasks.task_wanted


@dataclass(frozen=True)
class TaskRequest:
    """A ``tasks/*`` request (:mod:`peon.mcp.tasks`), on a connection that serves tasks."""

    id: str | int
    method: str
    params: dict[str, Any]
    version: str


@dataclass(frozen=True)
class Feature:
    """A prompts, resources or completion request (planned by :func:`peon.mcp.features.plan`)."""

    id: str | int
    method: str
    params: dict[str, Any]
    version: str
    can_elicit: bool = False


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


Event = Reply | StartCall | Feature | CancelRequest | ClientReply | TaskRequest | Ignored


@dataclass
class Connection:
    """What one client connection has negotiated, and how each incoming message is answered."""

    tools: list[dict[str, Any]]
    identity: ServerIdentity = field(default_factory=ServerIdentity)
    era: Era | None = None  # "handshake" or "modern", fixed by the first request that belongs to one
    version: str | None = None  # the negotiated handshake version
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    client_info: dict[str, Any] = field(default_factory=dict)
    initialized: bool = False  # the client sent notifications/initialized
    logs: LogFeed = field(default_factory=LogFeed)  # logging/setLevel's level and the rate limit
    subscribes: bool = True  # the transport can send resource updates to this connection at any time
    sends_logs: bool = True  # ... and log messages (at least on the streams of the calls they concern)
    serves_tasks: bool = False  # the transport serves MCP tasks (2025-11-25 and 2026-07-28)

    def __post_init__(self) -> None:
        self.set_tools(self.tools)

    def tells_prompt_changes(self) -> bool:
        """Whether ``notifications/prompts/list_changed`` is sent to this connection (it was advertised)."""
        return self.era == "handshake" and self.subscribes and self.initialized

    def set_tools(self, tools: list[dict[str, Any]]) -> None:
        """The tools this connection lists and calls (a transport may learn them after the handshake)."""
        self.tools = list(tools)
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
            if not valid_id(request_id):
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
            requested = _echoed_version(req.params.get("protocolVersion"))
            return Reply(error_response(req.id, UNSUPPORTED_PROTOCOL_VERSION,
                                        f"this connection speaks {MODERN_VERSIONS[-1]}, "
                                        "which has no initialize handshake",
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
            "capabilities": server_capabilities("handshake", self.subscribes, self.sends_logs,
                                                self.serves_tasks and self.version == TASKS_REVISION),
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
            return self._error(req, INVALID_PARAMS,
                               f"params._meta is missing the required key(s): {', '.join(missing)}")
        version = meta[PROTOCOL_VERSION_KEY]
        if not isinstance(version, str):
            return self._error(req, INVALID_PARAMS, f"{PROTOCOL_VERSION_KEY} must be a string, got {shown(version)}")
        bad_version = lone_surrogate(version)
        if bad_version is not None:
            return self._error(req, INVALID_PARAMS, f"{PROTOCOL_VERSION_KEY} is not valid Unicode ({bad_version})")
        if version not in MODERN_VERSIONS:
            return Reply(error_response(req.id, UNSUPPORTED_PROTOCOL_VERSION,
                                        f"protocol version {shown(version)} is not served per request; supported: "
                                        f"{', '.join(MODERN_VERSIONS)} "
                                        f"(or {', '.join(HANDSHAKE_VERSIONS)} through initialize)",
                                        {"supported": list(MODERN_VERSIONS), "requested": _echoed_version(version)}))
        capabilities = meta[CLIENT_CAPABILITIES_KEY]
        if not isinstance(capabilities, Mapping):
            return self._error(req, INVALID_PARAMS, f"{CLIENT_CAPABILITIES_KEY} must be an object")
        self.era = "modern"
        if req.method == "server/discover":
            return Reply(self._complete(req.id, version, {
                "supportedVersions": list(MODERN_VERSIONS),
                "capabilities": server_capabilities("modern", self.subscribes, self.sends_logs, self.serves_tasks),
                **({"instructions": self.identity.instructions} if self.identity.instructions else {}),
                "ttlMs": 0, "cacheScope": "private",
            }))
        return self._dispatch(req, version, can_elicit_form(capabilities), meta)

    def _dispatch(self, req: Request, version: str, can_elicit: bool, meta: Any) -> Event:
        if req.method == "ping":
            if is_modern(version):  # the stateless revision removed ping: a request is its own liveness check
                return self._error(req, METHOD_NOT_FOUND, f"Method not found: ping does not exist in {version}")
            return Reply(self._complete(req.id, version, {}))
        if req.method == "tools/list":
            if req.params.get("cursor") is not None:
                return self._error(req, INVALID_PARAMS, "unknown cursor: every tool is listed in the first page")
            result: dict[str, Any] = {"tools": [tool_descriptor(tool, version) for tool in self.tools]}
            if self.serves_tasks and version == TASKS_REVISION:  # every tool may run as a task, none must
                for descriptor in result["tools"]:
                    descriptor["execution"] = {"taskSupport": "optional"}
            if is_modern(version):
                result.update(ttlMs=0, cacheScope="private")
            return Reply(self._complete(req.id, version, result))
        if req.method == "tools/call":
            return self._call(req, version, can_elicit, meta)
        if self.serves_tasks and req.method in task_methods(version):
            return TaskRequest(req.id, req.method, dict(req.params), version)
        if req.method == "subscriptions/listen" and is_modern(version) and self.subscribes:
            return Feature(req.id, req.method, dict(req.params), version, can_elicit)
        served = self.sends_logs if req.method == "logging/setLevel" else self.subscribes
        if req.method in STATELESS_UNSERVED and (is_modern(version) or not served):
            lacking = version if served else "this server"
            return self._error(req, METHOD_NOT_FOUND, f"Method not found: {req.method} needs a connection to notify, "
                                                      f"which {lacking} does not have")
        if req.method == "logging/setLevel":
            try:
                self.logs.set_level(check_level(req.params))
            except LevelProblem as problem:
                return self._error(req, INVALID_PARAMS, f"Invalid params: {problem}")
            return Reply(self._complete(req.id, version, {}))
        if req.method in FEATURE_METHODS:
            return Feature(req.id, req.method, dict(req.params), version, can_elicit)
        return self._error(req, METHOD_NOT_FOUND, f"Method not found: {req.method}")

    def _call(self, req: Request, version: str, can_elicit: bool, meta: Any) -> Event:
        name = req.params.get("name")
        if not isinstance(name, str):
            return self._error(req, INVALID_PARAMS, 'tools/call needs "name" (a string)')
        if name not in self._by_name:
            return self._error(req, INVALID_PARAMS,
                               f"Unknown tool: {shown(name)}; available: {', '.join(self._by_name)}")
        arguments = req.params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return self._error(req, INVALID_PARAMS,
                               f'"arguments" of tools/call must be an object, got {type(arguments).__name__}')
        token = meta.get("progressToken") if isinstance(meta, Mapping) else None
        if isinstance(token, str) and (bad_token := lone_surrogate(token)) is not None:
            return self._error(req, INVALID_PARAMS, f"_meta.progressToken is not valid Unicode ({bad_token})")
        if not valid_id(token):
            token = None  # not a token the protocol defines: the call runs without progress
        responses = req.params.get("inputResponses") if is_modern(version) else None
        state = req.params.get("requestState") if is_modern(version) else None
        ttl = (task_wanted(version, req.params, meta, str(self._by_name[name].get("risk")))
               if self.serves_tasks and state is None else None)
        return StartCall(req.id, name, arguments, version, token, can_elicit, state,
                         responses if isinstance(responses, dict) else None, meta, ttl)

    # -- shaping --

    def _complete(self, request_id: Any, version: str, result: dict[str, Any]) -> dict[str, Any]:
        return respond(request_id, version, result, self.identity)

    def _error(self, req: Request, code: int, message: str) -> Reply:
        return Reply(error_response(req.id, code, message))


def _echoed_version(requested: Any) -> str | None:
    """The requested version as ``data.requested`` of a -32022 error: a short, sendable string or null."""
    sendable = isinstance(requested, str) and len(requested) <= 64 and lone_surrogate(requested) is None
    return requested if sendable else None
