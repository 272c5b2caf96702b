"""Where the agent reads a node's layers: CRI-O's storage, CRI annotations with the
registry as a last resort, and the reader that merges the configured sources into one
read (images, the object's ``source``, the images left out). The real containerd path is
in tests/integration/test_containerd_content.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from layersched.agent import CrioStorageReader, NodeImagesReader, cri_images
from layersched.core.errors import InputError
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.nodeimages import NodeImage
from layersched.core.nodelayersbuilder import build_document
from layersched.cri import CRIImage


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


# ------------------------------------------------------------------ CRI-O storage
def write_storage(
    root: Path, layers: list[dict[str, Any]], images: list[dict[str, Any]], driver: str = "overlay"
) -> None:
    (root / f"{driver}-layers").mkdir(parents=True)
    (root / f"{driver}-images").mkdir(parents=True)
    (root / f"{driver}-layers" / "layers.json").write_text(json.dumps(layers))
    (root / f"{driver}-images" / "images.json").write_text(json.dumps(images))


def test_crio_storage_walks_the_parent_chain(tmp_path: Path) -> None:
    # containers/storage records: base <- py <- app, with compressed digests and sizes
    write_storage(
        tmp_path,
        [
            {"id": "base", "compressed-diff-digest": digest(1), "compressed-size": 300},
            {
                "id": "py",
                "parent": "base",
                "compressed-diff-digest": digest(2),
                "compressed-size": 20,
            },
            {
                "id": "app",
                "parent": "py",
                "compressed-diff-digest": digest(3),
                "compressed-size": 1,
            },
        ],
        [
            {"id": "f" * 64, "names": ["reg/app:1"], "layer": "app", "digest": digest(9)},
            {"id": "e" * 64, "names": ["reg/local:1"], "layer": "local"},
        ],
    )
    reader = CrioStorageReader(tmp_path)
    images = reader.images()
    # base first, as in the manifest
    assert images == [
        NodeImage.held(
            ("reg/app:1",),
            digest(9),
            (Layer(digest(1), 300), Layer(digest(2), 20), Layer(digest(3), 1)),
        )
    ]
    # an image whose top layer is unknown is left out, and why is said
    assert "layer local is not in layers.json" in reader.problems["reg/local:1"]


ONE_LAYER = [{"id": "base", "compressed-diff-digest": digest(1), "compressed-size": 300}]


def test_crio_storage_of_another_driver_is_read_under_its_name(tmp_path: Path) -> None:
    # CRI-O with storage_driver = "vfs" keeps the same files as vfs-layers, vfs-images
    write_storage(
        tmp_path, ONE_LAYER, [{"id": "f" * 64, "names": ["r/a:1"], "layer": "base"}], "vfs"
    )
    reader = CrioStorageReader(tmp_path)
    assert reader.driver() == "vfs"
    assert [image.layers for image in reader.images()] == [(Layer(digest(1), 300),)]
    # overlay's files, when there, are the ones read (the driver CRI-O uses by default)
    write_storage(tmp_path, ONE_LAYER, [], "overlay")
    assert reader.driver() == "overlay"
    assert reader.images() == []


def test_crio_storage_of_several_other_drivers_is_refused(tmp_path: Path) -> None:
    write_storage(tmp_path / "a", ONE_LAYER, [], "vfs")
    write_storage(tmp_path / "a", ONE_LAYER, [], "zfs")
    with pytest.raises(InputError, match=r"several storage drivers \(vfs, zfs\)"):
        CrioStorageReader(tmp_path / "a").images()


def test_crio_storage_missing_says_what_to_mount(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="graphroot"):
        CrioStorageReader(tmp_path / "absent").images()


# ------------------------------------------------------------------ CRI annotations
def cri_image(name: str, annotations: dict[str, str] | None = None) -> CRIImage:
    return CRIImage(
        id=f"sha256:{abs(hash(name)):064x}"[:71],
        repo_tags=(name,),
        repo_digests=(),
        size_bytes=1,
        annotations=annotations or {},
        pinned=False,
    )


def test_cri_images_use_annotations_then_the_registry() -> None:
    ryax = cri_image("reg/ryax:1", {f"imageLayer.{digest(5)}": "500"})
    plain = cri_image("reg/plain:1")
    unknown = cri_image("reg/unknown:1")
    known = [NodeImage.held(("reg/known:1",), digest(8), ())]
    fallback = StaticLayerSource({"reg/plain:1": (Layer(digest(6), 60),)})
    held, problems, used = cri_images(
        [ryax, plain, unknown, cri_image("reg/known:1")], fallback, known
    )
    assert [(h.names, h.layers) for h in held] == [
        (("reg/ryax:1",), (Layer(digest(5), 500),)),
        (("reg/plain:1",), (Layer(digest(6), 60),)),
    ]
    assert used == {"annotations", "registry"}
    assert set(problems) == {"reg/unknown:1"}


# ------------------------------------------------------------------ the merge
class ListedImages:
    """A runtime's ListImages answer (what CRIClient.list_images returns)."""

    def __init__(self, *images: CRIImage) -> None:
        self.images = list(images)

    def list_images(self) -> Sequence[CRIImage]:
        return self.images


def one_image_storage(root: Path, name: str, layer_digest: str, size: int) -> None:
    write_storage(
        root,
        [{"id": "l1", "compressed-diff-digest": layer_digest, "compressed-size": size}],
        [{"id": "a" * 64, "names": [name], "layer": "l1", "digest": digest(90)}],
    )


def test_the_merge_reads_the_store_then_the_cri_images_it_does_not_explain(
    tmp_path: Path,
) -> None:
    one_image_storage(tmp_path, "reg/stored:1", digest(1), 100)
    cri = ListedImages(
        cri_image("reg/stored:1"),  # the store explains it: not read again
        cri_image("reg/ryax:1", {f"imageLayer.{digest(5)}": "500"}),
        cri_image("reg/bare:1"),  # nothing explains it, and no registry fallback
    )
    read = NodeImagesReader([CrioStorageReader(tmp_path)], cri).read()
    assert [(i.names, i.layers) for i in read.images] == [
        (("reg/stored:1",), (Layer(digest(1), 100),)),
        (("reg/ryax:1",), (Layer(digest(5), 500),)),
    ]
    # two ways (crio-storage, annotations): the object says "mixed"
    assert read.source == "mixed"
    assert set(read.problems) == {"reg/bare:1"}
    assert "--registry-fallback" in read.problems["reg/bare:1"]


def test_a_pull_between_the_store_read_and_the_cri_listing_is_published_once(
    tmp_path: Path,
) -> None:
    # the store read finds manifest digest(90) as reg/old:1; before the CRI listing,
    # reg/old:1 goes and the same manifest is pulled as reg/new:1. No name is shared,
    # so the CRI image is read too: the read lists digest(90) twice, and the one
    # writer of the object (core.nodelayersbuilder) publishes one entry, the store's names
    # first (issue 31: the guard the two deduplications keep; see the agent's README)
    one_image_storage(tmp_path, "reg/old:1", digest(1), 100)
    pulled = CRIImage(
        id=digest(91),
        repo_tags=("reg/new:1",),
        repo_digests=(f"reg/new@{digest(90)}",),
        size_bytes=1,
        annotations={f"imageLayer.{digest(1)}": "100"},
        pinned=False,
    )
    read = NodeImagesReader([CrioStorageReader(tmp_path)], ListedImages(pulled)).read()
    assert [i.digest for i in read.images] == [digest(90), digest(90)]
    document = build_document("n1", read.images, runtime="x", source=read.source)
    assert document["images"] == [
        {
            "names": ["reg/old:1", f"reg/new@{digest(90)}", "reg/new:1"],
            "digest": digest(90),
            "layers": [0],
        }
    ]


@pytest.mark.parametrize(
    ("store", "cri", "fallback", "source"),
    [
        # one store, nothing from the CRI: that store's name
        (True, (), False, "crio-storage"),
        # the CRI alone, every image by annotations
        (False, (("reg/ryax:1", {f"imageLayer.{digest(5)}": "500"}),), False, "annotations"),
        # the CRI alone, resolved through the registry
        (False, (("reg/plain:1", {}),), True, "registry"),
        # the CRI alone with nothing to read: still a CRI way, not a store's name
        (False, (), False, "annotations"),
    ],
    ids=["store-only", "annotations-only", "registry-only", "cri-empty"],
)
def test_the_source_label_names_the_one_way_used(
    tmp_path: Path,
    store: bool,
    cri: tuple[tuple[str, dict[str, str]], ...],
    fallback: bool,
    source: str,
) -> None:
    stores = []
    if store:
        one_image_storage(tmp_path, "reg/stored:1", digest(1), 100)
        stores.append(CrioStorageReader(tmp_path))
    listed = ListedImages(*(cri_image(n, a) for n, a in cri)) if cri or not store else None
    registry = StaticLayerSource({"reg/plain:1": (Layer(digest(6), 60),)}) if fallback else None
    assert NodeImagesReader(stores, listed, registry).read().source == source


def test_each_image_left_out_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cri = ListedImages(cri_image("reg/bare:1"))
    reader = NodeImagesReader([], cri)
    caplog.set_level(logging.WARNING, logger="layersched.agent._readers")
    for _ in range(3):  # three reads (a resync every minute): one warning
        reader.read()
    assert [r.getMessage() for r in caplog.records].count(
        "image reg/bare:1 left out: no layer annotations, and no registry fallback "
        "(--registry-fallback)"
    ) == 1
    cri.images = []  # removed ...
    reader.read()
    cri.images = [cri_image("reg/bare:1")]  # ... and pulled again: said again
    reader.read()
    assert len(caplog.records) == 2


@pytest.mark.parametrize(
    ("stores", "cri", "fallback", "message"),
    [
        # nothing to read at all
        (False, False, False, "--containerd SOCKET"),
        # the registry fallback resolves CRI images, so it needs the CRI
        (True, False, True, "pass --cri ENDPOINT too"),
    ],
    ids=["no-source", "fallback-without-cri"],
)
def test_a_reader_without_its_sources_says_which_flag(
    tmp_path: Path, stores: bool, cri: bool, fallback: bool, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        NodeImagesReader(
            [CrioStorageReader(tmp_path)] if stores else [],
            ListedImages() if cri else None,
            StaticLayerSource({}) if fallback else None,
        )


def test_a_store_that_cannot_be_read_fails_the_read(tmp_path: Path) -> None:
    # the publish loop retries a read that raises; an image it cannot explain is a problem
    reader = NodeImagesReader([CrioStorageReader(tmp_path / "absent")])
    with pytest.raises(InputError, match="graphroot"):
        reader.read()
