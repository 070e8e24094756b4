"""The MCP revisions Peon serves, in two eras, and how a result is shaped for each.

Promises:

* revisions are an enumerated set and features are looked up by position (:func:`at_least`), never by
  comparing date strings;
* :func:`negotiate` answers a handshake with the client's version when it is served, else the newest;
* :func:`respond` shapes a result for the revision of the request it answers: under the stateless
  revision it carries ``resultType`` and the server's identity in ``_meta``, under earlier ones neither.

Two eras are served. The handshake era (2024-11-05 … 2025-11-25) starts with ``initialize``; the
stateless 2026-07-28 revision has no handshake: every request carries its protocol version and the
client's capabilities in ``params._meta``, ``server/discover`` describes the server, results carry
``resultType``, and the server asks the client for input by answering with an ``input_required``
result that the client retries (there are no server-to-client requests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from peon.mcp.jsonrpc import result_response

# Newest first. A handshake answer is the client's version when listed, else the newest.
HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MODERN_VERSIONS = ("2026-07-28",)
LATEST_HANDSHAKE = HANDSHAKE_VERSIONS[0]

Era = Literal["handshake", "modern"]

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"

UNSUPPORTED_PROTOCOL_VERSION = -32022

_ORDER = tuple(reversed(HANDSHAKE_VERSIONS)) + MODERN_VERSIONS


def at_least(version: str, minimum: str) -> bool:
    return version in _ORDER and _ORDER.index(version) >= _ORDER.index(minimum)


def is_modern(version: str) -> bool:
    return version in MODERN_VERSIONS


def negotiate(requested: Any) -> str:
    """The handshake answer: the client's version when we speak it, else our newest."""
    return requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE


@dataclass
class ServerIdentity:
    name: str = "peon"
    version: str = "0"
    title: str = "Peon"
    instructions: str = ""

    def implementation(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "title": self.title}


def respond(request_id: Any, version: str, result: dict[str, Any], identity: ServerIdentity) -> dict[str, Any]:
    """A result response; under the stateless revision it says what it is and who sent it."""
    if is_modern(version):
        result = {"resultType": "complete", **result}
        meta = dict(result.get("_meta") or {})
        meta.setdefault(SERVER_INFO_KEY, identity.implementation())
        result["_meta"] = meta
    return result_response(request_id, result)
