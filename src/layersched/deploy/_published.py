"""The images a release publishes, and the record that pins the install to them by digest.

A release publishes the layersched image and one image of layersched's kube-scheduler per
supported minor (:data:`PLUGIN_RELEASES`), each a multi-arch OCI index, and records what
it pushed in a JSON file (``make images`` writes it: ``layersched.images.release``):

.. code-block:: json

    {"layersched": {"repository": "ghcr.io/layersched/layersched", "tag": "0.1.0",
                    "digest": "sha256:…", "platforms": {"linux/amd64": {…}, …}},
     "kube-scheduler": {"1.37": {"repository": "ghcr.io/layersched/kube-scheduler",
                                 "tag": "v1.37.2-layersched.0.1.0", "digest": "sha256:…",
                                 "platforms": {…}}, …}}

``layersched deploy chart --images FILE`` and ``layersched deploy render --images FILE``
read it and pin the chart's values and the kustomization's ``images:`` to those digests.
Without a record (the committed chart and install/kustomize/) the same images are named by tag
(:func:`default_published`): what a release will publish, which no registry has before it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layersched import __version__
from layersched.core.errors import InputError
from layersched.deploy._tree import ImageRef
from layersched.deploy._versions import (
    PLUGIN_RELEASES,
    PUBLISHED_KUBE_SCHEDULER,
    plugin_image_tag,
)

#: The layersched image everyone can pull: what the release workflow publishes, the
#: chart's default, and ``layersched deploy render --image``'s (one setting everywhere).
PUBLISHED_IMAGE = "ghcr.io/layersched/layersched"
#: The record's keys.
LAYERSCHED_KEY = "layersched"
KUBE_SCHEDULER_KEY = "kube-scheduler"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_MINOR_KEY = re.compile(r"^1\.(\d+)$")


@dataclass(frozen=True, slots=True)
class PublishedImage:
    """One published image: its repository and tag, and its index's digest ("" when no
    release has pushed it yet)."""

    repository: str
    tag: str
    digest: str = ""
    #: Anything else the record says of it (each platform's manifest digest and size):
    #: kept, written back, read by nothing here.
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ref(self) -> ImageRef:
        """By digest when there is one, else by tag."""
        if self.digest:
            return ImageRef(self.repository, digest=self.digest)
        return ImageRef(self.repository, tag=self.tag)

    def to_json(self) -> dict[str, Any]:
        return {"repository": self.repository, "tag": self.tag, "digest": self.digest,
                **self.details}  # fmt: skip


@dataclass(frozen=True, slots=True)
class PublishedImages:
    """The layersched image and layersched's kube-scheduler per minor (``37``: 1.37's)."""

    layersched: PublishedImage
    kube_scheduler: Mapping[int, PublishedImage]

    def plugin_image(self, minor: int) -> PublishedImage:
        """The kube-scheduler of 1.``minor``; an InputError naming the minors there are."""
        try:
            return self.kube_scheduler[minor]
        except KeyError:
            have = ", ".join(f"1.{m}" for m in sorted(self.kube_scheduler)) or "none"
            raise InputError(
                f"Kubernetes 1.{minor}: no kube-scheduler of layersched's for it (published: "
                f"{have}); use the extender on this version, or name an image of your own"
            ) from None

    def to_json(self) -> dict[str, Any]:
        return {
            LAYERSCHED_KEY: self.layersched.to_json(),
            KUBE_SCHEDULER_KEY: {
                f"1.{minor}": image.to_json()
                for minor, image in sorted(self.kube_scheduler.items())
            },
        }


def default_published(version: str = __version__) -> PublishedImages:
    """What release ``version`` publishes, by tag (no digest: nothing pushed yet)."""
    return PublishedImages(
        PublishedImage(PUBLISHED_IMAGE, version),
        {
            minor: PublishedImage(PUBLISHED_KUBE_SCHEDULER, plugin_image_tag(minor, version))
            for minor in sorted(PLUGIN_RELEASES)
        },
    )


def _image(doc: Any, where: str) -> PublishedImage:
    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected an object with repository, tag and digest")
    fields = {}
    for key in ("repository", "tag", "digest"):
        value = doc.get(key)
        if not isinstance(value, str) or not value:
            raise InputError(f"{where}.{key}: expected a non-empty string")
        fields[key] = value
    if not _DIGEST.match(fields["digest"]):
        raise InputError(f"{where}.digest {fields['digest']!r}: expected sha256:<64 hex digits>")
    details = {k: v for k, v in doc.items() if k not in fields}
    return PublishedImage(fields["repository"], fields["tag"], fields["digest"], details)


def published_images_from_json(doc: Any, where: str) -> PublishedImages:
    """A record's content (``where`` names it in errors): both keys, every digest."""
    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected an object with {LAYERSCHED_KEY!r} and "
                         f"{KUBE_SCHEDULER_KEY!r}")  # fmt: skip
    layersched = _image(doc.get(LAYERSCHED_KEY), f"{where}: {LAYERSCHED_KEY}")
    minors = doc.get(KUBE_SCHEDULER_KEY)
    if not isinstance(minors, dict) or not minors:
        raise InputError(f"{where}: {KUBE_SCHEDULER_KEY}: expected an object by minor (1.37)")
    by_minor: dict[int, PublishedImage] = {}
    for key, image in minors.items():
        match = _MINOR_KEY.match(str(key))
        if match is None or int(match[1]) not in PLUGIN_RELEASES:
            have = ", ".join(f"1.{m}" for m in sorted(PLUGIN_RELEASES))
            raise InputError(f"{where}: {KUBE_SCHEDULER_KEY}: {key!r}: expected one of {have}")
        by_minor[int(match[1])] = _image(image, f"{where}: {KUBE_SCHEDULER_KEY}.{key}")
    return PublishedImages(layersched, dict(sorted(by_minor.items())))


def read_published_images(path: Path) -> PublishedImages:
    """The record at ``path`` (``make images --record``'s)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(
            f"reading the published images' record {path}: {err}; it is the file "
            "`make images` writes (--record)"
        ) from err
    return published_images_from_json(doc, str(path))


def write_published_images(path: Path, images: PublishedImages) -> None:
    """Write the record (sorted keys, one field a line)."""
    try:
        path.write_text(json.dumps(images.to_json(), indent=2, sort_keys=True) + "\n", "utf-8")
    except OSError as err:
        raise InputError(f"writing the published images' record {path}: {err}") from err
