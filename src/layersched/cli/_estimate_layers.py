"""The layers ``layersched estimate`` weighs with: each distinct image of the nodes and of
the weighed pods resolved once (a pod's image by the digest its runtime ran, else by its
reference; a private image with the pod's pull secret, read with the user's credentials),
and why an image's layers are unknown."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Callable, Sequence

from rich.progress import Progress

from layersched.cli._estimate_cluster import PullSecretNames
from layersched.cli._pull_secrets import UserPullSecrets
from layersched.cli._sources import credential_source_factory
from layersched.core.errors import LayerResolutionError
from layersched.core.estimate import in_window
from layersched.core.layers import Layer, LayerSource
from layersched.core.manifest import Platform
from layersched.core.nodeimages import NodeImage, NodeInfo, names_resolver
from layersched.core.placedobjects import SchedulableNode
from layersched.core.placementfacts import NodeFacts, PodFacts, node_facts
from layersched.core.reference import ImageName
from layersched.kube import KubeClient

log = logging.getLogger(__name__)


def _resolving(progress: Progress, what: str, total: int) -> Callable[[], None]:
    task = progress.add_task(f"resolving {what}", total=total)
    return lambda: progress.advance(task)


def resolve_nodes(
    nodes: Sequence[tuple[SchedulableNode, NodeInfo]],
    source: LayerSource,
    progress: Progress,
    notes: list[str],
) -> list[NodeFacts]:
    """Every node with the layers of its images (each distinct image resolved once)."""
    resolve = names_resolver(source)
    distinct = {image.names for _, info in nodes for image in info.images if image.names}
    step = _resolving(progress, "the nodes' images", len(distinct))
    layers: dict[tuple[str, ...], tuple[Layer, ...] | None] = {}
    unknown = 0
    for names in distinct:
        try:
            layers[names] = resolve(names)
        except LayerResolutionError as err:
            layers[names] = None
            unknown += 1
            log.warning("node image %r: its layers are unknown (%s)", names[0], err)
        step()
    if unknown:
        notes.append(
            f"{unknown} of {len(distinct)} node image(s) have unknown layers (named in the "
            "warnings): the nodes holding them count as not holding their layers"
        )
    facts = []
    for node, info in nodes:
        images = tuple(
            NodeImage(image.names, image.size_bytes, layers.get(image.names))
            for image in info.images
        )
        facts.append(node_facts(node, dataclasses.replace(info, images=images)))
    return facts


def user_pull_secrets(args: argparse.Namespace, kube: KubeClient) -> UserPullSecrets | None:
    """Pods' pull secrets read with the user's credentials (None with ``--layers``, an
    offline source: no registry to ask with them)."""
    if args.layers:
        return None
    make = credential_source_factory(args)
    platform = Platform.parse(args.platform)
    return UserPullSecrets(kube, lambda credential: make(platform, credential))


def resolve_pods(
    pods: list[PodFacts],
    ran: dict[str, dict[ImageName, ImageName]],
    source: LayerSource,
    progress: Progress,
    since_s: float,
    until_s: float,
    namespaces: frozenset[str] | None,
    pulling: PullSecretNames | None = None,
    secrets: UserPullSecrets | None = None,
) -> list[PodFacts]:
    """The pods, those weighed with the layers of their images (by the digest their runtime
    ran, else by their reference); a private image with the pod's pull secret for its
    registry (``secrets``: read with the user's credentials), the others with ``source``."""
    weighed = [
        i
        for i, pod in enumerate(pods)
        if not pod.pinned and in_window(pod, since_s, until_s, namespaces)
    ]
    # the source of each weighed pod's image: its pull secret's credential's, else None
    source_of: dict[tuple[str, ImageName], LayerSource | None] = {}
    for i in weighed:
        pod = pods[i]
        named = (pulling or {}).get(pod.uid)
        credentials = secrets.credentials(*named) if secrets is not None and named else {}
        for image in pod.images:
            own = secrets.source(image, credentials) if secrets is not None else None
            source_of[(pod.uid, image)] = own
    Key = tuple[ImageName, ImageName | None, int]
    references: dict[Key, LayerSource] = {}
    for i in weighed:
        for image in pods[i].images:
            own = source_of[(pods[i].uid, image)]
            chosen = own if own is not None else source
            references[(image, ran[pods[i].uid].get(image), id(chosen))] = chosen
    step = _resolving(progress, "the pods' images", len(references))
    resolved: dict[Key, tuple[Layer, ...] | str] = {}
    for (image, by_digest, which), chosen in references.items():
        resolved[(image, by_digest, which)] = _resolve_image(chosen, image, by_digest)
        step()
    out = list(pods)
    for i in weighed:
        pod = pods[i]
        found: dict[ImageName, tuple[Layer, ...]] = {}
        why = ""
        for image in pod.images:
            own = source_of[(pod.uid, image)]
            which = id(own if own is not None else source)
            layers = resolved[(image, ran[pod.uid].get(image), which)]
            if isinstance(layers, str):
                why = why or f"{image}: {layers}"
            else:
                found[image] = layers
        out[i] = dataclasses.replace(pod, image_layers=None if why else found, unresolved=why)
    return out


def _resolve_image(
    source: LayerSource, image: ImageName, by_digest: ImageName | None
) -> tuple[Layer, ...] | str:
    """The layers of ``image`` (the digest it ran from first), or why they are unknown."""
    reason = ""
    for reference in (by_digest, image):
        if reference is None:
            continue
        try:
            return source.resolve(reference)
        except LayerResolutionError as err:
            reason = str(err)
    return reason
