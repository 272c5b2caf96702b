"""What the cluster driver measures, parsed from text the cluster already produces.

* Pull time: the kubelet's ``Pulled`` event, read by :mod:`layersched.core.events`
  (every release's form of the message; ``layersched estimate`` reads it there too).
* Bytes: the registry's access log (combined log format), summing the bodies
  it sent to one node's address. This is what crossed the link, not what the
  manifest says.

* Scores: kube-scheduler's own ``-v=10`` lines for a plugin: 1.20's one line per pod,
  ``Plugin ImageLocality scores on NS/NAME => [{n2 0} {n3 0}]`` (a Go ``%v`` of
  ``[]NodeScore``), or a current release's structured line per node,
  ``"Plugin scored node for pod" pod="NS/NAME" plugin="ImageLocality" node="n2" score=0``;
  and the layersched extender's decision log (``-vv``):
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
from typing import Any

from layersched.core.events import (
    PULLED_REASON,
    SCHEDULED_REASON,
    PullEvent,
    go_duration_seconds,
    parse_pull_event,
    pull_event_for,
    scheduled_by,
)
from layersched.core.reference import ImageReference, listed_name_matches

__all__ = [
    "PULLED_REASON",
    "SCHEDULED_REASON",
    "PullEvent",
    "extender_decision",
    "go_duration_seconds",
    "node_reports_image",
    "parse_pull_event",
    "plugin_scores",
    "pull_event_for",
    "pulled_bytes",
    "pulled_bytes_by_repository",
    "scheduled_by",
]

#: ``IP ident user [time] "METHOD PATH PROTO" STATUS SIZE ...`` (gorilla/handlers' combined log).
_ACCESS = re.compile(
    r'^(?P<client>\S+) \S+ \S+ \[[^\]]+\] "(?P<method>[A-Z]+) (?P<path>\S+) [^"]*" '
    r"(?P<status>\d{3}) (?P<size>\d+|-)"
)
#: Bodies that carry image bytes: manifests and blobs, answered in full or in part.
_PULL_PATH = re.compile(r"^/v2/.+/(manifests|blobs)/")
_OK_STATUSES = frozenset({"200", "206"})


def node_reports_image(node: Mapping[str, Any], image: str) -> bool:
    """Whether ``node``'s ``status.images`` lists ``image`` (a pod's image reference).

    Names compare as references, so ``debian:12`` matches CRI-O's
    ``docker.io/library/debian:12``. A reference pinned by digest matches the
    node's ``repo@digest`` name; otherwise the tag (default ``latest``) must match.
    """
    wanted = ImageReference.parse(image)
    for listed in (node.get("status") or {}).get("images") or []:
        for name in listed.get("names") or []:
            if listed_name_matches(str(name), wanted):
                return True
    return False


_PLUGIN_SCORES = re.compile(
    r"Plugin (?P<plugin>\S+) scores on (?P<pod>\S+/\S+) => \[(?P<scores>[^\]]*)\]"
)
_NODE_SCORE = re.compile(r"\{(?P<node>\S+) (?P<score>-?\d+)\}")
_PLUGIN_NODE_SCORE = re.compile(
    r'"Plugin scored node for pod" pod="(?P<pod>[^"]+)" plugin="(?P<plugin>[^"]+)" '
    r'node="(?P<node>[^"]+)" score=(?P<score>-?\d+)'
)
_DECISION_HEAD = re.compile(r"pod (?P<pod>\S+/\S+) \((?P<strategy>[^)]+)\):$")
_DECISION_LINE = re.compile(
    r"^\s+(?P<node>\S+): present \d+ / total \d+ bytes -> \d+/100 -> (?P<score>\d+)/10$"
)
_NEUTRAL = re.compile(r"pod (?P<pod>\S+/\S+): neutral scores for \d+ nodes \((?P<why>[^)]+)\)")


def plugin_scores(log_lines: Iterable[str], plugin: str, pod: str) -> dict[str, int] | None:
    """The last scores kube-scheduler logged for ``plugin`` on ``pod`` (``NS/NAME``), in
    either release's form. A node scored again starts the next scheduling attempt's scores
    (a current release logs one line per node, each attempt's in a run).

    Returns None when no such line is in ``log_lines`` (kube-scheduler logs them at
    ``-v=10`` only, and only for nodes that passed filtering).
    """
    found: dict[str, int] | None = None
    for line in log_lines:
        if (match := _PLUGIN_NODE_SCORE.search(line)) is not None:
            if match["plugin"] != plugin or match["pod"] != pod:
                continue
            if found is None or match["node"] in found:
                found = {}
            found[match["node"]] = int(match["score"])
            continue
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


#: ``/v2/<repository>/manifests|blobs/<ref>``: the repository a pull fetched from.
_REPOSITORY_PATH = re.compile(r"^/v2/(?P<repository>.+)/(?:manifests|blobs)/[^/]+$")


def pulled_bytes_by_repository(access_log: Iterable[str]) -> dict[tuple[str, str], int]:
    """Bytes of manifests and blobs the registry sent, by (client address, repository).

    A blob two images share is fetched once by a node, under the repository of the image
    that pulled it first, so it counts there only.
    """
    totals: dict[tuple[str, str], int] = {}
    for line in access_log:
        match = _ACCESS.match(line)
        if (
            match is None
            or match["method"] != "GET"
            or match["status"] not in _OK_STATUSES
            or match["size"] == "-"
        ):
            continue
        path = _REPOSITORY_PATH.match(match["path"].partition("?")[0])
        if path is None:
            continue
        key = (match["client"], path["repository"])
        totals[key] = totals.get(key, 0) + int(match["size"])
    return totals
