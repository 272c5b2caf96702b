"""The release's images: layersched's, and its kube-scheduler for every supported minor,
each one multi-arch OCI index, laid out on disk, pushed, and recorded.

``make images`` (``harness/scripts/images.py``) compiles each minor's kube-scheduler for each
architecture (:data:`layersched.builds.IMAGE_ARCHES`) from its Go module, then calls
:func:`release_images` here: every image is built without Docker
(:mod:`layersched.images.build`), reproducibly, so its digest is known before any push.
:func:`write_layouts` lays them out as OCI image layouts (one per repository, one tag per
image: what ``skopeo copy --all --preserve-digests oci:DIR:TAG docker://…`` pushes, as the
release workflow does), :func:`push_release` pushes them with layersched's registry
client (a testbed's registry), and :func:`published_record` is the record the chart and
``install/kustomize/`` are pinned from by digest (:mod:`layersched.deploy._published`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from layersched import __version__
from layersched.builds import GO_MODULE_FILES, IMAGE_ARCHES, KubernetesBuild
from layersched.core.reference import ImageReference
from layersched.deploy import (
    PUBLISHED_IMAGE,
    PUBLISHED_KUBE_SCHEDULER,
    PublishedImage,
    PublishedImages,
    plugin_image_tag,
)
from layersched.images.build import (
    INPUTS_LABEL_PREFIX,
    build_kube_scheduler_image,
    build_kube_scheduler_index,
    build_layersched_index,
    image_size_bytes,
)
from layersched.images.oci import BuiltIndex, push_image
from layersched.images.oci_layout import write_oci_layout
from layersched.registry import RegistryClient

#: The images' one Go binary.
KUBE_SCHEDULER = "kube-scheduler"
#: Labels recording what the binary was built from in this repository: the build ID (the
#: release and the module's hash) and the go.sum it was built with (a minor's own).
BUILD_ID_LABEL = INPUTS_LABEL_PREFIX + "build-id"
GO_SUM_LABEL = INPUTS_LABEL_PREFIX + "go-sum"
GO_SUM = GO_MODULE_FILES[1]
#: Where the published repositories live; a testbed's registry replaces the host.
DEFAULT_PREFIX = PUBLISHED_IMAGE.rsplit("/", 1)[0]
LAYERSCHED_NAME = PUBLISHED_IMAGE.rsplit("/", 1)[1]
KUBE_SCHEDULER_NAME = PUBLISHED_KUBE_SCHEDULER.rsplit("/", 1)[1]


@dataclass(frozen=True, slots=True)
class ReleaseImage:
    """One image of the release: where it goes (repository and tag) and its index."""

    repository: str
    tag: str
    index: BuiltIndex
    #: The Kubernetes minor of a kube-scheduler image (``37``); None for layersched's.
    minor: int | None = None

    @property
    def name(self) -> str:
        """The repository's last part (``kube-scheduler``): its layout's directory."""
        return self.repository.rsplit("/", 1)[-1]

    def platforms(self) -> dict[str, dict[str, object]]:
        """Each platform's manifest digest and compressed size (``linux/arm64``: …)."""
        return {
            f"{image.platform.os}/{image.platform.architecture}": {
                "digest": image.digest,
                "size_bytes": image_size_bytes(image),
            }
            for image in self.index.images
        }

    def published(self) -> PublishedImage:
        return PublishedImage(
            self.repository, self.tag, self.index.digest, {"platforms": self.platforms()}
        )


def _go_sum_sha256(build: KubernetesBuild) -> str:
    data = (build.directory() / GO_SUM).read_bytes()
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def kube_scheduler_release(
    build: KubernetesBuild,
    arches: Sequence[str] = IMAGE_ARCHES,
    prefix: str = DEFAULT_PREFIX,
    version: str = __version__,
    binaries: Mapping[str, Path] | None = None,
) -> ReleaseImage:
    """``build``'s kube-scheduler for each of ``arches``, one index: the binaries compiled
    for the images (:meth:`KubernetesBuild.require_platform` says how when one is not), or
    ``binaries`` by architecture (``make kubernetes``'s own, for the host's)."""
    labels = {BUILD_ID_LABEL: build.build_id, GO_SUM_LABEL: _go_sum_sha256(build)}
    given = binaries or {}
    images = [
        build_kube_scheduler_image(
            given.get(arch) or build.require_platform(KUBE_SCHEDULER, arch),
            build.version,
            arch,
            labels,
        )
        for arch in arches
    ]
    minor = build.minor[1]
    return ReleaseImage(
        f"{prefix}/{KUBE_SCHEDULER_NAME}",
        plugin_image_tag(minor, version),
        build_kube_scheduler_index(images, build.version),
        minor,
    )


def release_images(
    builds: Sequence[KubernetesBuild],
    arches: Sequence[str] = IMAGE_ARCHES,
    prefix: str = DEFAULT_PREFIX,
    progress: Callable[[str], None] | None = None,
    layersched: bool = True,
) -> list[ReleaseImage]:
    """The layersched index (unless ``layersched`` is False) and each build's kube-scheduler
    index, for ``arches``."""
    say = progress or (lambda _message: None)
    images = []
    if layersched:
        say(f"layersched for {', '.join(arches)}")
        index = build_layersched_index(arches, progress=say)
        images.append(ReleaseImage(f"{prefix}/{LAYERSCHED_NAME}", __version__, index))
    for build in builds:
        say(f"kube-scheduler {build.version} for {', '.join(arches)}")
        images.append(kube_scheduler_release(build, arches, prefix))
    return images


def write_layouts(out: Path, images: Sequence[ReleaseImage]) -> dict[str, Path]:
    """An OCI image layout per repository under ``out`` (``out/kube-scheduler``), each image
    under its tag; returns ``repository:tag`` -> its layout's directory."""
    written = {}
    for image in images:
        directory = write_oci_layout(out / image.name, image.index, image.tag)
        written[f"{image.repository}:{image.tag}"] = directory
    return written


def push_release(images: Sequence[ReleaseImage], *, insecure: bool = False) -> Mapping[str, str]:
    """Push every image (its blobs, each platform's manifest, the index under its tag);
    returns ``repository:tag`` -> the digest the registry answered."""
    hosts = {ImageReference.parse(image.repository).domain for image in images}
    pushed = {}
    with RegistryClient(insecure_hosts=tuple(hosts) if insecure else ()) as client:
        for image in images:
            ref = f"{image.repository}:{image.tag}"
            pushed[ref] = push_image(client, ref, image.index)
    return pushed


def published_record(images: Sequence[ReleaseImage]) -> PublishedImages:
    """The record of ``images`` (one layersched image, a kube-scheduler image per minor)."""
    [layersched] = [image for image in images if image.minor is None]
    return PublishedImages(
        layersched.published(),
        {image.minor: image.published() for image in images if image.minor is not None},
    )
