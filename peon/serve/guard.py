"""Who may talk to ``peon serve``, sans I/O: the bind policy, the bearer token, ``Host`` and ``Origin``.

Promises:

* :func:`bind_problem` refuses a non-loopback address without a token (an unauthenticated tool daemon on
  a network is a remote shell); loopback means ``127.0.0.0/8``, ``::1`` or ``localhost``;
* :meth:`Guard.check` decides every request from its headers alone, in a fixed order — ``Host``, then
  ``Origin``, then the token — and returns either ``None`` or a :class:`Refusal` with the HTTP status
  and a sentence naming the rule and the value (``421``/``403``/``401``); values from the request are
  shown escaped and bounded;
* the token is compared in constant time and never appears in a refusal or a log line; it is accepted
  as ``Authorization: Bearer <token>`` or, for proxies that consume ``Authorization`` themselves (the
  agent-sandbox router strips it), as ``X-Peon-Token: <token>``.

DNS rebinding: a web page can make a browser send requests to ``127.0.0.1`` under the attacker's host
name. On a loopback address only loopback host names are accepted in ``Host``, and a browser's
``Origin`` must be a loopback origin (or one allowed explicitly); a request without ``Origin`` (any
non-browser client) is not a browser request and passes that check.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from peon.core.text import shorten

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
TOKEN_HEADER = "x-peon-token"
_SHOWN = 120


def shown(value: str) -> str:
    """A header value as it may appear in an error sentence: escaped, bounded."""
    return repr(shorten(value, _SHOWN + 1, "…"))


def is_loopback_host(host: str) -> bool:
    """Whether a host name or address (no port) is this machine's loopback."""
    name = host.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def bind_problem(host: str, has_token: bool) -> str | None:
    """Why ``host`` may not be bound, or ``None``."""
    if is_loopback_host(host) or has_token:
        return None
    return (f"refusing to listen on {host}, which is not a loopback address, without a bearer token: anyone who "
            "can reach it could run commands; give --token-file or set the token's environment variable "
            "(see --token-env), or listen on 127.0.0.1")


def split_host_header(value: str) -> tuple[str, int | None] | None:
    """``Host`` → (name, port); ``None`` when it is not a host[:port]."""
    value = value.strip()
    if not value or any(c in value for c in "/@?#\\ \t"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1:]
    else:
        name, _, port_text = value.partition(":")
        rest = f":{port_text}" if _ else ""
    if not rest:
        return name.lower(), None
    if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
        return None
    return name.lower(), int(rest[1:])


def origin_host(origin: str) -> str | None:
    """The host of an ``Origin`` value (``scheme://host[:port]``), or ``None`` when it is not one."""
    try:
        parts = urlsplit(origin.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            return None
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return None
    return parts.hostname


@dataclass(frozen=True)
class Refusal:
    status: int  # 401, 403 or 421
    message: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Guard:
    token: str | None
    loopback: bool  # the server listens on a loopback address only
    allowed_hosts: frozenset[str] = frozenset()  # extra Host names (any port); empty + not loopback = any
    allowed_origins: frozenset[str] = frozenset()  # exact origins, e.g. "https://agents.example.com"

    @classmethod
    def build(cls, token: str | None, bind_host: str, hosts: Iterable[str] = (), origins: Iterable[str] = ()) -> Guard:
        return cls(token or None, is_loopback_host(bind_host),
                   frozenset(h.strip().lower() for h in hosts if h.strip()),
                   frozenset(o.strip().rstrip("/").lower() for o in origins if o.strip()))

    def check(self, host: str | None, origin: str | None, authorization: str | None, *,
              needs_token: bool = True, peon_token: str | None = None) -> Refusal | None:
        problem = self.check_host(host) or self.check_origin(origin)
        if problem is None and needs_token:
            problem = self.check_token(authorization, peon_token)
        return problem

    def check_host(self, host: str | None) -> Refusal | None:
        if host is None:
            return Refusal(421, "the request has no Host header")
        parsed = split_host_header(host)
        if parsed is None:
            return Refusal(421, f"the Host header {shown(host)} is not a host name with an optional port")
        name, _port = parsed
        if name in self.allowed_hosts:
            return None
        if self.loopback:
            if is_loopback_host(name):
                return None
            return Refusal(421, f"the Host header {shown(host)} is not a loopback name; this server listens on "
                                "a loopback address and accepts only localhost, 127.0.0.1 or [::1] "
                                "(DNS rebinding protection; allow more with --allowed-host)")
        if self.allowed_hosts:
            return Refusal(421, f"the Host header {shown(host)} is not one of the allowed hosts (--allowed-host)")
        return None

    def check_origin(self, origin: str | None) -> Refusal | None:
        if origin is None:
            return None  # not a browser request
        normalized = origin.strip().rstrip("/").lower()
        if normalized in self.allowed_origins:
            return None
        host = origin_host(origin)
        if host is not None and is_loopback_host(host) and self.loopback:
            return None
        return Refusal(403, f"the Origin {shown(origin)} is not allowed: a browser page from another site may not "
                            "use this server (allow it with --allowed-origin)")

    def check_token(self, authorization: str | None, peon_token: str | None = None) -> Refusal | None:
        if self.token is None:
            return None
        challenge = {"WWW-Authenticate": 'Bearer realm="peon"'}
        if peon_token is not None:
            if self._matches(peon_token):
                return None
            return Refusal(401, "the X-Peon-Token header is not a valid token", challenge)
        if not authorization:
            return Refusal(401, "this server needs a bearer token: send Authorization: Bearer <token>", challenge)
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            return Refusal(401, "the Authorization header is not a bearer token (Authorization: Bearer <token>)",
                           challenge)
        if not self._matches(credentials):
            return Refusal(401, "the bearer token is not valid", {"WWW-Authenticate": 'Bearer realm="peon", '
                                                                    'error="invalid_token"'})
        return None

    def _matches(self, presented: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(presented.strip().encode("utf-8", "surrogateescape"), self.token.encode("utf-8"))
