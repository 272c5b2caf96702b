"""A node's images and their compressed layers, read from containerd's content store.

The CRI plugin keeps one image record per name (a tag, a digest reference, and the
image ID ``sha256:<config>``), all pointing at the same manifest or index. Manifests and
indexes stay in the content store after a pull even when layer blobs are discarded
(``discard_unpacked_layers``), so the layers come from there, not from a registry.

For an index, the manifest used is the one the node pulled: of the entries for the
node's platform, the first present in the content store (a pull fetches only that one).
Manifests are immutable, so each is read once and remembered.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from layersched.containerd._client import ContainerdClient, ImageRecord
from layersched.core.errors import CRIError, ManifestError
from layersched.core.layers import Layer
from layersched.core.manifest import DEFAULT_PLATFORM, ImageIndex, Platform, parse_manifest
from layersched.core.nodeimages import NodeImage
from layersched.core.reference import ImageName

log = logging.getLogger(__name__)

#: Manifests remembered (a node holding more distinct images reads the rest again).
MAX_CACHED_MANIFESTS = 4096
#: The CRI plugin names an image's ID record by the config digest alone.
_ID_PREFIX = "sha256:"


class ContentStoreReader:
    """Turns containerd's image records into :class:`NodeImage` entries."""

    #: The ``source`` of a NodeLayerInventory read from here.
    source = "content-store"

    def __init__(self, client: ContainerdClient, platform: Platform = DEFAULT_PLATFORM) -> None:
        self.client = client
        self.platform = platform
        self._layers: OrderedDict[str, tuple[Layer, ...]] = OrderedDict()
        #: Images whose layers could not be read in the last pass, and why.
        self.problems: dict[str, str] = {}

    def images(self) -> list[NodeImage]:
        """Every image of the namespace with its layers; an image whose manifest cannot
        be read is left out and described in :attr:`problems`."""
        by_target: dict[str, list[ImageRecord]] = {}
        for record in self.client.list_images():
            by_target.setdefault(record.digest, []).append(record)
        self.problems = {}
        held = []
        for digest, records in sorted(by_target.items()):
            names = tuple(
                sorted(ImageName(r.name) for r in records if not r.name.startswith(_ID_PREFIX))
            )
            try:
                layers = self._manifest_layers(records[0])
            except (CRIError, ManifestError) as err:
                self.problems[names[0] if names else digest] = str(err)
                continue
            held.append(NodeImage.held(names, digest, layers))
        return held

    def _manifest_layers(self, record: ImageRecord) -> tuple[Layer, ...]:
        cached = self._layers.get(record.digest)
        if cached is not None:
            self._layers.move_to_end(record.digest)
            return cached
        source = f"{record.name} ({record.digest})"
        document = parse_manifest(
            self.client.read_blob(record.digest), record.media_type, source=source
        )
        if isinstance(document, ImageIndex):
            child = self._pulled_child(document, source)
            manifest = parse_manifest(
                self.client.read_blob(child), None, source=f"{source} -> {child}"
            )
            if isinstance(manifest, ImageIndex):
                raise ManifestError(f"{source}: an index inside an index is not an image")
            layers = manifest.layers
        else:
            layers = document.layers
        self._layers[record.digest] = layers
        while len(self._layers) > MAX_CACHED_MANIFESTS:
            self._layers.popitem(last=False)
        return layers

    def _pulled_child(self, index: ImageIndex, source: str) -> str:
        candidates = [
            d.digest for d in index.manifests if d.platform and self.platform.matches(d.platform)
        ]
        for digest in candidates:
            if self.client.has_blob(digest):
                return digest
        present = [d.digest for d in index.manifests if self.client.has_blob(d.digest)]
        if present:  # pulled for another platform (--platform differs from the node's)
            return present[0]
        raise ManifestError(
            f"{source}: no manifest of the index is in the content store "
            f"(platform {self.platform}): was the pull interrupted?"
        )
