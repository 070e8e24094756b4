"""What the egress allowlist (``sandbox.network = [hosts...]``) lets through: host names, entries and
addresses, decided without I/O.

Promises:

* :func:`parse_host` accepts only a host name of the LDH grammar — letters, digits and hyphens in
  dot-separated labels of 1 to 63 characters that neither start nor end with a hyphen, 253 characters
  in all, one trailing dot allowed, the last label not all digits and the whole not a number
  ``inet_aton`` would read as an IPv4 address (``127.1``, ``0x7f000001``) — a dotted-decimal IPv4
  address, or an IPv6 address in brackets without a zone. Anything else (a NUL, ``%``, ``@``, a space,
  ``_``, a colon outside brackets...) raises :class:`HostRefused` whose message names the rule
  (:data:`HOST_RULE`). A name comes back lower-cased without its trailing dot, an address in its
  canonical text: what is checked is exactly what is connected to.
* :func:`parse_entry` reads an allowlist entry with the same grammar — ``name``, ``*.domain``, an IPv4
  address or ``[IPv6]``, each with an optional ``:port`` (1 to 65535) — or raises ``ValueError`` naming
  the rule; the configuration refuses an entry it cannot read, and the proxy reads the same entries.
* :func:`host_allowed` says whether an entry names a host and port: a name by an equal name entry or a
  ``*.domain`` entry it is beneath (never ``domain`` itself), an address only by an entry naming that
  same address (a wildcard never matches an address, a name never matches an address literal).
* :func:`special_reason` names the class of an address the proxy does not connect to unless an entry
  names it: loopback, private (RFC 1918), unique local (ULA), link-local, IPv4-mapped or
  IPv4-compatible IPv6, an IPv6 address carrying an IPv4 address that is itself special (6to4, Teredo,
  NAT64), unspecified, multicast, a cloud's metadata service (:data:`METADATA_ADDRESSES`), or any other
  address the IANA registries say is not global (the stdlib ``ipaddress`` decides the classes); None for
  a global unicast address. :func:`reachable` splits the addresses a host resolved to into those the
  proxy may connect to — global ones, and special ones an entry for that port names literally — and
  the others with their class. ``localhost`` is never resolved: an entry ``localhost`` names the
  loopback addresses :data:`LOCALHOST_ADDRESSES`, which the host ``localhost`` stands for
  (:func:`fixed_addresses`).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_NAME_CHARS = 253
HOST_RULE = ("a host is a name of letters, digits and hyphens in dot-separated labels of 1 to 63 characters "
             "(253 in all; no label starts or ends with a hyphen; the last is not all digits), an IPv4 address "
             "a.b.c.d, or an IPv6 address in brackets without a zone")
ENTRY_RULE = "an entry is a host name, *.domain, an IPv4 address or [IPv6 address], each with an optional :port"

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"  # decimal, no leading zero
_DOTTED_QUAD = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_IPV6_CHARS = re.compile(r"[0-9A-Fa-f:.]+")
_PORT = re.compile(r"[0-9]{1,5}")

LOCALHOST = "localhost"
LOCALHOST_ADDRESSES: tuple[Address, ...] = (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))

# The instance-metadata and platform services of the clouds: they hand out credentials to whatever asks
# from the machine. Most sit in link-local or unique-local space (refused as such); Azure's WireServer
# is a global address, so it is named here.
METADATA_ADDRESSES: frozenset[Address] = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, Azure, GCP, Oracle, OpenStack, DigitalOcean, Hetzner: instance metadata
    "169.254.169.253",  # AWS: the VPC's DNS resolver
    "169.254.170.2",  # AWS ECS: task metadata and credentials
    "169.254.170.23",  # AWS EKS: pod identity credentials
    "169.254.0.23",  # Tencent Cloud: instance metadata
    "100.100.100.200",  # Alibaba Cloud: instance metadata
    "192.0.0.192",  # Oracle Cloud: instance metadata (legacy)
    "168.63.129.16",  # Azure: WireServer (a global address)
    "fd00:ec2::254",  # AWS: instance metadata over IPv6
    "fd00:ec2::253",  # AWS: the VPC's DNS resolver over IPv6
    "fd00:ec2::23",  # AWS EKS: pod identity credentials over IPv6
))

_RFC1918 = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_ULA = ipaddress.IPv6Network("fc00::/7")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = tuple(ipaddress.IPv6Network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48"))


class HostRefused(ValueError):
    """A host outside :data:`HOST_RULE`; the message names the host and the rule."""


@dataclass(frozen=True)
class Host:
    """A host as checked and connected to: ``name`` lower-cased without a trailing dot, or an address
    (then ``name`` is its canonical text)."""

    name: str
    address: Address | None = None

    def shown(self, port: int) -> str:
        """``host:port`` as a person reads it (an IPv6 address in brackets)."""
        if isinstance(self.address, ipaddress.IPv6Address):
            return f"[{self.name}]:{port}"
        return f"{self.name}:{port}"


def _refused(text: str, why: str) -> HostRefused:
    return HostRefused(f"host {text[:300]!r} {why}: {HOST_RULE}")


def parse_host(text: str) -> Host:
    """The host ``text`` names (see the module's promises), or :class:`HostRefused`."""
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1]
        if not _IPV6_CHARS.fullmatch(inner):
            raise _refused(text, "is not an IPv6 address in brackets (no zone, no other characters)")
        try:
            v6 = ipaddress.IPv6Address(inner)
        except ValueError:
            raise _refused(text, "is not an IPv6 address") from None
        return Host(v6.compressed, v6)
    if _DOTTED_QUAD.fullmatch(text):
        v4 = ipaddress.IPv4Address(text)
        return Host(str(v4), v4)
    if not text.isascii():
        raise _refused(text, "has characters other than letters, digits, hyphens and dots")
    name = text[:-1] if text.endswith(".") else text
    if not name or len(name) > MAX_NAME_CHARS:
        raise _refused(text, f"must have 1 to {MAX_NAME_CHARS} characters")
    name = name.lower()
    labels = name.split(".")
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise _refused(text, f"has a label {label[:80]!r} outside the grammar")
    if labels[-1].isdigit():
        raise _refused(text, "ends in an all-digit label (write an IPv4 address as four decimal numbers)")
    try:  # hex and octal numbers, fewer than four parts: the resolver would read them as an address
        socket.inet_aton(name)
    except OSError:
        return Host(name)
    raise _refused(text, "is a number the resolver would read as an IPv4 address (write it as a.b.c.d)")


@dataclass(frozen=True)
class Entry:
    """One allowlist entry: a name (``wildcard``: every name beneath it), or an address; ``port`` None
    for every port."""

    host: Host
    wildcard: bool = False
    port: int | None = None

    def covers_port(self, port: int) -> bool:
        return self.port is None or self.port == port


def parse_port(text: str) -> int:
    if not _PORT.fullmatch(text) or not 0 < int(text) < 65536:
        raise ValueError(f"port {text[:20]!r} is not a number from 1 to 65535")
    return int(text)


def split_host_port(text: str) -> tuple[str, str | None]:
    """``host[:port]`` or ``[v6][:port]`` into its host text and port text (None without one)."""
    if text.startswith("["):
        host, bracket, rest = text.partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{text[:300]!r} is not [IPv6 address] or [IPv6 address]:port")
        return host + "]", (rest[1:] if rest else None)
    host, colon, port = text.rpartition(":")  # a colon inside the host text is the host's to refuse
    return (host, port) if colon else (text, None)


def parse_entry(text: str) -> Entry:
    """An allowlist entry (see the module's promises), or ``ValueError`` naming the rule."""
    try:
        host_text, port_text = split_host_port(text)
        port = None if port_text is None else parse_port(port_text)
        wildcard = host_text.startswith("*.")
        host = parse_host(host_text[2:] if wildcard else host_text)
    except ValueError as exc:
        raise ValueError(f"{text[:300]!r} is not an allowlist entry ({ENTRY_RULE}): {exc}") from None
    if wildcard and host.address is not None:
        raise ValueError(f"{text[:300]!r} is not an allowlist entry: '*.' goes before a domain name, not an address")
    return Entry(host, wildcard, port)


def host_allowed(host: Host, port: int, entries: Iterable[Entry]) -> bool:
    """Whether an entry names ``host`` and ``port`` (see the module's promises)."""
    for entry in entries:
        if not entry.covers_port(port):
            continue
        if host.address is not None or entry.host.address is not None:
            if host.address is not None and host.address == entry.host.address:
                return True
        elif entry.wildcard:
            if host.name.endswith("." + entry.host.name):
                return True
        elif host.name == entry.host.name:
            return True
    return False


def fixed_addresses(host: Host) -> tuple[Address, ...] | None:
    """The addresses a host stands for without resolving it: a literal's own, ``localhost``'s loopback;
    None for a name to resolve."""
    if host.address is not None:
        return (host.address,)
    if host.name == LOCALHOST:
        return LOCALHOST_ADDRESSES
    return None


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries to a relay or translator (6to4, Teredo, NAT64)."""
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def special_reason(address: Address) -> str | None:
    """Why the proxy does not connect to ``address`` unless an entry names it, or None (see the module's
    promises)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        # First: Python 3.13's is_loopback, is_private... answer for the IPv4 address inside, 3.11's do not.
        return "an IPv4-mapped IPv6 address"
    if address in METADATA_ADDRESSES:
        return "a cloud metadata service"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_multicast:
        return "multicast"
    if address.is_link_local:
        return "link-local"
    if isinstance(address, ipaddress.IPv6Address):
        if address in _IPV4_COMPATIBLE:
            return "an IPv4-compatible IPv6 address"
        if address in _ULA:
            return "unique local (ULA)"
        embedded = _embedded_v4(address)
        if embedded is not None and special_reason(embedded) is not None:
            return f"an IPv6 address carrying the special IPv4 address {embedded}"
    elif any(address in net for net in _RFC1918):
        return "private (RFC 1918)"
    if not address.is_global:
        return "not a global address (special-purpose)"
    return None


def names_literally(entry: Entry, address: Address, port: int) -> bool:
    """Whether ``entry`` names ``address`` itself for ``port`` (``localhost`` names the loopback)."""
    if not entry.covers_port(port) or entry.wildcard:
        return False
    if entry.host.address is not None:
        return entry.host.address == address
    return entry.host.name == LOCALHOST and address in LOCALHOST_ADDRESSES


def reachable(addresses: Iterable[Address], port: int,
              entries: Sequence[Entry]) -> tuple[list[Address], list[tuple[Address, str]]]:
    """The addresses the proxy may connect to, in order without repeats, and the others with their class."""
    kept: list[Address] = []
    refused: list[tuple[Address, str]] = []
    for address in dict.fromkeys(addresses):
        reason = special_reason(address)
        if reason is None or any(names_literally(entry, address, port) for entry in entries):
            kept.append(address)
        else:
            refused.append((address, reason))
    return kept, refused
