"""Where the agent reads a node's layers: the runtime itself, the registry only as a
last resort.

* **containerd**: the content store (:class:`layersched.containerd.ContentStoreReader`).
* **CRI-O**: its containers/storage metadata: ``overlay-images/images.json`` names each
  image and its top layer, ``overlay-layers/layers.json`` gives every layer's parent,
  ``compressed-diff-digest`` and ``compressed-size``. The chain from the top layer down
  is the image's layers, base first. Another storage driver keeps the same files under
  its own name (``vfs-images``, ``vfs-layers``): the driver is the one whose files are
  there, overlay first.
* **Ryax annotations**: images whose CRI ``spec.annotations`` carry
  ``imageLayer.<digest>: "<size>"`` (the Ryax-patched CRI-O, or layersched's relay).
* **Registry**: a CRI image none of the above explains is resolved through a
  :class:`~layersched.core.layers.LayerSource` by its names.

:class:`NodeImagesReader` combines the ones configured into one read: the images, the
``source`` label of the published object, and the images left out and why.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.layers import Layer, LayerSource, check_digest, check_size
from layersched.core.nodeimages import NodeImage, annotation_layers
from layersched.core.nodelayers import shown
from layersched.core.reference import ImageName, parse_or_none

log = logging.getLogger(__name__)

#: CRI-O's default containers/storage root.
DEFAULT_CRIO_STORAGE = "/var/lib/containers/storage"
#: containers/storage's driver for CRI-O on Linux (the default; see CrioStorageReader).
CRIO_DRIVER = "overlay"
_IMAGES_SUFFIX = "-images"


class ImageReader(Protocol):
    """Reads the images a node holds with their layers (a runtime's own store:
    :class:`layersched.containerd.ContentStoreReader`, :class:`CrioStorageReader`)."""

    #: The ``source`` value of the published object.
    @property
    def source(self) -> str: ...

    #: Images the last :meth:`images` left out, and why.
    @property
    def problems(self) -> Mapping[str, str]: ...

    def images(self) -> list[NodeImage]: ...


class CRIImageLike(Protocol):
    """What the readers need of a CRI image (``layersched.cri.CRIImage`` fits)."""

    @property
    def id(self) -> str: ...
    @property
    def repo_tags(self) -> Sequence[ImageName]: ...
    @property
    def repo_digests(self) -> Sequence[ImageName]: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...


def _json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise InputError(
            f"{path}: cannot read CRI-O's storage metadata ({err.strerror}): is --crio-storage "
            "the storage root (graphroot) and mounted into the agent?"
        ) from None
    except ValueError as err:
        raise InputError(f"{path}: not JSON ({err})") from None


@dataclass
class CrioStorageReader:
    """Reads CRI-O's containers/storage metadata files (read-only)."""

    root: Path
    source: str = "crio-storage"
    #: Images skipped in the last read, and why.
    problems: dict[str, str] = field(default_factory=dict)

    def driver(self) -> str:
        """The storage driver whose metadata is under the root: overlay when its files are
        there (or nobody's are: its missing file is then the error), else the only other
        one; an InputError when several others are."""
        found = sorted(
            path.name.removesuffix(_IMAGES_SUFFIX)
            for path in self.root.glob(f"*{_IMAGES_SUFFIX}")
            if (path / "images.json").is_file()
        )
        if not found or CRIO_DRIVER in found:
            return CRIO_DRIVER
        if len(found) > 1:
            raise InputError(
                f"{self.root}: images of several storage drivers ({', '.join(found)}) and none "
                f"of {CRIO_DRIVER}: point --crio-storage at the root CRI-O's storage_driver uses"
            )
        return found[0]

    def images(self) -> list[NodeImage]:
        driver = self.driver()
        images_file = self.root / f"{driver}{_IMAGES_SUFFIX}" / "images.json"
        layers_file = self.root / f"{driver}-layers" / "layers.json"
        raw_layers = _json_file(layers_file)
        raw_images = _json_file(images_file)
        if not isinstance(raw_layers, list) or not isinstance(raw_images, list):
            raise InputError(f"{self.root}: images.json and layers.json must hold JSON lists")
        by_id = {str(layer.get("id")): layer for layer in raw_layers if isinstance(layer, dict)}
        self.problems = {}
        held = []
        for raw in raw_images:
            if not isinstance(raw, dict):
                continue
            names = tuple(ImageName(str(n)) for n in raw.get("names") or [])
            key = names[0] if names else str(raw.get("id"))
            try:
                layers = self._chain(by_id, raw.get("layer"), f"{images_file}: image {key!r}")
            except InputError as err:
                self.problems[key] = str(err)
                continue
            digest = raw.get("digest") or f"sha256:{raw.get('id')}"
            held.append(NodeImage.held(names, str(digest), layers))
        return held

    @staticmethod
    def _chain(by_id: Mapping[str, Any], top: object, where: str) -> tuple[Layer, ...]:
        layers: list[Layer] = []
        seen: set[str] = set()
        current = top
        while isinstance(current, str) and current:
            if current in seen:
                raise InputError(f"{where}: layer {current} is its own ancestor")
            seen.add(current)
            layer = by_id.get(current)
            if layer is None:
                raise InputError(f"{where}: layer {current} is not in layers.json")
            digest = layer.get("compressed-diff-digest")
            if not digest:
                raise InputError(
                    f"{where}: layer {current} has no compressed-diff-digest (built locally, "
                    "not pulled): its compressed size is unknown"
                )
            layers.append(
                Layer(
                    check_digest(digest, f"{where}: compressed-diff-digest"),
                    check_size(layer.get("compressed-size", 0), f"{where}: compressed-size"),
                )
            )
            current = layer.get("parent")
        layers.reverse()
        return tuple(layers)


class CRIImageLister(Protocol):
    """What the merge needs of a CRI client (``layersched.cri.CRIClient`` fits)."""

    def list_images(self) -> Sequence[CRIImageLike]: ...


def _names(image: CRIImageLike) -> tuple[ImageName, ...]:
    return (*image.repo_digests, *image.repo_tags)


def cri_images(
    images: Iterable[CRIImageLike],
    fallback: LayerSource | None,
    known: Iterable[NodeImage] = (),
) -> tuple[list[NodeImage], dict[str, str], set[str]]:
    """The CRI images no other reader explained: by their Ryax annotations, else through
    ``fallback``. Returns the images, the ones skipped (name -> why), and which ways were
    used (``annotations``, ``registry``).

    An image is explained when one of its names is among ``known``'s names.
    """
    covered = {name for image in known for name in image.names}
    held: list[NodeImage] = []
    problems: dict[str, str] = {}
    used: set[str] = set()
    for image in images:
        names = _names(image)
        if covered.intersection(names):
            continue
        key = names[0] if names else image.id
        where = f"CRI image {key!r}: spec.annotations"
        layers: Sequence[Layer] = annotation_layers(image.annotations, where, problems=[])
        if layers:
            used.add("annotations")
        elif fallback is not None and names:
            try:
                layers = _resolve(fallback, names)
            except LayerResolutionError as err:
                problems[key] = str(err)
                continue
            used.add("registry")
        else:
            problems[key] = "no layer annotations, and no registry fallback (--registry-fallback)"
            continue
        pinned = parse_or_none(image.repo_digests[0]) if image.repo_digests else None
        digest = pinned.digest if pinned is not None and pinned.digest else image.id
        held.append(NodeImage.held(names, digest, tuple(layers)))
    return held, problems, used


def _resolve(source: LayerSource, names: Sequence[ImageName]) -> tuple[Layer, ...]:
    reason = ""
    for name in names:
        try:
            return source.resolve(name)
        except LayerResolutionError as err:
            reason = str(err)
    raise LayerResolutionError(reason)


@dataclass(frozen=True, slots=True)
class NodeRead:
    """One read of a node's runtime."""

    images: tuple[NodeImage, ...]
    #: The object's ``source``: the one way the layers came, or ``mixed``.
    source: str
    #: Images left out of the read (no layers could be found), name -> why.
    problems: Mapping[str, str]


#: ``source`` when the CRI alone is read and no image had layers to tell how.
CRI_SOURCE = "annotations"


class NodeImagesReader:
    """Reads a node's images from every configured source and merges them.

    The runtime's own stores come first (containerd's content store, CRI-O's storage);
    then the CRI images none of them explains, by their layer annotations, else through
    ``fallback`` (the registry). Each image left out is logged once, when it first is,
    not on every read.
    """

    def __init__(
        self,
        stores: Sequence[ImageReader] = (),
        cri: CRIImageLister | None = None,
        fallback: LayerSource | None = None,
    ) -> None:
        if not stores and cri is None:
            raise InputError(
                "the agent needs a runtime to read: --containerd SOCKET (containerd's content "
                "store), --crio-storage DIR (CRI-O), or --cri ENDPOINT (annotations/registry)"
            )
        if fallback is not None and cri is None:
            raise InputError("--registry-fallback resolves CRI images: pass --cri ENDPOINT too")
        self.stores = tuple(stores)
        self.cri = cri
        self.fallback = fallback
        self._reported: set[tuple[str, str]] = set()

    def read(self) -> NodeRead:
        """Every image the node holds with its layers (LayerschedError when a source
        cannot be read at all: the caller retries)."""
        held: list[NodeImage] = []
        used: list[str] = []
        problems: dict[str, str] = {}
        for store in self.stores:
            held.extend(store.images())
            used.append(store.source)
            problems.update(store.problems)
        if self.cri is not None:
            more, skipped, ways = cri_images(self.cri.list_images(), self.fallback, held)
            held.extend(more)
            used.extend(sorted(ways))
            problems.update(skipped)
        self._report(problems)
        default = self.stores[0].source if self.stores else CRI_SOURCE
        source = used[0] if len(set(used)) == 1 else "mixed" if used else default
        return NodeRead(tuple(held), source, problems)

    def _report(self, problems: Mapping[str, str]) -> None:
        current = set(problems.items())
        for name, why in sorted(current - self._reported):
            log.warning("image %s left out: %s", shown(name), why)
        self._reported = current  # one that goes away and comes back is logged again
