"""Which registries the client contacts, and how: a reference domain's API host (Docker
Hub's is another host), plain HTTP for insecure and loopback registries, the allowlist
(``--allow-registry``, an entry without a port allowing the default port only), and the
token services on another host than their registry known to be genuine.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Mapping, Sequence

import httpx

from layersched.core.reference import DEFAULT_DOMAIN

# Docker Hub's API lives on another host than its reference domain.
DOCKER_HUB_API_HOST = "registry-1.docker.io"

# Registries reached over plain HTTP without --insecure-registry: this machine's own.
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})

# Token services on another host than their registry, known to be genuine. Anything else
# must be allowed by the operator (token_hosts, --registry-token-host).
BUILTIN_TOKEN_HOSTS: Mapping[str, tuple[str, ...]] = {
    DEFAULT_DOMAIN: ("auth.docker.io",),
    "registry.gitlab.com": ("gitlab.com",),
}


def hostname(netloc: str) -> str:
    """``h:5000`` -> ``h``; ``[::1]:5000`` and ``fe80::1`` -> the bare address, as
    ``httpx.URL.host`` spells hosts."""
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(netloc.strip("[]")))
    return httpx.URL(f"http://{netloc}").host


def listed(domain: str, entries: Sequence[str]) -> bool:
    """``domain`` (``host`` or ``host:port``) is an entry, or its host without the port is."""
    host = domain.rsplit(":", 1)[0] if not domain.endswith("]") else domain
    return domain in entries or host in entries


def allowlisted(domain: str, entries: Sequence[str]) -> bool:
    """``domain`` (``host`` or ``host:port``) is an ``--allow-registry`` entry, or it is
    ``host:443`` and ``host`` is one: an entry without a port allows the registry's
    default port only (issue 30: ``ghcr.io`` allowed ``ghcr.io:22``)."""
    if domain in entries:
        return True
    host, sep, port = domain.rpartition(":")
    if not sep or domain.endswith("]") or not port.isdigit():
        return False  # no port (it would be an entry) or an IPv6 literal without one
    return port == str(HTTPS_DEFAULT_PORT) and host in entries


#: The port of a registry named without one (``--allow-registry ghcr.io``).
HTTPS_DEFAULT_PORT = 443
