"""What the kubelet and kube-scheduler say in their Events, parsed.

* **Pulls** (reason ``Pulled``, from the kubelet, ``source.host`` its node). The message
  changed over the releases (``pkg/kubelet/images/image_manager.go``):

  ======================  ===========================================================
  kubelet                 message
  ======================  ===========================================================
  up to 1.18              ``Successfully pulled image "X"`` (no duration: untimed)
  1.19 - 1.25             ``Successfully pulled image "X" in 1.234567891s`` (the raw Go
                          duration, waiting for earlier pulls included)
  1.26 - 1.29             ``... in 1.234s (1.5s including waiting)`` (kubernetes#111772:
                          the pull itself, then with the wait in the queue)
  1.30 and later          ``... in 1.234s (1.5s including waiting). Image size: 123456
                          bytes.`` (kubernetes#121719; the size the runtime reports for
                          the image: compressed on containerd, uncompressed on CRI-O)
  every release           ``Container image "X" already present on machine`` (nothing
                          pulled; 1.33+ may add ``and can be accessed by the pod``)
  ======================  ===========================================================

* **Bindings** (reason ``Scheduled``): who bound a pod (the reporting controller, which
  kube-scheduler sets to the profile's ``schedulerName``) and to which node
  (``Successfully assigned NS/NAME to NODE``).

Every field is read defensively: an Event is written by any client with the right to
create one, so an odd message is None here, never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from layersched.core.errors import InputError

#: The event reason under which the kubelet reports a finished (or skipped) pull.
PULLED_REASON = "Pulled"
#: The event reason kube-scheduler reports a binding under.
SCHEDULED_REASON = "Scheduled"
#: A message is read up to this many characters (the API caps an Event's message at
#: 1 KiB in events.k8s.io; core/v1 does not): the rest cannot change what it says.
MAX_MESSAGE_CHARS = 4096

#: Go's time.Duration.String() units, in seconds.
_GO_UNITS_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns))+$")
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
#: A Go duration has at most a few parts (``1h2m3.5s``); a longer "duration" is no duration.
_MAX_DURATION_CHARS = 64
_PULLED = re.compile(
    r'^Successfully pulled image "(?P<image>[^"]+)"'
    r"(?: in (?P<duration>[0-9.hmsuµn]+?)"
    r"(?: \((?P<waiting>[0-9.hmsuµn]+) including waiting\))?"
    r"(?:\. Image size: (?P<size>\d{1,20}) bytes)?)?\.?$"
)
_ALREADY_PRESENT = re.compile(r'^Container image "(?P<image>[^"]+)" already present on machine')
_ASSIGNED = re.compile(r"^Successfully assigned (?P<pod>\S+) to (?P<node>\S+)$")


def go_duration_seconds(text: str) -> float:
    """Parse a Go ``time.Duration`` string (``"1m2.5s"``, ``"850ms"``) into seconds."""
    if len(text) > _MAX_DURATION_CHARS or not _GO_DURATION.match(text):
        raise InputError(
            f"cannot read {text[:80]!r} as a Go duration (expected e.g. 1.5s or 850ms)"
        )
    return sum(float(value) * _GO_UNITS_S[unit] for value, unit in _GO_PART.findall(text))


@dataclass(frozen=True, slots=True)
class PullEvent:
    """One kubelet pull report for a container image."""

    image: str
    #: The pull itself (1.26+: without the wait in the kubelet's pull queue); None when
    #: the message gives no duration (kubelets before 1.19).
    seconds: float | None
    #: False when the kubelet found the image already present (nothing pulled).
    pulled: bool
    #: The pull with the wait in the queue (1.26+), else None.
    waited_seconds: float | None = None
    #: The image's size as the runtime reports it (1.30+), else None.
    size_bytes: int | None = None


def parse_pull_event(message: str) -> PullEvent | None:
    """The pull a kubelet ``Pulled`` event message describes (any release's form), or None
    if it is another message."""
    text = message[:MAX_MESSAGE_CHARS]
    if match := _PULLED.match(text):
        try:
            seconds = go_duration_seconds(match["duration"]) if match["duration"] else None
            waited = go_duration_seconds(match["waiting"]) if match["waiting"] else None
        except InputError:
            return None
        size = int(match["size"]) if match["size"] else None
        return PullEvent(match["image"], seconds, True, waited, size)
    if match := _ALREADY_PRESENT.match(text):
        return PullEvent(match["image"], 0.0, pulled=False)
    return None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_time_s(text: object) -> float | None:
    """An API timestamp (RFC 3339, ``2026-11-22T10:00:00Z``, micro-time with fractions) as
    seconds since the epoch; None when absent or malformed."""
    if not isinstance(text, str) or not text or len(text) > _MAX_DURATION_CHARS:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:  # the API writes UTC; a naive stamp is read as UTC too
        return None
    return parsed.timestamp()


def event_time_s(event: Mapping[str, Any], *, last: bool = False) -> float | None:
    """When the event was first (or, with ``last``, last) seen, in epoch seconds.

    Core/v1 events from the kubelet carry ``firstTimestamp``/``lastTimestamp``;
    events.k8s.io-style ones carry ``eventTime`` (and ``series.lastObservedTime``);
    ``metadata.creationTimestamp`` is always set.
    """
    series = _mapping(event.get("series"))
    order = (
        (event.get("lastTimestamp"), series.get("lastObservedTime"), event.get("eventTime"))
        if last
        else (event.get("firstTimestamp"), event.get("eventTime"))
    )
    for value in (*order, _mapping(event.get("metadata")).get("creationTimestamp")):
        found = parse_time_s(value)
        if found is not None:
            return found
    return None


def involved_uid(event: Mapping[str, Any]) -> str:
    """The uid of the object the event is about ("" when absent)."""
    return _text(_mapping(event.get("involvedObject")).get("uid"))


def reporting_host(event: Mapping[str, Any]) -> str:
    """The node a kubelet's event came from (``source.host``; ``reportingInstance`` for
    recorders of events.k8s.io), "" when absent."""
    return _text(_mapping(event.get("source")).get("host")) or _text(event.get("reportingInstance"))


def pull_event_for(events: Iterable[Mapping[str, Any]], pod_uid: str) -> PullEvent | None:
    """The first ``Pulled`` report about the pod whose ``metadata.uid`` is ``pod_uid``.

    ``events`` are Event objects as JSON (``involvedObject``, ``reason``, ``message``).
    Events of an earlier pod with the same name have another uid and are ignored.
    """
    mine = [
        event
        for event in events
        if involved_uid(event) == pod_uid and event.get("reason") == PULLED_REASON
    ]
    for event in sorted(mine, key=lambda e: event_time_s(e) or 0.0):
        parsed = parse_pull_event(_text(event.get("message")))
        if parsed is not None:
            return parsed
    return None


def scheduled_by(events: Iterable[Mapping[str, Any]], pod_uid: str) -> str | None:
    """The scheduler (profile name) that bound the pod ``pod_uid``, from its Scheduled event.

    kube-scheduler records through events.k8s.io with the profile's ``schedulerName`` as
    reporting controller; read through core/v1 that is ``reportingComponent``
    (``source.component`` for recorders of the older API).
    """
    found = scheduled_event(events, pod_uid)
    return found[0] if found is not None else None


def scheduled_event(
    events: Iterable[Mapping[str, Any]], pod_uid: str
) -> tuple[str, str, float | None] | None:
    """The earliest Scheduled event of the pod ``pod_uid`` naming its scheduler:
    (scheduler, node named in the message or "", when in epoch seconds)."""
    mine = [
        event
        for event in events
        if involved_uid(event) == pod_uid and event.get("reason") == SCHEDULED_REASON
    ]
    for event in sorted(mine, key=lambda e: event_time_s(e) or 0.0):
        reporter = _text(event.get("reportingComponent")) or _text(
            _mapping(event.get("source")).get("component")
        )
        if reporter:
            match = _ASSIGNED.match(_text(event.get("message"))[:MAX_MESSAGE_CHARS])
            return reporter, match["node"] if match else "", event_time_s(event)
    return None
