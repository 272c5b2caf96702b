"""The node agent's publishing half: server-side apply only on change, the CRD's limits
applied before publishing (each image left out logged once, not on every resync), the
publish loop over the merged reader against an API double that validates with the CRD's
own schema, and what the agent says when the API refuses an object. The real API server
is in tests/e2e."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from layersched.agent import (
    ChangeSignal,
    CrioStorageReader,
    NodeImagesReader,
    NodeRead,
    Publisher,
    publish_loop,
)
from layersched.cli.main import main as cli_main
from layersched.core.errors import KubeError
from layersched.core.layers import Layer
from layersched.core.nodelayers import LIMITS, HeldImage, Limits, parse_document
from tests.fixtures.inventory_api import InventoryApi


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


# ------------------------------------------------------------------ publishing
class RecordingKube:
    """What the publisher sends to the API (apply) and what it reads (get)."""

    def __init__(self, existing: dict[str, Any] | None = None, fail: bool = False) -> None:
        self.applied: list[dict[str, Any]] = []
        self.existing = existing
        self.fail = fail

    def get(self, path: str) -> dict[str, Any]:
        if path.startswith("/api/v1/nodes/"):
            return {"metadata": {"name": path.rsplit("/", 1)[1], "uid": "uid-1"}}
        if self.existing is None:
            raise KubeError(f"reading {path}: 404 not found", 404)
        return self.existing

    def apply(
        self, path: str, document: Mapping[str, Any], field_manager: str, *, force: bool = True
    ) -> dict[str, Any]:
        if self.fail:
            raise KubeError(f"applying {path}: 503 unavailable", 503)
        assert field_manager == "layersched-agent"
        self.applied.append(dict(document))
        return dict(document)


IMG = HeldImage(("reg/a:1",), digest(100), (Layer(digest(1), 10),))


def test_publishes_only_when_something_changed() -> None:
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="containerd://1.6.20")
    assert publisher.publish([IMG], "content-store") is True
    assert publisher.publish([IMG], "content-store") is False  # the same: nothing sent
    assert publisher.publish([], "content-store") is True  # the image was removed
    assert len(kube.applied) == 2
    first = kube.applied[0]
    # owned by the Node: deleting the Node deletes its layers
    assert first["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "n1",
        "uid": "uid-1",
    }
    assert parse_document(first, "test").images == (IMG,)


def test_a_restarted_agent_adopts_what_is_published() -> None:
    kube = RecordingKube()
    Publisher(kube, "n1", runtime="x").publish([IMG], "content-store")
    restarted = Publisher(RecordingKube(existing=kube.applied[0]), "n1", runtime="x")
    restarted.adopt_published()
    assert restarted.publish([IMG], "content-store") is False  # nothing re-applied


def test_a_resync_puts_right_an_object_someone_else_changed() -> None:
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="x")
    publisher.publish([IMG], "content-store")
    tampered = dict(kube.applied[0], layers=[], images=[])
    kube.existing = tampered
    assert publisher.publish([IMG], "content-store") is False  # an event: trusts itself
    assert publisher.publish([IMG], "content-store", verify=True) is True  # a resync: checks
    kube.existing = kube.applied[-1]
    assert publisher.publish([IMG], "content-store", verify=True) is False  # now in step


def test_api_failures_surface_as_kube_errors() -> None:
    publisher = Publisher(RecordingKube(fail=True), "n1", runtime="x")
    with pytest.raises(KubeError, match="503"):
        publisher.publish([IMG], "content-store")
    assert publisher.stats.last_hash == ""  # so the next attempt applies again


# ------------------------------------------------------------------ the CRD's limits
def deep_image(n: int) -> HeldImage:
    """An image of one layer more than the CRD allows."""
    layers = tuple(Layer(digest(100_000 + i), 1) for i in range(LIMITS.max_layers_per_image + 1))
    return HeldImage((f"reg/deep{n}:1",), digest(200 + n), layers)


def test_images_past_the_limits_are_left_out_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = RecordingKube()
    publisher = Publisher(kube, "n1", runtime="x")
    huge = HeldImage(("reg/huge:1",), digest(300), (Layer(digest(2), 2**62),))
    caplog.set_level(logging.WARNING, logger="layersched.agent._publisher")
    for verify in (False, True, True):  # the first read, then two resyncs
        publisher.publish([IMG, deep_image(1), huge], "content-store", verify=verify)
    # the same node again: the object with its omissions is stable, nothing is sent
    assert publisher.publish([IMG, deep_image(1), huge], "content-store") is False
    document = kube.applied[-1]
    # the honest image is published; the two others are counted, by reason
    assert [i["names"] for i in document["images"]] == [["reg/a:1"]]
    assert document["truncated"] is True
    assert document["omittedImages"] == 2
    assert document["omittedByReason"] == {"layerCount": 1, "layerSize": 1}
    warnings = sorted(r.getMessage() for r in caplog.records)
    # one line per image over three publishes, saying which limit
    assert len(warnings) == 2
    assert "reg/deep1:1" in warnings[0] and "1001 layers, more than 1000" in warnings[0]
    assert "reg/huge:1" in warnings[1] and f"{2**62} bytes, outside 0..{2**40}" in warnings[1]
    # gone from the node, then back: said again
    publisher.publish([IMG], "content-store")
    publisher.publish([IMG, deep_image(1)], "content-store")
    assert len(caplog.records) == 3


def write_chain_storage(root: Path, images: list[tuple[str, list[tuple[str, int]]]]) -> None:
    """CRI-O's storage metadata: each image a chain of its (digest, size) layers."""
    layers: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for n, (name, chain) in enumerate(images):
        parent = None
        for m, (layer_digest, size) in enumerate(chain):
            layer_id = f"i{n}l{m}"
            layers.append(
                {
                    "id": layer_id,
                    "parent": parent,
                    "compressed-diff-digest": layer_digest,
                    "compressed-size": size,
                }
            )
            parent = layer_id
        records.append({"id": f"{n:064x}", "names": [name], "layer": parent, "digest": digest(n)})
    (root / "overlay-layers").mkdir(parents=True)
    (root / "overlay-images").mkdir(parents=True)
    (root / "overlay-layers" / "layers.json").write_text(json.dumps(layers))
    (root / "overlay-images" / "images.json").write_text(json.dumps(records))


def test_hostile_runtime_contents_publish_an_object_the_api_accepts(tmp_path: Path) -> None:
    # a node's CRI-O storage as a hostile tenant (or a broken runtime) could leave it
    long_name = "reg/" + "x" * LIMITS.max_name_chars
    write_chain_storage(
        tmp_path,
        [
            ("reg/honest:1", [(digest(1), 30_000_000), (digest(2), 1_000)]),
            ("reg/deep:1", [(digest(10_000 + i), 10) for i in range(1_001)]),
            (long_name, [(digest(3), 10)]),
            ("reg/huge:1", [(digest(4), 2**62)]),
            ("reg/newline:1", [(digest(5) + "\n", 10)]),
        ],
    )
    reader = NodeImagesReader([CrioStorageReader(tmp_path)])
    with InventoryApi() as api, api.client() as kube:
        publisher = Publisher(kube, "n1", runtime="cri-o://1.23.2")
        publish_loop(reader.read, publisher, ChangeSignal(), once=True)
    # the API (validating with the CRD's own schema) took it at once: no 422
    assert api.refused == []
    stored = api.objects["n1"]
    assert [i.names for i in parse_document(stored, "test").images] == [("reg/honest:1",)]
    # the two the CRD would refuse are counted; the digest with a newline and the 2^62-byte
    # layer never got past the reader (digests and sizes are checked where they are read)
    assert stored["omittedByReason"] == {"layerCount": 1, "nameLength": 1}
    problems = reader.read().problems
    assert "not a digest" in problems["reg/newline:1"]
    assert "1099511627776-byte cap" in problems["reg/huge:1"]


def test_an_object_the_api_refuses_says_which_crd_to_apply(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the cluster runs an older CRD that allows one image; this agent publishes two
    older = Limits(max_images=1)
    two = (IMG, HeldImage(("reg/b:1",), digest(101), (Layer(digest(7), 5),)))

    def read() -> NodeRead:
        return NodeRead(two, "content-store", {})

    with InventoryApi(limits=older) as api, api.client() as kube:
        publisher = Publisher(kube, "n1", runtime="x")
        with pytest.raises(KubeError) as refused:
            publish_loop(read, publisher, ChangeSignal(), once=True)
    assert refused.value.status == 422
    # the API's own reasons reach the log, with the fix
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "images: " in record.getMessage()
    assert "apply this version's deploy/crd.yaml" in record.getMessage()
    assert publisher.stats.api_failures == 1


# ------------------------------------------------------------------ the CLI
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # nothing to read
        ([], "--containerd SOCKET"),
        # a port that is not one
        (["--crio-storage", "/nonexistent", "--health-port", "70000"], "--health-port 70000"),
    ],
    ids=["no-runtime", "bad-health-port"],
)
def test_publish_flags_fail_with_one_clear_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = cli_main(["agent", "--publish", "--node-name", "n1", *argv])
    assert code != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
