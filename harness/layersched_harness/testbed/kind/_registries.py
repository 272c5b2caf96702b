"""The ``registries.conf.d`` drop-in (containers-registries.conf v2) for the testbed registry.

CRI-O pulls over HTTPS unless a registry is marked ``insecure``; the testbed
registry is a plain-HTTP container on the ``kind`` network.
"""

from __future__ import annotations

import re

from layersched.core.errors import InputError

#: host[:port] as an image reference's registry part (no scheme, no path): keeps the
#: value safe to put in a TOML basic string without escaping.
_REGISTRY_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$")


def check_registry_host(host: str) -> str:
    """``host`` if it is a ``name[:port]`` registry address, else :class:`InputError`."""
    if not _REGISTRY_HOST.match(host):
        raise InputError(
            f"registry address {host!r} is invalid: "
            "use host[:port] without scheme, e.g. kind-registry:5000"
        )
    return host


def registries_dropin(*hosts: str) -> str:
    """TOML trusting each of ``hosts`` over plain HTTP (one ``[[registry]]`` table each)."""
    if not hosts:
        raise InputError("registries drop-in: name at least one registry address")
    lines = ["# Written by layersched: the testbed registry serves plain HTTP."]
    for host in hosts:
        check_registry_host(host)
        lines += ["", "[[registry]]", f'location = "{host}"', "insecure = true"]
    return "\n".join(lines) + "\n"
