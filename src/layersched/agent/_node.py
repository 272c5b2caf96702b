"""From a CRI image list to the v1 Node object a kubelet would publish.

The image part follows kubelet's node-status image setter and its image
manager: images sorted by size, largest first (equal sizes by image ID,
descending), cut to ``nodeStatusMaxImages``, each named by its repo digests
then its repo tags, at most :data:`MAX_NAMES_PER_IMAGE` names.

layersched's extension: when an image carries Ryax-style
``imageLayer.<digest>: "<size>"`` annotations in its CRI ``spec.annotations``
(the Ryax-patched CRI-O), the entry also gets the Ryax-patched kubelet's
``layers: {digest: size}`` map. An unpatched kubelet never emits ``layers``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from layersched.agent._readers import CRIImageLike
from layersched.core.errors import InputError
from layersched.core.nodeimages import annotation_layers
from layersched.core.reference import ImageName

#: kubelet's ``MaxNamesPerImageInNodeStatus``: names kept per image, so that a
#: node with many tags of one image does not bloat its status.
MAX_NAMES_PER_IMAGE = 5
#: kubelet's default ``nodeStatusMaxImages``: images published per node. The
#: scheduler sees only these, which bounds any image-locality signal.
DEFAULT_MAX_IMAGES = 50
#: ``nodeStatusMaxImages`` value meaning "publish every image".
NO_IMAGE_CAP = -1
#: Labels every kubelet sets; user labels given to :func:`build_node` win.
_OS_LABEL = "kubernetes.io/os"
_HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The agent reads a Linux CRI runtime, so the node is a Linux node.
_OS = "linux"


class AgentImage(CRIImageLike, Protocol):
    """What the agent reads from one runtime image for a Node's ``status.images``: what
    the readers need, and its size (``layersched.cri.CRIImage`` fits)."""

    @property
    def size_bytes(self) -> int: ...


def _names(image: AgentImage) -> list[ImageName]:
    """Repo digests first, then repo tags, at most :data:`MAX_NAMES_PER_IMAGE`."""
    return [*image.repo_digests, *image.repo_tags][:MAX_NAMES_PER_IMAGE]


def _entry(image: AgentImage) -> dict[str, Any]:
    entry: dict[str, Any] = {"names": _names(image), "sizeBytes": image.size_bytes}
    where = f"CRI image {image.id!r}: spec.annotations"
    layers = annotation_layers(image.annotations, where)
    if layers:
        entry["layers"] = {layer.digest: layer.size_bytes for layer in layers}
    return entry


def node_status_images(
    images: Sequence[AgentImage], max_images: int = DEFAULT_MAX_IMAGES
) -> list[dict[str, Any]]:
    """``Node.status.images`` for ``images``, as kubelet builds it.

    ``max_images`` is ``nodeStatusMaxImages``: at most that many entries, the
    largest images first; :data:`NO_IMAGE_CAP` (-1) keeps them all.
    """
    if max_images < NO_IMAGE_CAP:
        raise InputError(
            f"max images {max_images} is invalid: use -1 for no cap or a count >= 0 "
            f"(kubelet's default is {DEFAULT_MAX_IMAGES})"
        )
    ordered = sorted(images, key=lambda image: (image.size_bytes, image.id), reverse=True)
    if max_images != NO_IMAGE_CAP:
        ordered = ordered[:max_images]
    return [_entry(image) for image in ordered]


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_node(
    name: str,
    images: Sequence[AgentImage],
    allocatable: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    max_images: int = DEFAULT_MAX_IMAGES,
    now: datetime | None = None,
) -> dict[str, Any]:
    """A v1 Node object (as ``kubectl get node -o json`` shows it) for this node.

    ``allocatable`` is also reported as ``capacity`` (the agent reserves
    nothing). The node is Ready as of ``now`` (default: the current time).
    """
    if not name:
        raise InputError("node name is empty: give the node a name (--node-name)")
    stamp = _rfc3339(now or datetime.now(UTC))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {_HOSTNAME_LABEL: name, _OS_LABEL: _OS, **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "status": {
            "capacity": dict(allocatable),
            "allocatable": dict(allocatable),
            "images": node_status_images(images, max_images),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "layersched agent is posting ready status",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
        },
    }
