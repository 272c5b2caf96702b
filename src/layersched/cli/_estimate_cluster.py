"""What ``layersched estimate`` reads from the cluster, page by page (it never holds a
whole list): the Nodes, the bound pods (for those weighed, what their runtimes ran and
the pull secrets they name) and the kubelets' ``Pulled`` events of the window."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from rich.progress import Progress

from layersched.core.errors import InputError
from layersched.core.estimate import in_window
from layersched.core.events import PULLED_REASON
from layersched.core.nodeimages import NodeInfo
from layersched.core.nodeindexing import node_info
from layersched.core.placedobjects import (
    SchedulableNode,
    decode_placed_pod,
    decode_schedulable_node,
)
from layersched.core.placementfacts import (
    PodFacts,
    PullFacts,
    pod_facts,
    pull_facts,
    ran_images,
)
from layersched.core.reference import ImageName
from layersched.extender import pull_secret_names
from layersched.kube import (
    ALL_EVENTS_PATH,
    ALL_PODS_PATH,
    NODES_PATH,
    KubeClient,
    selector,
)

log = logging.getLogger(__name__)


#: Only bound pods take part (a pending pod pulled nothing yet).
BOUND_PODS = "spec.nodeName!="


def _pages(
    kube: KubeClient, progress: Progress, path: str, what: str, field_selector: str | None = None
) -> Iterator[dict[str, Any]]:
    """The items of a collection, page by page, counted on a progress line."""
    task = progress.add_task(f"reading {what}", total=None)
    seen = 0
    for page, _ in kube.list_pages(path, field_selector=field_selector):
        seen += len(page)
        progress.update(task, description=f"reading {what}: {seen}")
        yield from page
    progress.remove_task(task)


def read_nodes(kube: KubeClient, progress: Progress) -> list[tuple[SchedulableNode, NodeInfo]]:
    """(decoded node, its inventory entry without layers) of every Node."""
    found = []
    for i, item in enumerate(_pages(kube, progress, NODES_PATH, "nodes")):
        where = f"{NODES_PATH}: items[{i}]"
        problems: list[str] = []
        try:
            node = decode_schedulable_node(item, where)
            info = node_info(node, where, problems)
        except InputError as err:
            log.warning("ignoring a node: %s", err)
            continue
        for problem in problems:
            log.warning("%s", problem)
        found.append((node, info))
    return found


#: A weighed pod's pull secrets: (its namespace, the secrets it names), by uid.
PullSecretNames = dict[str, tuple[str, tuple[str, ...]]]


def read_pods(
    kube: KubeClient,
    progress: Progress,
    since_s: float,
    until_s: float,
    namespaces: frozenset[str] | None,
) -> tuple[list[PodFacts], dict[str, dict[ImageName, ImageName]], PullSecretNames]:
    """Every bound pod's facts, and for those weighed, what their runtimes ran and the pull
    secrets they name (by uid)."""
    pods: list[PodFacts] = []
    ran: dict[str, dict[ImageName, ImageName]] = {}
    pulling: PullSecretNames = {}
    problems: list[str] = []
    items = _pages(kube, progress, ALL_PODS_PATH, "pods", field_selector=BOUND_PODS)
    for i, item in enumerate(items):
        try:
            pod = decode_placed_pod(item, f"{ALL_PODS_PATH}: items[{i}]")
        except InputError as err:
            log.warning("ignoring a pod: %s", err)
            continue
        facts = pod_facts(pod, problems)
        if facts is None:
            continue
        pods.append(facts)
        if in_window(facts, since_s, until_s, namespaces):
            ran[facts.uid] = ran_images(pod)
            names = pull_secret_names(pod)
            if names and pod.metadata.namespace:
                pulling[facts.uid] = (pod.metadata.namespace, names)
    for problem in problems:
        log.warning("%s", problem)
    return pods, ran, pulling


def read_pulls(
    kube: KubeClient, progress: Progress, since_s: float, node_of: dict[str, str]
) -> list[PullFacts]:
    """The kubelets' pull reports of the window."""
    found = []
    pulled = selector({"reason": PULLED_REASON})
    for event in _pages(kube, progress, ALL_EVENTS_PATH, "Pulled events", field_selector=pulled):
        facts = pull_facts(event, node_of)
        if facts is not None and facts.at_s >= since_s:
            found.append(facts)
    return found
