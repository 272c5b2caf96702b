"""What the core needs from a v1 Pod: its images, init containers first, and the images
its image volumes mount (KEP-4639)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from layersched.core.errors import InputError


@dataclass(frozen=True, slots=True)
class PodImages:
    """A pod's images in upstream order: init containers first, then containers; and the
    references of its image volumes (``spec.volumes[*].image.reference``), in volume order."""

    name: str
    init_containers: tuple[str, ...]
    containers: tuple[str, ...]
    #: Only ImageLocality from 1.36 reads them; :attr:`images` leaves them out.
    image_volumes: tuple[str, ...] = ()

    @property
    def images(self) -> tuple[str, ...]:
        """Every container image, init containers first, repeats kept (as upstream)."""
        return self.init_containers + self.containers

    @classmethod
    def of(cls, *images: str, name: str = "pod") -> PodImages:
        """A pod with the given (non-init) container images; handy in tests."""
        return cls(name=name, init_containers=(), containers=tuple(images))


def _containers(spec: Mapping[str, Any], key: str, origin: str) -> list[Mapping[str, Any]]:
    value = spec.get(key) or []
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise InputError(f"{origin}: spec.{key} must be a list of container objects")
    return value


def _image(container: Mapping[str, Any], where: str) -> str:
    image = container.get("image")
    if not isinstance(image, str) or not image:
        raise InputError(f"{where}.image is missing: every container needs an image reference")
    return image


def _image_volumes(spec: Mapping[str, Any], origin: str) -> tuple[str, ...]:
    """The references of ``spec.volumes[*].image`` (other volume kinds are skipped)."""
    volumes = spec.get("volumes") or []
    if not isinstance(volumes, list) or not all(isinstance(v, dict) for v in volumes):
        raise InputError(f"{origin}: spec.volumes must be a list of volume objects")
    references = []
    for i, volume in enumerate(volumes):
        source = volume.get("image")
        if source is None:
            continue
        where = f"{origin}: spec.volumes[{i}].image"
        reference = source.get("reference") if isinstance(source, dict) else None
        if not isinstance(reference, str) or not reference:
            raise InputError(
                f"{where}.reference is missing: an image volume needs an image reference"
            )
        references.append(reference)
    return tuple(references)


def pod_from_json(document: Any, origin: str) -> PodImages:
    """Parse a v1 Pod (as ``kubectl get pod -o json`` prints it, or its YAML twin)."""
    if not isinstance(document, dict):
        raise InputError(f"{origin}: expected a v1 Pod object")
    kind = document.get("kind", "Pod")
    if kind != "Pod":
        raise InputError(f"{origin}: kind is {kind!r}, expected 'Pod'")
    spec = document.get("spec")
    if not isinstance(spec, dict):
        raise InputError(f"{origin}: spec is missing: a Pod needs spec.containers")
    meta = document.get("metadata") or {}
    name = meta.get("name", "pod") if isinstance(meta, dict) else "pod"
    init = _containers(spec, "initContainers", origin)
    main = _containers(spec, "containers", origin)
    if not main:
        raise InputError(f"{origin}: spec.containers is empty: a Pod needs at least one container")
    return PodImages(
        name=str(name),
        init_containers=tuple(
            _image(c, f"{origin}: spec.initContainers[{i}]") for i, c in enumerate(init)
        ),
        containers=tuple(_image(c, f"{origin}: spec.containers[{i}]") for i, c in enumerate(main)),
        image_volumes=_image_volumes(spec, origin),
    )
