"""``peon serve``: run one workspace's Peon session behind MCP Streamable HTTP, until told to stop.

Promises:

* it refuses to start (exit status 2, one sentence on stderr) when asked to listen on a non-loopback
  address without a bearer token, when the token source is ambiguous or empty, or when the
  configuration is invalid;
* the token is read from a file or an environment variable and removed from the environment the
  session — and so every command a tool runs — inherits;
* ``/healthz`` answers as soon as the socket listens; the session starts behind it (``/readyz`` says
  when it is ready), and until it has started ``/mcp`` answers 503 with ``Retry-After``;
* ``--port-file`` is written (atomically) only once the session has started and ``/mcp`` serves it: a
  client that connects the moment the file appears is served, never told "not ready"; a server whose
  session cannot start writes none;
* the instructions ``initialize`` returns name the session's real sandbox (:mod:`peon.mcp.instructions`);
* on ``SIGTERM`` or ``SIGINT`` it drains: ``/readyz`` turns 503 and new requests get 503, running
  calls get up to ``--drain-seconds`` to finish, then the session closes — the running call is
  cancelled (TERM → 2 s → KILL), queued ones fail ``session_closed``, the supervisor flushes and closes
  the audit log and exits — the open streams get their answers and the process exits 0, nothing of
  the session left; a second signal skips the drain wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from peon import otel
from peon.mcp import protocol as p
from peon.mcp.instructions import server_instructions

from peon.serve import logs
from peon.serve.app import ServeOptions, ServeState, build_app
from peon.serve.guard import Guard, bind_problem
from peon.serve.stalls import guarded_protocol

log = logging.getLogger("peon.serve")

DEFAULT_TOKEN_ENV = "PEON_SERVE_TOKEN"
SHUTDOWN_GRACE_SECONDS = 5.0  # for connections that are still open once every call has been answered


class StartupError(Exception):
    """Bad usage of ``peon serve`` (exit status 2)."""


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    token_env: str = DEFAULT_TOKEN_ENV
    allowed_hosts: list[str] = field(default_factory=list)
    allowed_origins: list[str] = field(default_factory=list)
    drain_seconds: float = 5.0
    max_connections: int = 128
    port_file: str | None = None
    log_format: logs.LogFormat = "text"
    options: ServeOptions = field(default_factory=ServeOptions)


def read_token(token_file: str | None, token_env: str, environ: Mapping[str, str]) -> str | None:
    """The bearer token from ``--token-file`` or the environment variable; never both."""
    from_env = environ.get(token_env)
    if token_file is not None:
        if from_env:
            raise StartupError(f"both --token-file and ${token_env} are set; give the token one way only")
        try:
            token = Path(token_file).expanduser().read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise StartupError(f"cannot read the token file {token_file}: {exc}") from None
        if not token:
            raise StartupError(f"the token file {token_file} is empty")
    elif from_env is not None:
        token = from_env.strip()
        if not token:
            raise StartupError(f"${token_env} is set but empty")
    else:
        return None
    if any(c.isspace() or not c.isprintable() for c in token) or len(token) < 16:
        raise StartupError("the bearer token must be at least 16 printable characters without spaces "
                           "(e.g. the output of `openssl rand -hex 32`)")
    return token


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so, and without it a
    # response written as headers + body waits for the client's delayed ACK (~40 ms) under Nagle.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(1024)
    sock.set_inheritable(False)
    return sock


class DrainingServer(uvicorn.Server):
    """uvicorn, with SIGTERM/SIGINT starting Peon's drain instead of stopping at once."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[int], None]):
        super().__init__(config)
        self._on_signal = on_signal
        self.signalled = 0

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not recorded for re-raising: uvicorn would kill the process with the signal after serving,
        # while a drained server exits 0.
        self.signalled += 1
        if self.signalled > 1:
            self.force_exit = True
        self._on_signal(sig)


def run(workspace: Path, session_factory: Callable[..., Any], identity: p.ServerIdentity, config: ServeConfig) -> int:
    """Serve until a signal or a failed start; the exit status."""
    logs.configure(config.log_format)
    guard = Guard.build(config.token, config.host, config.allowed_hosts, config.allowed_origins)
    state = ServeState(guard, identity, config.options, telemetry=otel.from_environment())
    sock = listen(config.host, config.port)
    host, port = sock.getsockname()[:2]
    exit_code = [0]
    server: DrainingServer

    def approve(request: dict[str, Any]) -> dict[str, Any]:
        router = state.router
        if router is None:  # no call can be running before the session is attached
            return {"decision": "deny", "reason": "the server is still starting"}
        return router.approver(request)

    async def start_session() -> None:
        loop = asyncio.get_running_loop()
        try:
            session = await asyncio.to_thread(session_factory, approve)
        except Exception as exc:
            message = getattr(exc, "message", None) or str(exc)
            state.startup_error = message
            log.error("the session could not start: %s", message, extra={"fields": {"event": "startup_failed"}})
            exit_code[0] = 1
            server.should_exit = True
            return
        if state.draining:
            await asyncio.to_thread(session.close)
            return
        info = session.info
        if not identity.instructions:  # before /mcp answers anyone: the sandbox this session really has
            identity.instructions = server_instructions(str(info.get("workspace") or workspace), info.get("sandbox"))
        state.attach(session, loop)
        if config.port_file:  # only now: a client that reads it is served at once
            try:
                write_port_file(config.port_file, port)
            except OSError as exc:
                log.error("cannot write the port file %s: %s", config.port_file, exc.strerror,
                          extra={"fields": {"event": "startup_failed"}})
                exit_code[0] = 1
                if not draining:  # the session closes with everything it started, then the server exits
                    draining.append(asyncio.create_task(drain()))
                return
        log.info("session ready", extra={"fields": {
            "event": "ready", "workspace": info.get("workspace"), "supervisor_pid": info.get("pid"),
            "containment": (info.get("containment") or {}).get("kind"), "tools": len(session.tools()),
            "containment_detail": (info.get("containment") or {}).get("description"),
            "limits": (info.get("containment") or {}).get("limits"),
            "sandbox": (info.get("sandbox") or {}).get("layers") or "off",  # what is and is not enforced
            "sandbox_not_enforced": (info.get("sandbox") or {}).get("not_enforced", [])}})

    starting: list[asyncio.Task[None]] = []
    draining: list[asyncio.Task[None]] = []

    async def drain() -> None:
        state.draining = True
        log.info("draining", extra={"fields": {"event": "draining", "drain_seconds": config.drain_seconds}})
        if starting and not starting[0].done():
            with contextlib.suppress(BaseException):
                await starting[0]
        router = state.router
        if router is not None and not router.idle.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(config.drain_seconds):
                    await router.idle.wait()
        if router is not None:
            await router.close()
        if state.session is not None:
            # Cancels the running call (TERM → 2 s → KILL), fails queued ones, and returns once the
            # supervisor — which closes the audit log — has exited with everything it started.
            await asyncio.to_thread(state.session.close)
        log.info("session closed", extra={"fields": {"event": "closed"}})
        server.should_exit = True

    def on_signal(sig: int) -> None:
        def begin() -> None:
            log.info("received %s", signal.Signals(sig).name, extra={"fields": {"event": "signal"}})
            if not draining:
                draining.append(asyncio.create_task(drain()))
            else:  # a second signal: stop waiting for running calls to finish
                config.drain_seconds = 0
                if state.router is not None:
                    state.router.idle.set()

        loop.call_soon_threadsafe(begin)  # wakes the loop even while it waits in select()

    async def expire_sessions() -> None:
        period = min(30.0, max(config.options.session_idle_seconds / 4, 0.1))
        while True:
            await asyncio.sleep(period)
            state.expire_sessions()

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        starting.append(asyncio.create_task(start_session()))
        sweeper = asyncio.create_task(expire_sessions())
        yield
        sweeper.cancel()
        if not draining:  # uvicorn stopped for another reason: still close the session cleanly
            draining.append(asyncio.create_task(drain()))
        with contextlib.suppress(BaseException):
            await draining[0]

    app = build_app(state, lifespan)

    def stalled(why: str) -> None:
        if state.metrics is not None:
            state.metrics.limits.labels("request_head" if why == "timeout" else "pending_connections").inc()

    protocol, _ = guarded_protocol(config.options.header_timeout_seconds, config.options.max_pending_connections,
                                   stalled)
    uv_config = uvicorn.Config(
        app, interface="asgi3", log_config=None, access_log=False, lifespan="on", http=protocol,
        # The gate answers beyond --max-connections with a JSON-RPC 503; uvicorn's own limit is a backstop.
        limit_concurrency=config.max_connections + 16, timeout_graceful_shutdown=int(SHUTDOWN_GRACE_SECONDS),
        timeout_keep_alive=5, server_header=False, proxy_headers=False,
    )
    server = DrainingServer(uv_config, on_signal)
    shown_host = f"[{host}]" if ":" in host else host
    log.info("listening on http://%s:%d/mcp", shown_host, port,
             extra={"fields": {"event": "listening", "host": host, "port": port, "workspace": str(workspace),
                               "token": config.token is not None}})
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(server.serve(sockets=[sock]))
    finally:
        sock.close()
        loop.close()
    if state.telemetry is not None:
        state.telemetry.shutdown()
    if state.startup_error is not None:
        return exit_code[0] or 1
    return exit_code[0]


def write_port_file(path: str, port: int) -> None:
    """``port`` in ``path``, replaced atomically: a reader sees the whole number or no file."""
    tmp = Path(path + ".tmp")
    tmp.write_text(f"{port}\n")
    tmp.replace(path)


def environment_without(name: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    return {k: v for k, v in (os.environ if environ is None else environ).items() if k != name}


def check_bind(host: str, token: str | None) -> None:
    problem = bind_problem(host, token is not None)
    if problem is not None:
        raise StartupError(problem)
