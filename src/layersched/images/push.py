"""Pushing the install's images and pinning them in an overlay of ``install/kustomize/``.

:func:`build_and_push` builds both images (:mod:`layersched.images.build`) and pushes them
to a registry; :func:`write_overlay` writes an overlay of ``install/kustomize/`` naming them by the
digests just pushed, so that ``kubectl apply -k DIR`` installs exactly these bytes and
``kubectl delete -k DIR`` removes them. ``layersched deploy images|overlay`` run these.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from layersched import __version__
from layersched.builds import REPO_ROOT
from layersched.deploy import (
    ADMISSION_PRIVATE_FILES,
    KUBERNETES_VERSION,
    KUSTOMIZATION,
    ImageRef,
    StackSpec,
    admission_overlay_files,
    kustomization,
    overlay_images,
    overlay_tls,
    write_tree,
)
from layersched.images.build import (
    build_kube_scheduler_image,
    build_layersched_image,
    image_size_bytes,
)
from layersched.images.oci import BuiltImage, push_image
from layersched.registry import RegistryClient

DEPLOY_DIR = REPO_ROOT / "install" / "kustomize"
LAYERSCHED_REPOSITORY = "layersched/layersched"
KUBE_SCHEDULER_REPOSITORY = "layersched/kube-scheduler"


@dataclass(frozen=True, slots=True)
class PushedImage:
    """One image in a registry: where, its manifest digest and compressed size."""

    ref: ImageRef
    size_bytes: int
    layer_sizes_bytes: tuple[int, ...]
    build_s: float


@dataclass(frozen=True, slots=True)
class PushedStack:
    layersched: PushedImage
    kube_scheduler: PushedImage


def _push(
    client: RegistryClient,
    registry: str,
    repository: str,
    tag: str,
    image: BuiltImage,
    build_s: float,
) -> PushedImage:
    push_image(client, f"{registry}/{repository}:{tag}", image)
    return PushedImage(
        ImageRef(f"{registry}/{repository}", digest=image.digest),
        image_size_bytes(image),
        tuple(layer.size_bytes for layer in image.layers),
        build_s,
    )


def push_layersched_image(
    registry: str,
    *,
    insecure: bool = True,
    progress: Callable[[str], None] | None = None,
) -> PushedImage:
    """Build the layersched image and push it to ``registry`` (an install whose
    kube-scheduler is upstream's needs only this one)."""
    say = progress or (lambda _message: None)
    started = time.monotonic()
    layersched = build_layersched_image(progress=say)
    layersched_s = time.monotonic() - started
    say(f"pushing to {registry}")
    with RegistryClient(insecure_hosts=(registry,) if insecure else ()) as client:
        return _push(client, registry, LAYERSCHED_REPOSITORY, __version__, layersched, layersched_s)


def build_and_push(
    registry: str,
    kube_scheduler_bin: Path,
    *,
    insecure: bool = True,
    progress: Callable[[str], None] | None = None,
) -> PushedStack:
    """Build both images (:mod:`layersched.images.build`) and push them to ``registry``."""
    say = progress or (lambda _message: None)
    layersched = push_layersched_image(registry, insecure=insecure, progress=say)
    started = time.monotonic()
    scheduler = build_kube_scheduler_image(kube_scheduler_bin, KUBERNETES_VERSION)
    scheduler_s = time.monotonic() - started
    with RegistryClient(insecure_hosts=(registry,) if insecure else ()) as client:
        return PushedStack(
            layersched,
            _push(
                client,
                registry,
                KUBE_SCHEDULER_REPOSITORY,
                KUBERNETES_VERSION,
                scheduler,
                scheduler_s,
            ),
        )


def relative_base(base: Path, overlay: Path) -> str:
    """``base`` as an overlay in ``overlay`` names it (a relative path)."""
    return os.path.relpath(base.resolve(), overlay.resolve())


def write_overlay(
    out: Path, images: PushedStack, base: Path = DEPLOY_DIR, spec: StackSpec | None = None
) -> list[str]:
    """An overlay of ``base`` that pins the images to the pushed digests and, before
    Kubernetes 1.30, carries the admission webhook's TLS (issued here, or kept from an
    earlier overlay in ``out`` while it is good: :func:`layersched.deploy.overlay_tls`)."""
    spec = spec or StackSpec()
    admission_files, admission_fields = admission_overlay_files(spec, overlay_tls(out, spec))
    files = {
        KUSTOMIZATION: kustomization(
            {
                "bases": [relative_base(base, out)],
                **admission_fields,
                "images": overlay_images(images.layersched.ref, images.kube_scheduler.ref),
            }
        ),
        **admission_files,
    }
    return write_tree(out, files, private=ADMISSION_PRIVATE_FILES)
