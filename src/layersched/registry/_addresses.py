"""Which network addresses the registry client may reach on an image's behalf, checked where
it connects.

A pod's image names a registry, and that registry names token realms and
redirect targets: hosts chosen by whoever wrote the pod or runs the registry.
Some addresses must never be reached that way (server-side request forgery):

* this machine's own services: loopback (``127/8``, ``::1``) and the
  unspecified address (``0.0.0.0``, which reaches this machine on Linux; the
  rest of ``0/8`` is refused with it);
* link-local neighbours (``169.254/16``, ``fe80::/10``);
* cloud metadata services, which hand out the machine's credentials to
  whoever asks from it (:data:`METADATA_ADDRESSES`; two of them,
  ``fd00:ec2::254`` and ``100.100.100.200``, are in no range above);
* the same addresses written as IPv6: IPv4-mapped (``::ffff:127.0.0.1``) and
  NAT64 (``64:ff9b::/96`` carries the IPv4 address in its last 32 bits,
  RFC 6052), and the local-use NAT64 prefix ``64:ff9b:1::/48`` (RFC 8215),
  whose layout the operator chooses, so what it maps to cannot be read from
  the address: all of it is refused.

:func:`classify` is that table. :class:`AddressGuard` applies it **at the
connection**: the transport resolves a host name once, checks every address
the name resolved to, and connects to one of those addresses (TLS still
verifies, and SNI and ``Host`` still name, the host name), so a DNS answer
that changes between a check and the connect (DNS rebinding) cannot steer the
client: there is no second resolution.

The rules, per connection (the *origin* is the registry the current request
is for, set by the client with :func:`origin`):

* a connection to the origin itself is refused only on a cloud metadata
  address: a registry on loopback is the tests' and a local testbed's, and
  which registries may be contacted at all is the allowlist's business
  (``--allow-registry``);
* a connection to any other host (a token realm, a redirect target) is
  refused on any address :func:`classify` flags, unless the origin resolved
  to that same address when the client connected to it (a registry on
  127.0.0.1 may name a token service on 127.0.0.1).
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import ipaddress
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Cloud metadata services: each answers unauthenticated requests from the machine with
#: the machine's identity and credentials. Any address here is refused even for a registry.
METADATA_ADDRESSES: dict[IPAddress, str] = {
    ipaddress.ip_address("169.254.169.254"): "AWS, GCP, Azure, OpenStack and others",
    ipaddress.ip_address("fd00:ec2::254"): "AWS, over IPv6",
    ipaddress.ip_address("169.254.170.2"): "AWS ECS task credentials",
    ipaddress.ip_address("100.100.100.200"): "Alibaba Cloud",
    ipaddress.ip_address("168.63.129.16"): "Azure WireServer",
}
#: RFC 6052's well-known NAT64 prefix: the IPv4 address is the last 32 bits.
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
#: RFC 8215's local-use NAT64 prefix: where the IPv4 address sits is the operator's choice.
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
#: "This network": 0.0.0.0 reaches this machine on Linux; no host has another 0/8 address.
IPV4_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
#: Origins remembered with the addresses they resolved to (a host name and its addresses
#: each): more than any client talks to between two of its connections' reuse.
MAX_REMEMBERED_ORIGINS = 1024

_ORIGIN: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "layersched_registry_origin", default=None
)


class AddressKind(enum.Enum):
    """Why an address is internal."""

    LOOPBACK = "loopback"
    UNSPECIFIED = "unspecified"
    LINK_LOCAL = "link-local"
    METADATA = "cloud metadata"
    NAT64_LOCAL = "local-use NAT64"


@dataclass(frozen=True, slots=True)
class Internal:
    """An internal address: what it is, and the IPv4 address an IPv6 form carries."""

    kind: AddressKind
    #: The IPv4 address an IPv4-mapped or NAT64 address stands for (None for a plain one).
    carried: ipaddress.IPv4Address | None = None

    def describe(self) -> str:
        """``loopback``, ``cloud metadata via NAT64 (169.254.169.254)``…"""
        if self.carried is None:
            return self.kind.value
        return f"{self.kind.value} ({self.carried})"


class InternalAddressError(Exception):
    """A connection was refused by the address policy (a RegistryError upstream)."""


def _plain(address: IPAddress) -> AddressKind | None:
    if address in METADATA_ADDRESSES:
        return AddressKind.METADATA
    if address.is_loopback:
        return AddressKind.LOOPBACK
    if address.is_unspecified or address in IPV4_THIS_NETWORK:
        return AddressKind.UNSPECIFIED
    if address.is_link_local:
        return AddressKind.LINK_LOCAL
    return None


def classify(address: IPAddress) -> Internal | None:
    """What makes ``address`` internal, or None for an address the client may reach."""
    if isinstance(address, ipaddress.IPv6Address):
        address = ipaddress.IPv6Address(address.packed)  # without a zone (fe80::1%eth0)
        carried = address.ipv4_mapped
        if carried is None and address in NAT64_WELL_KNOWN:
            carried = ipaddress.IPv4Address(address.packed[-4:])
        if carried is not None:
            kind = _plain(carried)
            return None if kind is None else Internal(kind, carried)
        if address in NAT64_LOCAL_USE:
            return Internal(AddressKind.NAT64_LOCAL)
    kind = _plain(address)
    return None if kind is None else Internal(kind)


def describe(addresses: Sequence[tuple[IPAddress, Internal]]) -> str:
    """``127.0.0.1: loopback, fd00:ec2::254: cloud metadata``."""
    return ", ".join(f"{address}: {internal.describe()}" for address, internal in addresses)


def target_refusal(
    target: str, found: Sequence[IPAddress], registry: str | None, allowed: frozenset[IPAddress]
) -> str | None:
    """Why ``target`` (resolved to ``found``) must not be contacted on behalf of
    ``registry`` (which is on the ``allowed`` addresses), or None."""
    refused = [(a, c) for a in found if (c := classify(a)) is not None and a not in allowed]
    if not refused:
        return None
    on_behalf = f"and {registry} is not" if registry else "(and no registry asked for it)"
    return f"{target} is on an internal address ({describe(refused)}) {on_behalf}"


def normalize_host(host: str) -> str:
    """A host as a connection sees it: an IP address in its compressed form, a name
    lowercased and IDNA-encoded (``[::1]`` -> ``::1``; ``Reg.LAN`` -> ``reg.lan``)."""
    bare = host.strip("[]")
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(bare))
    return httpx.URL(f"http://{host}").raw_host.decode("ascii").lower()


def host_of(netloc: str) -> str:
    """``reg.lan:5000`` -> ``reg.lan``; ``[::1]:5000`` -> ``::1`` (normalised)."""
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(netloc.strip("[]")))
    return normalize_host(httpx.URL(f"http://{netloc}").host)


@contextlib.contextmanager
def origin(netloc: str) -> Iterator[None]:
    """Requests in this block are on behalf of registry ``netloc`` (``host[:port]``)."""
    token = _ORIGIN.set(host_of(netloc))
    try:
        yield
    finally:
        _ORIGIN.reset(token)


Resolver = Callable[[str, int], list[IPAddress]]


def resolve(host: str, port: int) -> list[IPAddress]:
    """The addresses ``host`` resolves to, in the resolver's order, each once (an
    :class:`OSError` when it resolves to nothing)."""
    with contextlib.suppress(ValueError):
        return [ipaddress.ip_address(host.strip("[]"))]
    found: list[IPAddress] = []
    for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        with contextlib.suppress(ValueError):
            # a link-local IPv6 answer keeps its zone (fe80::1%eth0): it is needed to connect
            address = ipaddress.ip_address(str(info[4][0]))
            if address not in found:
                found.append(address)
    if not found:
        raise OSError(f"{host} resolved to no IP address")
    return found


class AddressGuard:
    """Checks each connection's addresses against the policy; remembers the origins'."""

    def __init__(self, resolver: Resolver = resolve) -> None:
        self._resolver = resolver
        self._lock = threading.Lock()
        self._origins: OrderedDict[str, frozenset[IPAddress]] = OrderedDict()

    def origin_addresses(self, host: str) -> frozenset[IPAddress]:
        """What ``host`` resolved to when the client last connected to it as an origin."""
        with self._lock:
            return self._origins.get(host, frozenset())

    def _remember(self, host: str, addresses: Sequence[IPAddress]) -> None:
        with self._lock:
            self._origins[host] = frozenset(addresses)
            self._origins.move_to_end(host)
            while len(self._origins) > MAX_REMEMBERED_ORIGINS:
                self._origins.popitem(last=False)

    def addresses(self, host: str, port: int) -> list[IPAddress]:
        """Resolve ``host`` once and return the addresses the client may connect to.

        Raises :class:`InternalAddressError` when the policy refuses any of them
        (a name that resolves to a public and an internal address is refused
        whole: the client would otherwise fall back to the internal one), and
        :class:`OSError` when the name does not resolve.
        """
        name = normalize_host(host)
        found = self._resolver(host, port)
        flagged = [(a, c) for a in found if (c := classify(a)) is not None]
        registry = _ORIGIN.get()
        if registry == name:
            metadata = [(a, c) for a, c in flagged if c.kind is AddressKind.METADATA]
            if metadata:
                raise InternalAddressError(
                    f"the registry {host} is on a cloud metadata address ({describe(metadata)}), "
                    "which no registry is"
                )
            self._remember(name, found)
            return found
        allowed = self.origin_addresses(registry) if registry is not None else frozenset()
        refusal = target_refusal(host, found, registry, allowed)
        if refusal is not None:
            raise InternalAddressError(refusal)
        return found


def internal_target_refusal(registry: str, target: str) -> str | None:
    """Why ``target`` (a hostname) must not be contacted on behalf of ``registry``, or None.

    The early check, before any request and with any transport: a target on an
    internal address (:func:`layersched.registry._addresses.classify`) is
    refused unless the registry itself is on that host or address. The
    client's own transport checks again at the connection, with the addresses
    it then connects to (a name resolved twice may answer differently).
    """
    registry_host = host_of(registry)
    if host_of(target) == registry_host:
        return None
    try:
        found = resolve(target, 0)
    except (OSError, UnicodeError):
        return None  # the connection fails on its own
    try:
        allowed = frozenset(resolve(registry_host, 0))
    except (OSError, UnicodeError):
        allowed = frozenset()
    return target_refusal(target, found, registry, allowed)
