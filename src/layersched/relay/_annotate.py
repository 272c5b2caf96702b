"""Annotation injection: the Ryax-patched CRI-O's ``imageLayer.*`` for any runtime.

With injection on, every image in a ``ListImages`` or ``ImageStatus`` answer
whose layers the :class:`ImageLayers` source knows gets one
``spec.annotations`` entry per compressed layer,
``"imageLayer.<digest>": "<compressed size in decimal bytes>"``, which is what
the Ryax-patched CRI-O emits. Images the source does not know, and images that
already carry an ``imageLayer.*`` annotation (a patched runtime), go out
unchanged; so does the whole answer if the source fails. Every other field,
including fields this relay's message subset does not know, is kept: protobuf
keeps unknown fields when a message is parsed and serialised again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, cast

from google.protobuf.message import DecodeError

from layersched.containerd import ContentStoreReader
from layersched.core.errors import LayerResolutionError, LayerschedError
from layersched.core.layers import Layer, LayerSource
from layersched.core.nodeimages import LAYER_ANNOTATION_PREFIX, NodeImage
from layersched.core.reference import ImageName
from layersched.cri._gen import api_pb2
from layersched.relay._methods import Method
from layersched.relay._metrics import RelayMetrics

_log = logging.getLogger(__name__)

#: Image IDs are content digests (an image's config), so an answer never goes
#: stale; the cap only bounds memory on a node that churns through images.
DEFAULT_CACHE_IMAGES = 4096


class ImageLayers(Protocol):
    """Where the relay learns an image's compressed layers."""

    def image_layers(self, image_id: str, names: Sequence[ImageName]) -> Sequence[Layer] | None:
        """The layers of the image with this ID (``names``: its repo digests and tags),
        or None when unknown. May block; raises :class:`LayerschedError` on failure."""
        ...


def layer_annotations(layers: Sequence[Layer]) -> dict[str, str]:
    """``{"imageLayer.<digest>": "<size>"}`` for each layer, as the patched CRI-O writes."""
    return {f"{LAYER_ANNOTATION_PREFIX}{layer.digest}": str(layer.size_bytes) for layer in layers}


class Annotator:
    """Rewrites ListImages/ImageStatus answers; caches layers by image ID."""

    def __init__(
        self,
        source: ImageLayers,
        metrics: RelayMetrics,
        cache_images: int = DEFAULT_CACHE_IMAGES,
    ) -> None:
        self.source = source
        self.metrics = metrics
        self.cache_images = cache_images
        self._cache: OrderedDict[str, tuple[Layer, ...]] = OrderedDict()

    async def _layers(self, image: api_pb2.Image) -> tuple[Layer, ...] | None:
        cached = self._cache.get(image.id)
        if cached is not None:
            self._cache.move_to_end(image.id)
            return cached
        names = cast("list[ImageName]", [*image.repo_digests, *image.repo_tags])
        found = await asyncio.to_thread(self.source.image_layers, image.id, names)
        if found is None:
            return None
        layers = tuple(found)
        self._cache[image.id] = layers
        while len(self._cache) > self.cache_images:
            self._cache.popitem(last=False)
        return layers

    async def _annotate(self, images: Sequence[api_pb2.Image]) -> int:
        changed = 0
        for image in images:
            if any(key.startswith(LAYER_ANNOTATION_PREFIX) for key in image.spec.annotations):
                continue
            layers = await self._layers(image)
            if not layers:
                self.metrics.unannotated_images.inc()
                continue
            image.spec.annotations.update(layer_annotations(layers))
            self.metrics.annotated_images.inc()
            changed += 1
        return changed

    async def answer(self, method: Method, response: bytes) -> bytes:
        """The runtime's answer to ``method``, annotated where it lists images
        (``ListImages``, ``ImageStatus``); any other answer, and one that does not parse,
        unchanged."""
        rewrite: Callable[[bytes], Awaitable[bytes]] | None = None
        if method.is_image_call("ListImages"):
            rewrite = self.list_images
        elif method.is_image_call("ImageStatus"):
            rewrite = self.image_status
        if rewrite is None:
            return response
        try:
            return await rewrite(response)
        except DecodeError as err:
            _log.warning("%s: answer does not parse (%s): passed on unchanged", method.path, err)
            return response

    async def list_images(self, data: bytes) -> bytes:
        """A ``ListImagesResponse`` with annotations added."""
        response = api_pb2.ListImagesResponse.FromString(data)
        return await self._rewrite(response, list(response.images), data)

    async def image_status(self, data: bytes) -> bytes:
        """An ``ImageStatusResponse`` with annotations added."""
        response = api_pb2.ImageStatusResponse.FromString(data)
        images = [response.image] if response.HasField("image") else []
        return await self._rewrite(response, images, data)

    async def _rewrite(
        self,
        response: api_pb2.ListImagesResponse | api_pb2.ImageStatusResponse,
        images: list[api_pb2.Image],
        data: bytes,
    ) -> bytes:
        try:
            changed = await self._annotate(images)
        except LayerschedError as err:
            self.metrics.layer_source_errors.inc()
            _log.warning("annotating images: %s (answer passed on unchanged)", err)
            return data
        return response.SerializeToString() if changed else data


class LayersByName:
    """:class:`ImageLayers` from a :class:`~layersched.core.layers.LayerSource`,
    trying the image's names in turn (repo digests first, so a tag that moved on
    in the registry does not give another image's layers)."""

    def __init__(self, source: LayerSource) -> None:
        self.source = source

    def image_layers(self, image_id: str, names: Sequence[ImageName]) -> Sequence[Layer] | None:
        for name in names:
            try:
                return self.source.resolve(name)
            except LayerResolutionError:
                continue
        return None


class HeldImagesReader(Protocol):
    """A runtime's own record of the images it holds: containerd's content store
    (:class:`~layersched.containerd.ContentStoreReader`) or CRI-O's containers/storage
    (``layersched.agent.CrioStorageReader``)."""

    def images(self) -> list[NodeImage]: ...


class ContentStoreLayers:
    """:class:`ImageLayers` from the runtime's own store: containerd's content store (the
    node's own manifests) or CRI-O's storage (its layers' compressed digests and sizes).

    Both name their image records by the same tags and digest references the CRI answer
    lists, so an image is found by any of its names. The name index is rebuilt from the
    store only when a name is not in it (a new pull).
    """

    def __init__(self, reader: HeldImagesReader | ContentStoreReader) -> None:
        self.reader = reader
        self._by_name: dict[ImageName, tuple[Layer, ...]] = {}

    def _find(self, names: Sequence[ImageName]) -> tuple[Layer, ...] | None:
        for name in names:
            found = self._by_name.get(name)
            if found is not None:
                return found
        return None

    def image_layers(self, image_id: str, names: Sequence[ImageName]) -> Sequence[Layer] | None:
        found = self._find(names)
        if found is None:
            self._by_name = {
                name: held.known_layers for held in self.reader.images() for name in held.names
            }
            found = self._find(names)
        return found
