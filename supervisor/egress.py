"""The session's egress proxy: with ``sandbox.network = [hosts...]`` the only way out of the sandbox.

Promises:

* the supervisor starts it (:func:`start`) only when an allowlist is configured and the session has its
  private network namespace; it listens on ``127.0.0.1`` *inside* that namespace (the commands reach it
  as ``HTTP_PROXY``/``HTTPS_PROXY``) and connects out from the supervisor's own namespace;
* it speaks HTTP/1.1 proxying: ``CONNECT host:port`` (HTTPS and any TCP) and absolute-form requests
  (``GET http://host:port/path``) for plain HTTP. A host is let through only when :func:`allowed` says
  so — by the host name the client asked for (an entry ``name`` allows every port, ``name:port`` one
  port, ``*.domain`` every name beneath ``domain``); everything else is answered ``403`` with a body
  that names the host and port and the setting, and the refusal is kept in :attr:`Proxy.refused`
  (bounded); :func:`name_refusals` adds those made while a call ran to its result's ``sandbox.refused``
  (a session's calls share the proxy, so a refusal is named in every call running at that moment);
* everything is bounded: the request head (16 KiB), the connections at once (64; one more is answered
  ``503`` and closed), the time to send a head (30 s) and to connect out (30 s); a connection's bytes
  go only to the one host checked for its first request;
* it runs on one daemon thread with its own event loop and never raises into the supervisor.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

HEAD_LIMIT = 16 << 10
MAX_CONNECTIONS = 64
HEAD_SECONDS = 30.0
CONNECT_SECONDS = 30.0
REFUSALS_KEPT = 256
CHUNK = 64 << 10

# -- decisions (no I/O) ------------------------------------------------------------------------------


def allowed(host: str, port: int, entries: tuple[str, ...] | list[str]) -> bool:
    host = host.lower().rstrip(".")
    for entry in entries:
        name, _, wanted = entry.lower().partition(":")
        if wanted and int(wanted) != port:
            continue
        if name.startswith("*."):
            if host.endswith(name[1:]) and host != name[2:]:
                return True
        elif host == name:
            return True
    return False


@dataclass(frozen=True)
class Request:
    method: str
    host: str
    port: int
    head: bytes  # what to send to the host first (empty for CONNECT: the tunnel starts clean)


class BadRequest(ValueError):
    pass


def parse_head(head: bytes) -> Request:
    """The request a proxy client sent (its head, up to the blank line included)."""
    try:
        text = head.decode("latin-1")
        line, _, rest = text.partition("\r\n")
        method, target, version = line.split(" ")
    except ValueError:
        raise BadRequest("the request line is not 'METHOD target HTTP/1.x'") from None
    if not version.startswith("HTTP/1."):
        raise BadRequest(f"unsupported protocol {version!r}")
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BadRequest(f"CONNECT needs host:port, got {target!r}")
        return Request(method, host, int(port), b"")
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise BadRequest(f"a proxied request needs an absolute http:// URL, got {target[:200]!r}")
    try:
        number = url.port or 80
    except ValueError:
        raise BadRequest(f"bad port in {target[:200]!r}") from None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    # Origin-form for the host; the client's other headers pass unchanged.
    return Request(method, url.hostname, number, f"{method} {path} {version}\r\n{rest}".encode("latin-1"))


def refusal(host: str, port: int) -> bytes:
    body = (f"peon: {host}:{port} is not in sandbox.network (the session's egress allowlist); "
            "the connection was refused\n").encode()
    return (b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


# -- the proxy -----------------------------------------------------------------------------------------


class Proxy:
    def __init__(self, listener: socket.socket, entries: tuple[str, ...]):
        self.listener, self.entries = listener, entries
        host, port = listener.getsockname()[:2]
        self.address = f"http://{host}:{port}"
        self.refused: collections.deque[str] = collections.deque(maxlen=REFUSALS_KEPT)
        self.refused_at: collections.deque[tuple[float, str]] = collections.deque(maxlen=REFUSALS_KEPT)
        self._active = 0  # connections being carried (the proxy's one event loop counts them)

    def refused_since(self, moment: float) -> list[str]:
        """The hosts refused since ``moment`` (``time.monotonic()``), oldest first."""
        return [host for at, host in list(self.refused_at) if at >= moment]

    async def serve(self) -> None:
        server = await asyncio.start_server(self._client, sock=self.listener, limit=HEAD_LIMIT)
        async with server:
            await server.serve_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self._active >= MAX_CONNECTIONS:  # refused at once: waiting would hold a descriptor each
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n"
                             + f"peon: the egress proxy already carries {MAX_CONNECTIONS} connections\n".encode())
                return
            self._active += 1
            try:
                await self._handle(reader, writer)
            finally:
                self._active -= 1
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_SECONDS)
            request = parse_head(head)
        except BadRequest as exc:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n" + f"peon: {exc}\n".encode())
            await writer.drain()
            return
        if not allowed(request.host, request.port, self.entries):
            self.refused.append(f"{request.host}:{request.port}")
            self.refused_at.append((time.monotonic(), f"{request.host}:{request.port}"))
            writer.write(refusal(request.host, request.port))
            await writer.drain()
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(request.host, request.port, limit=CHUNK), CONNECT_SECONDS)
        except (OSError, TimeoutError) as exc:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n"
                         + f"peon: {request.host}:{request.port} cannot be reached: {exc}\n".encode())
            await writer.drain()
            return
        try:
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await writer.drain()
            else:
                up_writer.write(request.head)
            async with asyncio.TaskGroup() as group:
                group.create_task(_pump(reader, up_writer))
                group.create_task(_pump(up_reader, writer))
        finally:
            up_writer.close()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if sink.can_write_eof():
                sink.write_eof()


_running: Proxy | None = None  # the session's proxy (one session per supervisor process)


def name_refusals(reply: dict[str, Any], started_at: float) -> dict[str, Any]:
    """``reply`` with the hosts refused since ``started_at`` in its value's ``sandbox.refused``."""
    value = reply.get("value")
    if _running is None or not isinstance(value, dict) or not isinstance(value.get("sandbox"), dict):
        return reply
    box = value["sandbox"]
    refused = list(dict.fromkeys(_running.refused_since(started_at)))
    if not refused:
        return reply
    return {**reply, "value": {**value, "sandbox": {**box, "refused": refused}}}


def start(status: dict[str, Any]) -> Proxy | None:
    """Start the proxy for a session status with an ``egress`` section; sets ``status["egress"]["proxy"]``.
    None when there is nothing to start."""
    egress = status.get("egress")
    if not isinstance(egress, dict):
        return None
    from peon.workers.sandbox import namespaces  # the supervisor's one use of the worker side's namespace helpers

    listener = namespaces.listen_in(egress["netns"], egress["netns_inode"])
    listener.setblocking(False)
    proxy = Proxy(listener, tuple(egress["allow"]))
    threading.Thread(target=asyncio.run, args=(proxy.serve(),), name="peon-egress", daemon=True).start()
    egress["proxy"] = proxy.address
    global _running
    _running = proxy
    return proxy
