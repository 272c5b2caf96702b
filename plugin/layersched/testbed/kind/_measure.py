"""What the kind driver measures, parsed from text the cluster already produces.

* Pull time: the kubelet's ``Pulled`` event, ``Successfully pulled image "X" in 1.5s``
  (newer kubelets append ``(1.5s including waiting)`` and the image size; older
  ones print the raw Go duration, ``in 1.234567891s``).
* Bytes: the registry's access log (combined log format), summing the bodies
  it sent to one node's address. This is what crossed the link, not what the
  manifest says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from layersched.core.errors import TestbedError

#: Go's time.Duration.String() units, in seconds.
_GO_UNITS_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns))+$")
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_PULLED = re.compile(
    r'^Successfully pulled image "(?P<image>[^"]+)" in (?P<duration>\S+?)(?:\s|\.?$)'
)
_ALREADY_PRESENT = re.compile(r'^Container image "(?P<image>[^"]+)" already present on machine')
#: ``IP ident user [time] "METHOD PATH PROTO" STATUS SIZE ...`` (gorilla/handlers' combined log).
_ACCESS = re.compile(
    r'^(?P<client>\S+) \S+ \S+ \[[^\]]+\] "(?P<method>[A-Z]+) (?P<path>\S+) [^"]*" '
    r"(?P<status>\d{3}) (?P<size>\d+|-)"
)
#: Bodies that carry image bytes: manifests and blobs, answered in full or in part.
_PULL_PATH = re.compile(r"^/v2/.+/(manifests|blobs)/")
_OK_STATUSES = frozenset({"200", "206"})


def go_duration_seconds(text: str) -> float:
    """Parse a Go ``time.Duration`` string (``"1m2.5s"``, ``"850ms"``) into seconds."""
    if not _GO_DURATION.match(text):
        raise TestbedError(f"cannot read {text!r} as a Go duration (expected e.g. 1.5s or 850ms)")
    return sum(float(value) * _GO_UNITS_S[unit] for value, unit in _GO_PART.findall(text))


@dataclass(frozen=True, slots=True)
class PullEvent:
    """One kubelet pull report for a container image."""

    image: str
    seconds: float
    #: False when the kubelet found the image already present (nothing pulled).
    pulled: bool


def parse_pull_event(message: str) -> PullEvent | None:
    """The pull described by a kubelet ``Pulled`` event message, or None if it is another event."""
    if match := _PULLED.match(message):
        return PullEvent(match["image"], go_duration_seconds(match["duration"]), pulled=True)
    if match := _ALREADY_PRESENT.match(message):
        return PullEvent(match["image"], 0.0, pulled=False)
    return None


def pulled_bytes(access_log: Iterable[str], client: str) -> int:
    """Bytes of manifests and blobs the registry sent to ``client`` (an IP address)."""
    total = 0
    for line in access_log:
        match = _ACCESS.match(line)
        if (
            match is None
            or match["client"] != client
            or match["method"] != "GET"
            or match["status"] not in _OK_STATUSES
            or match["size"] == "-"
            or not _PULL_PATH.match(match["path"])
        ):
            continue
        total += int(match["size"])
    return total
