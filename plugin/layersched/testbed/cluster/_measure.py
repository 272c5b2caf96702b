"""What the cluster driver measures, parsed from text the cluster already produces.

* Pull time: the kubelet's ``Pulled`` event, ``Successfully pulled image "X" in 1.5s``
  (newer kubelets append ``(1.5s including waiting)`` and the image size; older
  ones print the raw Go duration, ``in 1.234567891s``).
* Bytes: the registry's access log (combined log format), summing the bodies
  it sent to one node's address. This is what crossed the link, not what the
  manifest says.

* Scores: kube-scheduler's own ``-v=10`` line for a plugin,
  ``Plugin ImageLocality scores on NS/NAME => [{n2 0} {n3 0}]`` (1.20's format: a Go
  ``%v`` of ``[]NodeScore``), and the layersched extender's decision log (``-vv``):
  ``pod NS/NAME (STRATEGY):`` then one ``  NODE: present P / total T bytes -> S/100 -> s/10``
  line per node, ``s`` being what it answered; or ``pod NS/NAME: neutral scores for N
  nodes (reason)`` when it answered 0 everywhere.
* Who bound a pod: the ``Scheduled`` event's reporting controller, which kube-scheduler
  sets to the profile's ``schedulerName``.

Two selections keep a measurement on the right object:

* :func:`pull_event_for` picks the event of one pod *instance* (its uid): the
  scenario reuses pod names across trials (``p1`` in every trial), and events
  outlive the pods they describe, so a name alone finds trial 1's pull again.
* :func:`node_reports_image` says whether a Node's ``status.images`` lists an
  image yet. The kubelet refreshes that list about every 30 s, so a pull that
  has finished is not yet visible to a scheduler that scores from Node status.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from layersched.core.errors import TestbedError
from layersched.core.reference import DEFAULT_TAG, ImageReference, parse_or_none

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


#: The event reason under which the kubelet reports a finished (or skipped) pull.
PULLED_REASON = "Pulled"


def _event_time(event: Mapping[str, Any]) -> str:
    """When the event was first seen, as RFC 3339 text (sorts in time order).

    Core/v1 events from the kubelet carry ``firstTimestamp``; events.k8s.io-style
    ones carry ``eventTime`` only; ``metadata.creationTimestamp`` is always set.
    """
    metadata = event.get("metadata") or {}
    return str(
        event.get("firstTimestamp") or event.get("eventTime") or metadata.get("creationTimestamp")
    )


def pull_event_for(events: Iterable[Mapping[str, Any]], pod_uid: str) -> PullEvent | None:
    """The first ``Pulled`` report about the pod whose ``metadata.uid`` is ``pod_uid``.

    ``events`` are Event objects as JSON (``involvedObject``, ``reason``, ``message``).
    Events of an earlier pod with the same name have another uid and are ignored.
    """
    mine = [
        event
        for event in events
        if (event.get("involvedObject") or {}).get("uid") == pod_uid
        and event.get("reason") == PULLED_REASON
    ]
    for event in sorted(mine, key=_event_time):
        parsed = parse_pull_event(str(event.get("message") or ""))
        if parsed is not None:
            return parsed
    return None


def node_reports_image(node: Mapping[str, Any], image: str) -> bool:
    """Whether ``node``'s ``status.images`` lists ``image`` (a pod's image reference).

    Names compare as references, so ``debian:12`` matches CRI-O's
    ``docker.io/library/debian:12``. A reference pinned by digest matches the
    node's ``repo@digest`` name; otherwise the tag (default ``latest``) must match.
    """
    wanted = ImageReference.parse(image)
    for listed in (node.get("status") or {}).get("images") or []:
        for name in listed.get("names") or []:
            have = parse_or_none(str(name))
            if have is None or (have.domain, have.path) != (wanted.domain, wanted.path):
                continue
            if wanted.digest is not None:
                if have.digest == wanted.digest:
                    return True
            elif have.digest is None and have.tag == (wanted.tag or DEFAULT_TAG):
                return True
    return False


#: The event reason kube-scheduler reports a binding under.
SCHEDULED_REASON = "Scheduled"
_PLUGIN_SCORES = re.compile(
    r"Plugin (?P<plugin>\S+) scores on (?P<pod>\S+/\S+) => \[(?P<scores>[^\]]*)\]"
)
_NODE_SCORE = re.compile(r"\{(?P<node>\S+) (?P<score>-?\d+)\}")
_DECISION_HEAD = re.compile(r"pod (?P<pod>\S+/\S+) \((?P<strategy>[^)]+)\):$")
_DECISION_LINE = re.compile(
    r"^\s+(?P<node>\S+): present \d+ / total \d+ bytes -> \d+/100 -> (?P<score>\d+)/10$"
)
_NEUTRAL = re.compile(r"pod (?P<pod>\S+/\S+): neutral scores for \d+ nodes \((?P<why>[^)]+)\)")


def plugin_scores(log_lines: Iterable[str], plugin: str, pod: str) -> dict[str, int] | None:
    """The last scores kube-scheduler logged for ``plugin`` on ``pod`` (``NS/NAME``).

    Returns None when no such line is in ``log_lines`` (kube-scheduler logs them at
    ``-v=10`` only, and only for nodes that passed filtering).
    """
    found: dict[str, int] | None = None
    for line in log_lines:
        match = _PLUGIN_SCORES.search(line)
        if match is None or match["plugin"] != plugin or match["pod"] != pod:
            continue
        found = {m["node"]: int(m["score"]) for m in _NODE_SCORE.finditer(match["scores"])}
    return found


def extender_decision(log_lines: Iterable[str], pod: str) -> dict[str, int] | None:
    """The last answer the layersched extender logged for ``pod`` (``NS/NAME``), 0..10.

    A neutral answer (the extender could not score in time) gives an empty dict: the
    nodes it was asked about all got 0, and which they were is not logged.
    """
    found: dict[str, int] | None = None
    current: dict[str, int] | None = None
    for line in log_lines:
        if current is not None:
            if match := _DECISION_LINE.match(line):
                current[match["node"]] = int(match["score"])
                continue
            found, current = current, None
        if (match := _DECISION_HEAD.search(line)) and match["pod"] == pod:
            current = {}
        elif (match := _NEUTRAL.search(line)) and match["pod"] == pod:
            found = {}
    return current if current is not None else found


def scheduled_by(events: Iterable[Mapping[str, Any]], pod_uid: str) -> str | None:
    """The scheduler (profile name) that bound the pod ``pod_uid``, from its Scheduled event.

    kube-scheduler records through events.k8s.io with the profile's ``schedulerName`` as
    reporting controller; read through core/v1 that is ``reportingComponent``
    (``source.component`` for recorders of the older API).
    """
    for event in sorted(events, key=_event_time):
        if (event.get("involvedObject") or {}).get("uid") != pod_uid:
            continue
        if event.get("reason") != SCHEDULED_REASON:
            continue
        reporter = event.get("reportingComponent") or (event.get("source") or {}).get("component")
        if reporter:
            return str(reporter)
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
