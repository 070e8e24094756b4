"""Whether the egress proxy lets a connection to ``host:port`` through: ``sandbox.network``,
``sandbox.network_deny`` and ``sandbox.network_ask``, decided without I/O.

Promises:

* :meth:`NetworkPolicy.decide` is a pure function of the configured entries, the session's remembered
  answers and the host and port: a ``network_deny`` entry that names the host wins over every allow
  entry (a ``*.domain`` allow included) and over every remembered answer; then an allow entry allows;
  then an answer the approver gave for the session (remembered by ``host:port``) allows or denies; then,
  with ``network_ask = true``, the host is asked about, else it is refused naming the setting;
* :meth:`NetworkPolicy.address_denied` says whether a ``network_deny`` entry names an address a host
  resolved to (so ``network_deny = ["203.0.113.7"]`` holds whatever name leads there); the address
  classes the proxy never reaches unless named (:func:`~peon.approval.network_allowlist.reachable`) are
  checked as before, for hosts allowed by an answer too;
* :func:`attempt_record` is the one shape of a connection attempt in the audit and in a call's
  ``sandbox.network``: host, port, address, decision, bytes each way, duration.

The entries' grammar is :mod:`peon.approval.network_allowlist`'s; this module owns the order of the
decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from peon.approval.network_allowlist import Address, Entry, Host, host_allowed, parse_entry

NetworkAction = Literal["allow", "ask", "deny"]


@dataclass(frozen=True)
class NetworkVerdict:
    action: NetworkAction
    reason: str  # which setting or answer decided, in words a user can find


@dataclass(frozen=True)
class NetworkPolicy:
    allow: tuple[Entry, ...]
    deny: tuple[Entry, ...] = ()
    ask: bool = False

    @classmethod
    def from_settings(cls, allow: Sequence[str], deny: Sequence[str] = (), ask: bool = False) -> NetworkPolicy:
        """From the configured entries (validated by the configuration; ``ValueError`` for one that is not)."""
        return cls(tuple(map(parse_entry, allow)), tuple(map(parse_entry, deny)), ask)

    def decide(self, host: Host, port: int, remembered: Mapping[str, bool] | None = None) -> NetworkVerdict:
        """The verdict for a connection to ``host:port`` (see the module's promises); ``remembered``: the
        approver's session answers by ``host:port`` as :meth:`Host.shown` writes it."""
        shown = host.shown(port)
        if host_allowed(host, port, self.deny):
            return NetworkVerdict("deny", f"{shown} is named by sandbox.network_deny")
        if host_allowed(host, port, self.allow):
            return NetworkVerdict("allow", f"{shown} is named by sandbox.network")
        answer = (remembered or {}).get(shown)
        if answer is not None:
            return NetworkVerdict("allow" if answer else "deny",
                                  f"the approver {'allowed' if answer else 'denied'} {shown} for this session")
        if self.ask:
            return NetworkVerdict("ask", f"{shown} is not in sandbox.network, and sandbox.network_ask = true")
        return NetworkVerdict("deny", f"{shown} is not in sandbox.network")

    def address_denied(self, address: Address, port: int) -> bool:
        """Whether a ``network_deny`` entry names ``address`` itself (for ``port``)."""
        return any(entry.host.address == address and entry.covers_port(port) for entry in self.deny)


def question(shown: str) -> str:
    """What the approver is asked about a host the lists do not name."""
    return f"allow {shown} for this session?"


def attempt_record(host: str, port: int, address: str | None, decision: str, bytes_sent: int, bytes_received: int,
                   duration_seconds: float, reason: str = "") -> dict[str, Any]:
    """One connection attempt as the audit and ``sandbox.network`` show it (``bytes_sent``: from the command)."""
    out: dict[str, Any] = {"host": host, "port": port, "address": address, "decision": decision,
                           "bytes_sent": bytes_sent, "bytes_received": bytes_received,
                           "duration_seconds": round(max(duration_seconds, 0.0), 3)}
    if reason:
        out["reason"] = reason
    return out
