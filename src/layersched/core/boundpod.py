"""A v1 Pod bound to a node, as the extender's pod watch reads it for in-flight scoring:
enough to tell whether its containers have started, why not, and since when it is bound:
the images it still waits for (:func:`pending_images`, the Go plugin's ``pendingImages``)
and when it was bound (:func:`bound_at_s`). :mod:`layersched.core.inflight` counts its
pulls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from layersched.core.errors import InputError
from layersched.core.events import parse_time_s
from layersched.core.objects import Pod, PodSpec, validation_message
from layersched.core.placedobjects import ContainerStateTerminated
from layersched.core.reference import ImageName


class ContainerStateWaiting(msgspec.Struct, gc=False):
    """``state.waiting``: why the container is not running yet (``ErrImagePull``, ...)."""

    reason: str = ""


class ContainerStateRunning(msgspec.Struct, gc=False):
    """``state.running``: since when."""

    startedAt: str = ""


class ContainerStatusState(msgspec.Struct, gc=False):
    """``state``: one of waiting, running or terminated."""

    waiting: ContainerStateWaiting | None = None
    running: ContainerStateRunning | None = None
    terminated: ContainerStateTerminated | None = None


class BoundContainerStatus(msgspec.Struct, gc=False):
    """``containerStatuses[]`` as a bound pod's pulls are judged by it."""

    name: str = ""
    imageID: str = ""
    state: ContainerStatusState | None = None


class PodCondition(msgspec.Struct, gc=False):
    """``conditions[]``: ``PodScheduled`` turns true when the pod is bound."""

    type: str = ""
    status: str = ""
    lastTransitionTime: str = ""


class BoundPodStatus(msgspec.Struct, gc=False):
    """``Pod.status`` of a bound pod: its phase, conditions and containers' states."""

    phase: str = ""
    conditions: list[PodCondition] | None = None
    initContainerStatuses: list[BoundContainerStatus] | None = None
    containerStatuses: list[BoundContainerStatus] | None = None


class BoundPodSpec(PodSpec, gc=False):
    """``Pod.spec`` with the node it is bound to."""

    nodeName: str = ""


class BoundPod(Pod, gc=False):
    """A v1 Pod as the extender's pod watch reads it (``layersched.core.inflight``)."""

    spec: BoundPodSpec | None = None
    status: BoundPodStatus | None = None


_BOUND_POD_DECODER = msgspec.json.Decoder(BoundPod)


def decode_bound_pod(document: Mapping[str, Any] | bytes, origin: str) -> BoundPod:
    """One watched or listed Pod, from its JSON bytes or the parsed object."""
    try:
        if isinstance(document, bytes):
            return _BOUND_POD_DECODER.decode(document)
        return msgspec.convert(document, BoundPod)
    except msgspec.ValidationError as err:
        raise InputError(f"{origin}: {validation_message(err)}") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as err:
        raise InputError(f"{origin}: malformed JSON ({type(err).__name__})") from None


#: The kubelet's waiting reasons for a pull that failed (``pkg/kubelet/images``): a pod
#: waiting for one of them pulls nothing meanwhile (it backs off), so none of its images
#: counts as arriving.
PULL_FAILURES = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "SignatureValidationFailed",
    }
)
#: The phases of a pod whose containers may still be waiting for their images.
PENDING_PHASES = ("", "Pending")


def pending_images(pod: BoundPod) -> tuple[ImageName, ...]:
    """The images a pod bound to a node still waits for (the Go plugin's
    ``pendingImages``): those of its containers (init containers first) not created yet
    (no image ID, not running, not terminated) that no created container runs, and its
    image volumes while no container is created. Nothing for a pod not bound, not
    Pending, or whose pull failed (a container waiting for one of
    :data:`PULL_FAILURES`)."""
    spec, status = pod.spec, pod.status or BoundPodStatus()
    if spec is None or not spec.nodeName or status.phase not in PENDING_PHASES:
        return ()
    statuses = {
        s.name: s
        for s in (*(status.initContainerStatuses or ()), *(status.containerStatuses or ()))
    }
    waiting: list[ImageName] = []
    present: set[ImageName] = set()
    for container in (*(spec.initContainers or ()), *(spec.containers or ())):
        found = statuses.get(container.name)
        state = found.state if found is not None else None
        if (
            state is not None
            and state.waiting is not None
            and state.waiting.reason in PULL_FAILURES
        ):
            return ()
        if found is not None and (
            found.imageID or (state is not None and (state.running or state.terminated))
        ):
            present.add(container.image)
            continue
        waiting.append(container.image)
    if not present:
        waiting += [v.image.reference for v in spec.volumes or () if v.image is not None]
    return tuple(dict.fromkeys(image for image in waiting if image and image not in present))


def bound_at_s(pod: BoundPod) -> float | None:
    """When the pod was bound (its ``PodScheduled`` condition turned true; epoch
    seconds), or None when it does not say (a pod bound by ``spec.nodeName``, an old
    object)."""
    for condition in (pod.status.conditions if pod.status is not None else None) or ():
        if condition.type == "PodScheduled" and condition.status == "True":
            return parse_time_s(condition.lastTransitionTime)
    return None
