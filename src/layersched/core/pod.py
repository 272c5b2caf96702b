"""What the core needs from a v1 Pod: its images (``layersched.core.objects`` decodes Pods)."""

from __future__ import annotations

from dataclasses import dataclass

from layersched.core.reference import ImageName


@dataclass(frozen=True, slots=True)
class PodImages:
    """A pod's images in upstream order: init containers first, then containers; and the
    images it mounts as volumes (KEP-4639, ``volumes[].image.reference``)."""

    name: str
    init_containers: tuple[ImageName, ...]
    containers: tuple[ImageName, ...]
    image_volumes: tuple[ImageName, ...] = ()

    @property
    def images(self) -> tuple[ImageName, ...]:
        """Every container image, init containers first, repeats kept (as upstream)."""
        return self.init_containers + self.containers

    @property
    def pulled(self) -> tuple[ImageName, ...]:
        """Every image the kubelet pulls for the pod: containers' and image volumes'."""
        return self.init_containers + self.containers + self.image_volumes

    @classmethod
    def of(cls, *images: ImageName, name: str = "pod") -> PodImages:
        """A pod with the given (non-init) container images; handy in tests."""
        return cls(name=name, init_containers=(), containers=tuple(images))
