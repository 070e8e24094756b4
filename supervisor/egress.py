"""The session's egress proxy: with ``sandbox.network = [hosts...]`` the only way out of the sandbox.

Promises:

* the supervisor starts it (:func:`start`) only when an allowlist is configured and something confines the
  commands' connections to it: with the session's private network namespace it listens on ``127.0.0.1``
  *inside* that namespace, else (Landlock TCP rules, ABI 4) on the host's ``127.0.0.1``, its port put in
  the sandbox plan as the one TCP port commands may connect to; the commands reach it as
  ``HTTP_PROXY``/``HTTPS_PROXY``, and it connects out from the supervisor's own namespace;
* it speaks HTTP/1.1 proxying: ``CONNECT host:port`` (HTTPS and any TCP) and absolute-form requests
  (``GET http://host:port/path``) for plain HTTP. It decides and connects on the same thing: the host
  must be of the grammar :func:`peon.approval.network_allowlist.parse_host` accepts (an LDH name, a
  dotted IPv4 or a bracketed IPv6 address; anything else, userinfo included, is answered ``400`` naming
  the rule); an entry must name it (:func:`allowed`: ``name`` every port, ``name:port`` one, ``*.domain``
  every name beneath ``domain``, an address only itself), else ``403`` naming the host, port and setting;
  then the proxy resolves the name itself, once, with the resolver it was given (``localhost`` and
  literals are not resolved), keeps only the addresses
  :func:`~peon.approval.network_allowlist.reachable` allows (no loopback, private, link-local,
  mapped, metadata... address unless an entry names that address), answers ``403`` naming the address
  and its class when none is left, and connects to exactly one of the addresses it kept — no second
  resolution, so a name that resolves elsewhere a moment later (DNS rebinding) changes nothing;
* a ``sandbox.network_deny`` entry wins over every allow entry, and with ``sandbox.network_ask = true`` a
  host no list names is put to the approver through :attr:`Proxy.asker` ("allow host:port for this
  session?"; one question per ``host:port`` at a time, the answer ``allow_session`` or ``deny``
  remembered for the session, ``allow_once`` good for that one connection; no asker, a failure or a
  timeout refuses): the order is :class:`peon.approval.network_policy.NetworkPolicy`'s;
* every refusal is kept in :attr:`Proxy.refused` (bounded); :func:`name_refusals` adds those made while
  a call ran to its result's ``sandbox.refused`` (a session's calls share the proxy, so a refusal is
  named in every call running at that moment);
* every connection attempt (a head that parsed) is kept in :attr:`Proxy.attempts` (bounded): host, port,
  the address connected to, the decision, bytes each way and duration, counted as the bytes pass;
  :func:`name_refusals` puts those begun while a call ran in its result's ``sandbox.connections`` (at most
  :data:`ATTEMPTS_SHOWN`, as they stand when the call ends), and each ended attempt is handed to
  :attr:`Proxy.on_attempt` (the audit's ``network`` line, :mod:`peon.supervisor.egress_link`);
* everything is bounded: the request head (16 KiB), the connections at once (64; one more is answered
  ``503`` and closed), the time to send a head (30 s) and to resolve and connect out (30 s together); a
  connection's bytes go only to the one address checked for its first request;
* it runs on one daemon thread with its own event loop and never raises into the supervisor.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import re
import socket
import sys
import threading
import traceback
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from peon.approval.network_policy import NetworkPolicy, attempt_record, question
from peon.approval.network_allowlist import (
    Address,
    Entry,
    Host,
    fixed_addresses,
    host_allowed,
    parse_entry,
    parse_host,
    parse_port,
    reachable,
    split_host_port,
)

HEAD_LIMIT = 16 << 10
MAX_CONNECTIONS = 64
HEAD_SECONDS = 30.0
CONNECT_SECONDS = 30.0
REFUSALS_KEPT = 256
ATTEMPTS_KEPT = 1024
ATTEMPTS_SHOWN = 100
CHUNK = 64 << 10
ASK_SECONDS = 600.0  # the gate's own timeout answers first; this only bounds a lost answer

Resolver = Callable[[str, int], Awaitable[Sequence[Address]]]
# Puts "allow host:port for this session?" to the approver: "allow_once", "allow_session" or "deny", and why.
Asker = Callable[[str, int, str], Awaitable[tuple[str, str]]]

# -- decisions (no I/O) ------------------------------------------------------------------------------


def allowed(host: str, port: int, entries: Sequence[str]) -> bool:
    """Whether an entry of ``entries`` names ``host`` (as a request names it) and ``port``; a host or an
    entry outside the grammar names nothing."""
    try:
        return host_allowed(parse_host(host), port, [parse_entry(entry) for entry in entries])
    except ValueError:
        return False


@dataclass(frozen=True)
class Request:
    method: str
    host: str  # a lower-cased name, or an address's canonical text (IPv6 without brackets)
    port: int
    head: bytes  # what to send to the host first (empty for CONNECT: the tunnel starts clean)
    address: Address | None = None  # set when the request names an address

    @property
    def checked(self) -> Host:
        return Host(self.host, self.address)


class BadRequest(ValueError):
    pass


_CONTROL = re.compile(r"[\x00-\x20\x7f-\xff]")


def _authority(text: str, default_port: int | None) -> tuple[Host, int]:
    """``host[:port]`` of a request target, by the allowlist's grammar (see the module's promises)."""
    if "@" in text:
        raise BadRequest(f"{text[:300]!r} carries userinfo ('@'); a proxied request names only host[:port]")
    try:
        host_text, port_text = split_host_port(text)
        if port_text is not None:
            port = parse_port(port_text)
        elif default_port is not None:
            port = default_port
        else:
            raise ValueError(f"CONNECT needs host:port, got {text[:300]!r}")
        return parse_host(host_text), port
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


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
        host, port = _authority(target, None)
        return Request(method, host.name, port, b"", host.address)
    scheme, sep, remainder = target.partition("://")
    if not sep or scheme.lower() != "http":
        raise BadRequest(f"a proxied request needs an absolute http:// URL, got {target[:200]!r}")
    cut = min((i for i in (remainder.find(c) for c in "/?#") if i >= 0), default=len(remainder))
    host, port = _authority(remainder[:cut], 80)
    path = remainder[cut:].partition("#")[0] or "/"
    if _CONTROL.search(path):
        raise BadRequest(f"the request's path {path[:300]!r} holds a control, space or non-ASCII character")
    if not path.startswith("/"):
        path = "/" + path
    # Origin-form for the host; the client's other headers pass unchanged.
    return Request(method, host.name, port, f"{method} {path} {version}\r\n{rest}".encode("latin-1"), host.address)


def _response(status: str, body: str) -> bytes:
    data = body.encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def refusal(shown: str, reason: str = "") -> bytes:
    """The answer to a request for ``shown`` (``host:port``), refused for ``reason`` (default: no entry names it)."""
    why = reason or f"{shown} is not in sandbox.network (the session's egress allowlist)"
    return _response("403 Forbidden", f"peon: {why}; the connection to {shown} was refused\n")


def address_refusal(shown: str, refused: Sequence[tuple[Address, str]]) -> bytes:
    """The answer to a request for ``shown``, named by an entry, whose addresses are all special."""
    classes = "; ".join(f"{address} ({reason})" for address, reason in refused)
    return _response("403 Forbidden", f"peon: {shown} resolves only to addresses sandbox.network does not name: "
                                      f"{classes}; such an address is reached only when an entry names it "
                                      "literally; the connection was refused\n")


async def system_resolver(name: str, port: int) -> list[Address]:
    """The addresses the supervisor's resolver gives ``name`` (what the proxy checks and connects to)."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM,
                                                         proto=socket.IPPROTO_TCP)
    return [ipaddress.ip_address(info[4][0]) for info in infos]


# -- the proxy -----------------------------------------------------------------------------------------


@dataclass
class Attempt:
    """One connection attempt, updated by the proxy's loop as it goes (read from other threads as a whole)."""

    host: str
    port: int
    started_at: float  # time.monotonic()
    address: str | None = None
    decision: str = "pending"  # allowed, asked-allowed, denied, asked-denied, refused-address, failed
    reason: str = ""
    bytes_sent: int = 0  # from the command
    bytes_received: int = 0  # to the command
    ended_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        end = self.ended_at if self.ended_at is not None else time.monotonic()
        return attempt_record(self.host, self.port, self.address, self.decision, self.bytes_sent,
                              self.bytes_received, end - self.started_at, self.reason)


class Proxy:
    def __init__(self, listener: socket.socket, entries: tuple[str, ...], resolve: Resolver = system_resolver, *,
                 deny: tuple[str, ...] = (), ask: bool = False, asker: Asker | None = None):
        self.listener, self.entries = listener, entries
        self.rules: tuple[Entry, ...] = tuple(parse_entry(entry) for entry in entries)  # validated by the config
        self.policy = NetworkPolicy(self.rules, tuple(parse_entry(entry) for entry in deny), ask)
        self.resolve = resolve
        self.asker = asker  # set by the supervisor once its approval gate exists
        self.on_attempt: Callable[[dict[str, Any]], None] | None = None  # each attempt as it ends (the audit)
        self.remembered: dict[str, bool] = {}  # the approver's session answers, by host:port
        self._asking: dict[str, asyncio.Future[tuple[str, str]]] = {}  # one question per host:port at a time
        host, port = listener.getsockname()[:2]
        self.address = f"http://{host}:{port}"
        self.refused: collections.deque[str] = collections.deque(maxlen=REFUSALS_KEPT)
        self.refused_at: collections.deque[tuple[float, str]] = collections.deque(maxlen=REFUSALS_KEPT)
        self.attempts: collections.deque[Attempt] = collections.deque(maxlen=ATTEMPTS_KEPT)
        self._active = 0  # connections being carried (the proxy's one event loop counts them)

    def attempts_since(self, moment: float) -> list[dict[str, Any]]:
        """The connection attempts begun since ``moment`` (``time.monotonic()``), oldest first, as they stand."""
        return [attempt.to_dict() for attempt in list(self.attempts) if attempt.started_at >= moment]

    def _refuse(self, shown: str) -> None:
        self.refused.append(shown)
        self.refused_at.append((time.monotonic(), shown))

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
            writer.write(_response("400 Bad Request", f"peon: {exc}\n"))
            await writer.drain()
            return
        host = request.checked
        shown = host.shown(request.port)
        attempt = Attempt(host.name, request.port, time.monotonic())
        self.attempts.append(attempt)
        try:
            await self._carry(request, host, shown, attempt, reader, writer)
        finally:
            attempt.ended_at = time.monotonic()
            if self.on_attempt is not None:
                try:
                    self.on_attempt(attempt.to_dict())
                except Exception:  # the audit's trouble must not break a connection
                    traceback.print_exc(file=sys.stderr)

    async def _carry(self, request: Request, host: Host, shown: str, attempt: Attempt,
                     reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        verdict = self.policy.decide(host, request.port, self.remembered)
        attempt.reason = verdict.reason
        asked = verdict.action == "ask"
        if asked:
            answer, why = await self._ask(shown, host.name, request.port)
            attempt.reason = f"{verdict.reason}; the approver answered {answer}" + (f": {why}" if why else "")
            allowed_now = answer in ("allow_once", "allow_session")
        else:
            allowed_now = verdict.action == "allow"
        if not allowed_now:
            attempt.decision = "asked-denied" if asked else "denied"
            self._refuse(shown)
            writer.write(refusal(shown, attempt.reason))
            await writer.drain()
            return
        try:
            async with asyncio.timeout(CONNECT_SECONDS):
                up_reader, up_writer, address = await self._connect(host, request.port, shown)
        except _Refused as refused:
            attempt.decision = "refused-address"
            attempt.reason = "; ".join(f"{address} ({reason})" for address, reason in refused.addresses)
            self._refuse(shown)
            writer.write(address_refusal(shown, refused.addresses))
            await writer.drain()
            return
        except (OSError, TimeoutError, UnicodeError) as exc:
            attempt.decision, attempt.reason = "failed", f"cannot be reached: {exc or 'timed out'}"
            writer.write(_response("502 Bad Gateway", f"peon: {shown} cannot be reached: {exc or 'timed out'}\n"))
            await writer.drain()
            return
        attempt.address, attempt.decision = str(address), "asked-allowed" if asked else "allowed"
        try:
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await writer.drain()
            else:
                up_writer.write(request.head)
                attempt.bytes_sent += len(request.head)
            async with asyncio.TaskGroup() as group:
                group.create_task(_pump(reader, up_writer, attempt, "bytes_sent"))
                group.create_task(_pump(up_reader, writer, attempt, "bytes_received"))
        finally:
            up_writer.close()

    async def _ask(self, shown: str, name: str, port: int) -> tuple[str, str]:
        """The approver's answer about ``shown``: one question per host:port at a time, session answers
        remembered; no asker, a failure or no answer in time is a denial."""
        if self.asker is None:
            return "deny", "this session has no approver for the network"
        pending = self._asking.get(shown)
        if pending is None:
            pending = asyncio.ensure_future(self._put(shown, name, port))
            self._asking[shown] = pending
            pending.add_done_callback(lambda _: self._asking.pop(shown, None))
        return await asyncio.shield(pending)

    async def _put(self, shown: str, name: str, port: int) -> tuple[str, str]:
        assert self.asker is not None
        try:
            async with asyncio.timeout(ASK_SECONDS):
                answer, why = await self.asker(name, port, question(shown))
        except Exception as exc:  # the asker failed: fail closed
            return "deny", f"the question could not be put ({exc or type(exc).__name__})"
        if answer == "allow_session":
            self.remembered[shown] = True
        elif answer != "allow_once":
            answer = "deny"
            self.remembered[shown] = False
        return answer, why

    async def _connect(self, host: Host, port: int,
                       shown: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Address]:
        """A connection to one of the addresses ``host`` resolves to that the allowlist lets through:
        resolved once, here, and connected to by address (no resolution in between)."""
        addresses = fixed_addresses(host)
        if addresses is None:
            addresses = tuple(await self.resolve(host.name, port))
        kept, refused = reachable(addresses, port, self.rules)
        refused += [(address, "named by sandbox.network_deny") for address in kept
                    if self.policy.address_denied(address, port)]
        kept = [address for address in kept if not self.policy.address_denied(address, port)]
        if not kept:
            raise _Refused(refused)
        loop = asyncio.get_running_loop()
        failure: OSError = OSError(f"{shown} resolves to no address")
        for address in kept:
            sock = socket.socket(socket.AF_INET6 if address.version == 6 else socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, (str(address), port))
                return (*await asyncio.open_connection(sock=sock, limit=CHUNK), address)
            except OSError as exc:
                sock.close()
                failure = exc
            except BaseException:
                sock.close()
                raise
        raise failure


class _Refused(Exception):
    def __init__(self, addresses: list[tuple[Address, str]]):
        super().__init__()
        self.addresses = addresses


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, attempt: Attempt, counter: str) -> None:
    try:
        while data := await source.read(CHUNK):
            setattr(attempt, counter, getattr(attempt, counter) + len(data))
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
    """``reply`` with the hosts refused since ``started_at`` in its value's ``sandbox.refused`` and the
    connection attempts begun since then in ``sandbox.connections``."""
    value = reply.get("value")
    if _running is None or not isinstance(value, dict) or not isinstance(value.get("sandbox"), dict):
        return reply
    box = dict(value["sandbox"])
    refused = list(dict.fromkeys(_running.refused_since(started_at)))
    if refused:
        box["refused"] = refused
    attempts = _running.attempts_since(started_at)
    if attempts:
        box["connections"] = attempts[:ATTEMPTS_SHOWN]
        if len(attempts) > ATTEMPTS_SHOWN:
            box["connections_not_shown"] = len(attempts) - ATTEMPTS_SHOWN
    if not refused and not attempts:
        return reply
    return {**reply, "value": {**value, "sandbox": box}}


def running() -> Proxy | None:
    """The session's proxy, once :func:`start` started it."""
    return _running


def attempts_since(started_at: float) -> list[dict[str, Any]]:
    """The session proxy's connection attempts begun since ``started_at`` (for the audit); [] without a proxy."""
    return [] if _running is None else _running.attempts_since(started_at)


def start(status: dict[str, Any]) -> Proxy | None:
    """Start the proxy for a session status with an ``egress`` section; sets ``status["egress"]["proxy"]``.
    None when there is nothing to start."""
    egress = status.get("egress")
    if not isinstance(egress, dict):
        return None
    if egress.get("netns"):
        from peon.workers.sandbox import namespaces  # the supervisor's one use of the worker side's namespace helpers

        listener = namespaces.listen_in(egress["netns"], egress["netns_inode"])
    else:  # no namespace: the host's loopback, and Landlock lets commands connect to this one port only
        listener = socket.create_server(("127.0.0.1", 0))
        plan = status.get("plan")
        if isinstance(plan, dict):
            plan["proxy_port"] = listener.getsockname()[1]
    listener.setblocking(False)
    proxy = Proxy(listener, tuple(egress["allow"]), deny=tuple(egress.get("deny") or ()), ask=bool(egress.get("ask")))
    threading.Thread(target=asyncio.run, args=(proxy.serve(),), name="peon-egress", daemon=True).start()
    egress["proxy"] = proxy.address
    global _running
    _running = proxy
    return proxy
