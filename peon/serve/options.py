"""The command line of ``peon serve``; importing this module loads nothing of the HTTP stack.

Promise: :func:`command` turns parsed options into a running server and returns the exit status: 2
with one sentence on stderr for bad usage (a missing ``serve`` extra, a non-loopback address without a
token, a bad token source, an invalid configuration), 1 when the session could not start, 0 after a
drained shutdown.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_PORT = 8765


class ServeUsageError(Exception):
    """Bad usage of ``peon serve``; the command line prints the sentence and exits 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    net = parser.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1; any "
                     "other than a loopback address needs a token)")
    net.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the TCP port (default: {DEFAULT_PORT}; 0 picks "
                     "a free one, see --port-file)")
    net.add_argument("--port-file", metavar="PATH", help="write the port here once the session has started and "
                     "/mcp serves it")
    net.add_argument("--token-file", metavar="PATH", help="read the bearer token clients must send from this file")
    net.add_argument("--token-env", metavar="NAME", default="PEON_SERVE_TOKEN",
                     help="read the bearer token from this environment variable when set (default: PEON_SERVE_TOKEN);"
                     " it is removed from the session's environment")
    net.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                     help="also accept this Host name (repeatable); on a loopback address only loopback names are "
                     "accepted otherwise")
    net.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                     help="accept browser requests from this Origin, e.g. https://app.example.com (repeatable)")
    ops = parser.add_argument_group("operation")
    ops.add_argument("--state-dir", metavar="DIR", help="the session's state directory: grants and the audit log "
                     "(default: under $XDG_STATE_HOME/peon/sessions)")
    ops.add_argument("--session-id", metavar="ID", help="the session id used in the audit log (default: random)")
    ops.add_argument("--log-format", choices=("text", "json"), default="text",
                     help="log lines on stderr (default: text)")
    ops.add_argument("--drain-seconds", type=float, default=5.0, metavar="SECONDS",
                     help="on SIGTERM, how long running calls may finish before they are cancelled (default: 5)")
    ops.add_argument("--keepalive-seconds", type=float, default=15.0, metavar="SECONDS",
                     help="SSE keep-alive comment interval while a call runs (default: 15)")
    ops.add_argument("--max-body-bytes", type=int, metavar="BYTES",
                     help="the largest request body (default: limits.max_input_bytes + 1 MiB)")
    ops.add_argument("--max-connections", type=int, default=128, metavar="N", help="concurrent requests before new "
                     "ones get 503 (default: 128; the probes are always answered)")
    ops.add_argument("--header-timeout-seconds", type=float, default=10.0, metavar="SECONDS",
                     help="how long a connection may take to send a request head (default: 10)")
    ops.add_argument("--body-timeout-seconds", type=float, default=30.0, metavar="SECONDS",
                     help="how long a request body may pause between parts (default: 30)")
    ops.add_argument("--max-pending-connections", type=int, default=64, metavar="N",
                     help="connections waiting for a request head; beyond, the oldest is closed (default: 64)")
    ops.add_argument("--max-sessions", type=int, default=64, metavar="N", help="open 2025-11-25 sessions (default: 64)")
    ops.add_argument("--session-idle-seconds", type=float, default=3600.0, metavar="SECONDS",
                     help="a 2025-11-25 session without a request (and no call running) this long ends, and its "
                          "jobs are stopped (default: 3600)")
    ops.add_argument("--idempotency-window", type=float, default=600.0, metavar="SECONDS",
                     help="how long a call's result answers retries with its peon/idempotencyKey (default: 600)")


def _positive(name: str, value: float | int) -> None:
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


def command(options: argparse.Namespace) -> int:
    try:
        import prometheus_client  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        from peon.client.install_hint import extra_command

        print(f"peon: peon serve needs the serve extra ({exc.name} is not installed): {extra_command('serve')}",
              file=sys.stderr)
        return 2

    import peon
    from peon.cli.common import config_argument
    from peon.client.config import load_config
    from peon.client.config.front_ends import MCP_DEFAULTS, with_front_end_defaults
    from peon.mcp.protocol import ServerIdentity

    from peon.serve.app import ServeOptions
    from peon.serve.main import ServeConfig, StartupError, check_bind, environment_without, read_token, run

    workspace = Path(options.workspace).expanduser()
    if not workspace.is_dir():
        raise ServeUsageError(f"workspace {workspace} is not an existing directory")
    workspace = workspace.resolve()
    try:
        for name in ("drain_seconds", "keepalive_seconds", "idempotency_window", "header_timeout_seconds",
                     "body_timeout_seconds", "session_idle_seconds"):
            value = getattr(options, name)
            if name != "drain_seconds":
                _positive(f"--{name.replace('_', '-')}", value)
            elif value < 0:
                raise ValueError(f"--drain-seconds must not be negative, got {value}")
        for name in ("max_connections", "max_sessions", "max_pending_connections"):
            _positive(f"--{name.replace('_', '-')}", getattr(options, name))
        if not 0 <= options.port <= 65535:
            raise ValueError(f"--port must be 0..65535, got {options.port}")
        token = read_token(options.token_file, options.token_env, os.environ)
        check_bind(options.host, token)
    except (ValueError, StartupError) as exc:
        raise ServeUsageError(str(exc)) from None
    env = environment_without(options.token_env)
    config = config_argument(options.config, options.allow)
    config = with_front_end_defaults(config, MCP_DEFAULTS, workspace=workspace, env=env)
    limits = load_config(config, workspace=workspace, env=env).config.limits  # a bad file is reported now
    max_body = options.max_body_bytes or (limits.max_input_bytes + (1 << 20))
    if max_body <= 0:
        raise ServeUsageError(f"--max-body-bytes must be positive, got {max_body}")

    def open_session(approver: Any) -> Any:
        return peon.Session(workspace, config, approver=approver, env=env, state_dir=options.state_dir,
                            session_id=options.session_id)

    # The instructions name the session's real sandbox once it is up (peon.serve.main), before /mcp answers.
    identity = ServerIdentity(name="peon", version=peon.__version__, title="Peon")
    serve_options = ServeOptions(
        keepalive_seconds=options.keepalive_seconds, max_body_bytes=max_body, max_sessions=options.max_sessions,
        idempotency_window_seconds=options.idempotency_window, max_requests=options.max_connections,
        header_timeout_seconds=options.header_timeout_seconds, body_timeout_seconds=options.body_timeout_seconds,
        max_pending_connections=options.max_pending_connections, session_idle_seconds=options.session_idle_seconds)
    serve_config = ServeConfig(
        host=options.host, port=options.port, token=token, token_env=options.token_env,
        allowed_hosts=options.allowed_host, allowed_origins=options.allowed_origin,
        drain_seconds=options.drain_seconds, max_connections=options.max_connections, port_file=options.port_file,
        log_format=options.log_format, options=serve_options)
    try:
        return run(workspace, open_session, identity, serve_config)
    except StartupError as exc:
        raise ServeUsageError(str(exc)) from None
