"""The ``tc`` command that rate-limits the registry's link with a token bucket (tbf).

It runs inside the registry container's network namespace (a helper container
started with ``--network container:<registry>``), on the registry's ``eth0``:
shaping the registry's *egress* is what slows every node's pull, while pushes
from the host (ingress) stay fast.
"""

from __future__ import annotations

from layersched.core.errors import InputError

#: The registry joins only the ``kind`` network, so it has exactly this interface.
REGISTRY_INTERFACE = "eth0"
#: tbf needs a bucket of at least rate/HZ bytes; 1/250 s of traffic covers HZ=250
#: kernels, and 32 KiB keeps slow links from starving on one full-size frame burst.
_BURST_SECONDS = 1 / 250
MIN_BURST_BYTES = 32 * 1024
#: How long a packet may wait in the bucket before tbf drops it; generous, so TCP
#: sees a slow link rather than loss.
TBF_LATENCY_MS = 400
_BITS_PER_BYTE = 8


def tbf_burst_bytes(rate_bits_per_s: int) -> int:
    """The bucket size for ``rate_bits_per_s``."""
    return max(MIN_BURST_BYTES, int(rate_bits_per_s / _BITS_PER_BYTE * _BURST_SECONDS))


def tbf_command(rate_bits_per_s: int, interface: str = REGISTRY_INTERFACE) -> list[str]:
    """``tc`` argv that (re)places the root qdisc of ``interface`` with a tbf at the given rate."""
    if rate_bits_per_s <= 0:
        raise InputError(
            f"registry link rate {rate_bits_per_s} bit/s must be positive "
            "(e.g. 20000000 for 20 Mbit/s)"
        )
    return [
        "tc",
        "qdisc",
        "replace",
        "dev",
        interface,
        "root",
        "tbf",
        "rate",
        f"{rate_bits_per_s}bit",
        "burst",
        f"{tbf_burst_bytes(rate_bits_per_s)}b",
        "latency",
        f"{TBF_LATENCY_MS}ms",
    ]
