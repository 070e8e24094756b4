"""The ASGI application of ``peon serve``: ``/mcp`` (MCP Streamable HTTP), ``/healthz``, ``/readyz`` and
``/metrics``, on Starlette.

Promises:

* every request passes the guard first (``Host`` 421, ``Origin`` 403, bearer token 401 — the probes
  ``/healthz`` and ``/readyz`` need no token); every refusal and every bad request gets its HTTP status
  and, on ``/mcp``, a JSON-RPC error naming the rule — never a traceback;
* a request body is read up to ``max_body_bytes`` and refused with 413 beyond it, whatever
  ``Content-Length`` claims, so a client cannot make the server hold more;
* ``/metrics`` answers from the moment the server listens (``peon_ready`` says whether it is ready);
* ``/healthz`` answers 200 while the process runs; ``/readyz`` answers 200 only once the supervisor
  and a standby worker are up, and 503 while starting, while the supervisor is being replaced and
  while draining;
* a ``tools/call`` that finishes before it sends a notification and within ``keepalive_seconds`` is
  answered with plain JSON; otherwise with an SSE stream that carries keep-alive comments every
  ``keepalive_seconds`` while the call runs, so proxies do not cut long calls; the client closing the
  response before the answer cancels the call;
* both eras are served on the one endpoint (see :mod:`peon.serve.wire` for how a POST is routed); a
  2025-11-25 session is created by ``initialize``, named by ``Mcp-Session-Id``, bounded in number and
  idle time, and ended by ``DELETE``;
* each request is logged once, with its status, duration and MCP method, tool and outcome.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from peon.mcp import protocol as p

from peon.serve import wire
from peon.serve.calls import Answer, CallRouter, McpSession, Stream
from peon.serve.guard import TOKEN_HEADER, Guard, Refusal
from peon.serve.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger("peon.serve")
access_log = logging.getLogger("peon.serve.access")


@dataclass
class ServeOptions:
    keepalive_seconds: float = 15.0
    max_body_bytes: int = 17 << 20
    max_sessions: int = 64
    session_idle_seconds: float = 3600.0
    idempotency_window_seconds: float = 600.0
    idempotency_entries: int = 1024
    max_requests: int = 128  # concurrent requests; beyond: 503 with a JSON-RPC error
    header_timeout_seconds: float = 10.0  # to send a request head (peon.serve.stalls)
    body_timeout_seconds: float = 30.0  # for each part of a request body
    max_pending_connections: int = 64  # connections waiting for a request head; beyond: the oldest is closed


@dataclass
class ServeState:
    """Everything the endpoints share; ``session`` and ``router`` exist once the Peon session started."""

    guard: Guard
    identity: p.ServerIdentity
    options: ServeOptions
    session: Any = None
    router: CallRouter | None = None
    metrics: Metrics | None = None
    draining: bool = False
    standby_seen: bool = False
    startup_error: str | None = None
    mcp_sessions: dict[str, McpSession] = field(default_factory=dict)
    recovering: asyncio.Task[None] | None = None
    telemetry: Any = None  # a peon.otel.Telemetry when OpenTelemetry is configured

    def attach(self, session: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.metrics = self.metrics or Metrics([])
        self.metrics.set_tools([t["name"] for t in session.tools()])
        if self.telemetry is not None and not self.metrics.otel:
            self.metrics.mirror_to(self.telemetry.meter)
        self.metrics.describe_containment(session.info.get("containment") or {})
        self.router = CallRouter(session, self.identity, self.metrics, loop=loop,
                                 idempotency_window=self.options.idempotency_window_seconds,
                                 idempotency_entries=self.options.idempotency_entries, telemetry=self.telemetry)
        self.session = session

    # -- readiness ------------------------------------------------------------------------------------

    def readiness(self) -> str | None:
        """Why the server is not ready, or ``None``."""
        if self.draining:
            return "draining"
        if self.startup_error is not None:
            return f"the session could not start: {self.startup_error}"
        if self.session is None or self.router is None:
            return "starting: the session's supervisor is not ready yet"
        if not self.session.alive:
            self._recover()
            return "the session's supervisor died; a fresh one is starting"
        if not self.standby_seen:
            self.standby_seen = _standby_worker_running(self.session.supervisor_pid)
            if not self.standby_seen:
                return "starting: no standby worker yet"
        return None

    def expire_sessions(self) -> None:
        """End the 2025-11-25 sessions idle for ``session_idle_seconds`` with no call running (their jobs
        are stopped); run at each ``initialize`` and every few seconds by the server."""
        now = time.monotonic()
        for session_id, mcp_session in list(self.mcp_sessions.items()):
            if not mcp_session.calls and now - mcp_session.last_seen > self.options.session_idle_seconds:
                del self.mcp_sessions[session_id]
                if self.router is not None:
                    self.router.end_mcp_session(mcp_session, "the session expired")
        if self.metrics is not None:
            self.metrics.sessions.set(len(self.mcp_sessions))

    def _recover(self) -> None:
        if self.router is not None and (self.recovering is None or self.recovering.done()):
            self.standby_seen = False
            self.recovering = asyncio.create_task(self.router.recover_session())


def _standby_worker_running(supervisor_pid: int) -> bool:
    """Whether a pre-started worker waits below the supervisor (its title is ``peon-worker standby``)."""
    import psutil

    try:
        children = psutil.Process(supervisor_pid).children(recursive=True)
    except psutil.Error:
        return False
    for child in children:
        try:
            if " ".join(child.cmdline()).startswith("peon-worker standby"):
                return True
        except psutil.Error:
            continue
    return False


# -- small responses --------------------------------------------------------------------------------


def json_body(message: Any) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


async def send_json(send: Send, status: int, message: Any, headers: dict[str, str] | None = None) -> None:
    body = json_body(message)
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def send_empty(send: Send, status: int, headers: dict[str, str] | None = None) -> None:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": [*raw, (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


def rpc_error(code: int, message: str, request_id: Any = None) -> dict[str, Any]:
    return p.error_response(request_id, code, message)


class BodyTooLarge(Exception):
    def __init__(self, limit: int):
        self.limit = limit


class BodyStalled(Exception):
    def __init__(self, seconds: float):
        self.seconds = seconds


async def read_body(receive: Receive, limit: int, part_seconds: float = 30.0) -> bytes:
    body = bytearray()
    while True:
        try:
            async with asyncio.timeout(part_seconds):
                message = await receive()
        except TimeoutError:
            raise BodyStalled(part_seconds) from None
        if message["type"] == "http.disconnect":
            raise ConnectionError("the client went away while sending the request")
        body += message.get("body", b"")
        if len(body) > limit:
            raise BodyTooLarge(limit)
        if not message.get("more_body", False):
            return bytes(body)


# -- the guard and the access log -------------------------------------------------------------------


OPEN_PATHS = frozenset({"/healthz", "/readyz"})


class Gate:
    """ASGI middleware: refuse what the guard refuses, count and log every request once."""

    def __init__(self, app: ASGIApp, state: ServeState):
        self.app = app
        self.state = state
        self.active = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        path = scope.get("path", "")
        info: dict[str, Any] = {}
        scope["peon"] = info
        status_box = [0]

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_box[0] = message["status"]
            await send(message)

        refusal = self.state.guard.check(headers.get("host"), headers.get("origin"), headers.get("authorization"),
                                         needs_token=path not in OPEN_PATHS, peon_token=headers.get(TOKEN_HEADER))
        busy = refusal is None and self.active >= self.state.options.max_requests and path not in OPEN_PATHS
        self.active += 1
        try:
            if refusal is not None:
                info["refused"] = refusal.message
                await self._refuse(tracked_send, refusal, path)
            elif busy:
                info["refused"] = "too many concurrent requests"
                await send_json(tracked_send, 503, p.error_response(
                    None, p.INTERNAL_ERROR, f"{self.active - 1} requests are in progress, the most this server "
                    "serves at once (--max-connections); retry later", {"code": "busy"}), {"Retry-After": "1"})
            else:
                await self.app(scope, receive, tracked_send)
        finally:
            self.active -= 1
            status = status_box[0]
            if self.state.metrics is not None:
                self.state.metrics.record_http(path, status)
            fields = {"method": scope.get("method"), "path": path, "status": status,
                      "duration_ms": round((time.monotonic() - started) * 1000, 1),
                      "client": (scope.get("client") or ("", 0))[0], **info}
            if path not in OPEN_PATHS or status >= 400:
                access_log.info("%s %s %s", scope.get("method"), path, status, extra={"fields": fields})

    @staticmethod
    async def _refuse(send: Send, refusal: Refusal, path: str) -> None:
        if path == "/mcp":
            error = p.error_response(None, p.INVALID_REQUEST, refusal.message, {"code": "unauthorized"})
            await send_json(send, refusal.status, error, refusal.headers)
        else:
            await send_json(send, refusal.status, {"error": refusal.message}, refusal.headers)


# -- /mcp -------------------------------------------------------------------------------------------


class McpEndpoint:
    def __init__(self, state: ServeState):
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method")
        info: dict[str, Any] = scope.setdefault("peon", {})
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if method == "POST":
            await self.post(scope, receive, send, headers, info)
        elif method == "DELETE":
            await self.delete(send, headers)
        else:
            await send_json(send, 405, rpc_error(p.INVALID_REQUEST, f"{method} is not served on /mcp: send each "
                                                 "message as a POST (this server opens no GET stream)"),
                            {"Allow": "POST, DELETE"})

    async def delete(self, send: Send, headers: dict[str, str]) -> None:
        session_id = headers.get(wire.SESSION_HEADER)
        if session_id is None:
            await send_json(send, 405, rpc_error(p.INVALID_REQUEST, "DELETE ends a 2025-11-25 session and needs its "
                                                 "Mcp-Session-Id"), {"Allow": "POST"})
            return
        mcp_session = self.state.mcp_sessions.pop(session_id, None)
        if mcp_session is None:
            await send_json(send, 404, rpc_error(p.INVALID_REQUEST, "no such session (it ended or expired)"))
            return
        if self.state.router is not None:
            self.state.router.end_mcp_session(mcp_session, "the client ended the session")
        self._count_sessions()
        await send_empty(send, 204)

    async def post(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str],
                   info: dict[str, Any]) -> None:
        state = self.state
        if state.draining:
            await send_json(send, 503, rpc_error(p.INTERNAL_ERROR, "the server is shutting down and takes no new "
                                                 "requests"), {"Retry-After": "5"})
            return
        router = state.router
        if router is None:
            reason = state.readiness() or "starting"  # data.code lets a client (RemoteSession) wait and retry
            await send_json(send, 503, p.error_response(None, p.INTERNAL_ERROR, f"not ready: {reason}", {
                "code": p.NOT_READY, "retry_after_seconds": 1}), {"Retry-After": "1"})
            return
        wants_json, wants_sse = wire.accepts(headers.get("accept"))
        if not (wants_json and wants_sse):
            await send_json(send, 406, rpc_error(p.INVALID_REQUEST, "the Accept header must list both "
                                                 "application/json and text/event-stream"))
            return
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            await send_json(send, 415, rpc_error(p.INVALID_REQUEST, f"the body must be application/json, not "
                                                 f"{content_type[:60]!r}"))
            return
        try:
            body = await read_body(receive, state.options.max_body_bytes, state.options.body_timeout_seconds)
        except BodyStalled as exc:
            if state.metrics is not None:
                state.metrics.limits.labels("request_body").inc()
            await send_json(send, 408, p.error_response(None, p.INVALID_REQUEST, f"no part of the request body "
                                                        f"arrived for {exc.seconds:g} s", {"code": "timeout"}),
                            {"Connection": "close"})
            return
        except BodyTooLarge as exc:
            if state.metrics is not None:
                state.metrics.limits.labels("request_body").inc()
            refusal = f"the request body exceeds the limit of {exc.limit} bytes"
            await send_json(send, 413, p.error_response(None, p.INVALID_REQUEST, refusal,
                                                        {"code": "too_large", "limit": exc.limit}))
            return
        except ConnectionError:
            return
        message = p.parse_message(body)
        if isinstance(message, p.Malformed):
            await send_json(send, 400, message.reply)
            return
        shape: dict[str, Any] = {"params": getattr(message, "params", {})}
        era = wire.route(headers, shape)
        info["era"] = era
        if isinstance(message, (p.Request, p.Notification)):
            info["mcp_method"] = message.method
        if era == "modern":
            await self.modern(scope, receive, send, message, info)
        else:
            await self.handshake(scope, receive, send, headers, message, info)

    # -- 2026-07-28: one self-contained request per POST --

    async def modern(self, scope: Scope, receive: Receive, send: Send, message: p.Message,
                     info: dict[str, Any]) -> None:
        if isinstance(message, p.Notification):
            await send_empty(send, 202)  # this revision defines no client notifications over HTTP: dropped
            return
        if isinstance(message, p.Response):
            await send_json(send, 400, rpc_error(p.INVALID_REQUEST, "a client sends no JSON-RPC responses under "
                                                 "2026-07-28 (answers to input requests travel in the retry)"))
            return
        assert isinstance(message, p.Request)
        mismatch = wire.check_modern_headers(
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])],
            {"id": message.id, "method": message.method, "params": message.params})
        if mismatch is not None:
            await send_json(send, 400, mismatch)
            return
        assert self.state.router is not None
        connection = p.Connection(self.state.router.session.tools(), self.state.identity, subscribes=False,
                                  sends_logs=False, serves_tasks=True)
        await self.dispatch(scope, receive, send, connection.receive(message), None, message, "modern", info)

    # -- 2025-11-25 and earlier: sessions opened by initialize --

    async def handshake(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str],
                        message: p.Message, info: dict[str, Any]) -> None:
        state = self.state
        assert state.router is not None
        session_id = headers.get(wire.SESSION_HEADER)
        if isinstance(message, p.Request) and message.method == "initialize" and session_id is None:
            await self.initialize(send, message)
            return
        if session_id is None:
            await send_json(send, 400, rpc_error(p.INVALID_REQUEST, "Bad Request: no Mcp-Session-Id header; send "
                                                 "initialize first (or use the 2026-07-28 per-request envelope)",
                                                 getattr(message, "id", None)))
            return
        mcp_session = state.mcp_sessions.get(session_id)
        if mcp_session is None:
            await send_json(send, 404, p.error_response(getattr(message, "id", None), p.INVALID_REQUEST,
                                                        "Session not found: it ended or expired; initialize a new "
                                                        "one", {"code": "session_closed"}))
            return
        problem = wire.check_handshake_version(headers.get(wire.VERSION_HEADER))
        if problem is not None:
            await send_json(send, 400, rpc_error(p.INVALID_REQUEST, f"Bad Request: {problem}",
                                                 getattr(message, "id", None)))
            return
        mcp_session.last_seen = time.monotonic()
        event = mcp_session.connection.receive(message)
        if isinstance(event, p.CancelRequest):
            state.router.cancel_request(mcp_session, event.request_id)
            await send_empty(send, 202)
        elif isinstance(event, p.ClientReply):
            if not state.router.client_reply(mcp_session, event):
                log.info("ignored a response to unknown request %r", event.id)
            await send_empty(send, 202)
        elif isinstance(event, p.Ignored):
            await send_empty(send, 202)
        else:
            await self.dispatch(scope, receive, send, event, mcp_session, message, "handshake", info)

    async def initialize(self, send: Send, message: p.Request) -> None:
        state = self.state
        assert state.router is not None
        self._expire_sessions()
        if len(state.mcp_sessions) >= state.options.max_sessions:
            await send_json(send, 503, rpc_error(p.INTERNAL_ERROR, f"{len(state.mcp_sessions)} sessions are open, "
                                                 "the most this server keeps; end one (DELETE) or retry later",
                                                 message.id), {"Retry-After": "5"})
            return
        # No standalone stream is opened: no subscriptions; log messages go on the streams of their calls.
        connection = p.Connection(state.router.session.tools(), state.identity, subscribes=False)
        event = connection.receive(message)
        assert isinstance(event, p.Reply)
        if "result" not in event.message:
            await send_json(send, wire.http_status(event.message, "handshake"), event.message)
            return
        session_id = secrets.token_urlsafe(24)
        state.mcp_sessions[session_id] = McpSession(session_id, connection)
        self._count_sessions()
        await send_json(send, 200, event.message, {"Mcp-Session-Id": session_id})

    def _expire_sessions(self) -> None:
        self.state.expire_sessions()

    def _count_sessions(self) -> None:
        if self.state.metrics is not None:
            self.state.metrics.sessions.set(len(self.state.mcp_sessions))

    # -- answering --

    async def dispatch(self, scope: Scope, receive: Receive, send: Send, event: p.Event,
                       mcp_session: McpSession | None, message: p.Message, era: wire.Era,
                       info: dict[str, Any]) -> None:
        router = self.state.router
        assert router is not None
        if isinstance(event, p.Reply):
            await send_json(send, wire.http_status(event.message, era), event.message)
            return
        if isinstance(event, p.Feature):
            outcome = await router.feature(event, mcp_session)
            if isinstance(outcome, Answer):
                await send_json(send, wire.http_status(outcome.message, era), outcome.message)
            else:
                await self.stream(scope, receive, send, outcome, info)
            return
        if isinstance(event, p.TaskRequest):
            answered = router.task_request(event, mcp_session)
            await send_json(send, wire.http_status(answered, era), answered)
            return
        if not isinstance(event, p.StartCall):
            await send_empty(send, 202)
            return
        info["tool"] = event.name
        meta = message.params.get("_meta") if isinstance(message, p.Request) else None
        outcome = await router.start(event, mcp_session, meta)
        if isinstance(outcome, Answer):
            await send_json(send, wire.http_status(outcome.message, era), outcome.message)
            return
        await self.stream(scope, receive, send, outcome, info)

    async def stream(self, scope: Scope, receive: Receive, send: Send, stream: Stream, info: dict[str, Any]) -> None:
        """Answer a call: plain JSON when it finishes before it has anything else to say or the keep-alive
        interval passes, else SSE until its final message. The client hanging up cancels the call."""
        router = self.state.router
        assert router is not None
        keepalive = self.state.options.keepalive_seconds

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            stream.hang_up()

        watcher = asyncio.create_task(watch_disconnect())
        try:
            answer = await stream.settle(keepalive)
            if answer is not None:
                await send_json(send, 200, answer)
                return
            headers = [(b"content-type", b"text/event-stream")]
            headers += [(k.lower().encode(), v.encode()) for k, v in wire.SSE_HEADERS.items()]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while (chunk := await stream.next_chunk(keepalive)) is not None:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (ConnectionError, OSError):
            info["closed_by_client"] = True
            router.stream_closed(stream)
        except asyncio.CancelledError:
            router.stream_closed(stream)  # the server is forcing connections down
            raise
        finally:
            watcher.cancel()


# -- probes and metrics -----------------------------------------------------------------------------


def build_app(state: ServeState, lifespan: Callable[[Starlette], Any] | None = None) -> ASGIApp:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        reason = state.readiness()
        if reason is None:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)

    async def metrics(request: Request) -> Response:
        if state.metrics is None:  # a scrape before the session started: the series exist, at zero
            state.metrics = Metrics([])
        state.metrics.ready.set(1 if state.readiness() is None else 0)
        return Response(state.metrics.exposition(), media_type=CONTENT_TYPE)

    routes = [
        Route("/mcp", McpEndpoint(state), methods=["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"]),
        Route("/healthz", healthz, methods=["GET", "HEAD"]),
        Route("/readyz", readyz, methods=["GET", "HEAD"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    return Gate(app, state)

