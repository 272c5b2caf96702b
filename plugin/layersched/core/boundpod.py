"""A v1 Pod bound to a node, as the extender's pod watch reads it for in-flight scoring:
enough to tell whether its containers have started, why not, and since when it is bound
(:mod:`layersched.core.inflight` judges its pulls).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from layersched.core.errors import InputError
from layersched.core.objects import Pod, PodSpec, validation_message
from layersched.core.placedobjects import ContainerStateTerminated


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
