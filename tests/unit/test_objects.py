"""The one v1 Node and Pod decoder (``layersched.core.objects``): every entry point's.

A NodeList file (JSON or YAML), an extender request, a watched Node and the testbed's
snapshots decode through the same structs and checks, so one bad field gets one message
naming the file and the field, whichever way it came in.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from layersched.core.errors import InputError
from layersched.core.indexbuilder import LayerIndexBuilder
from layersched.core.layerindex import LayerIndex
from layersched.core.layers import Layer
from layersched.core.nodeindexing import add_node_object, node_info
from layersched.core.objects import (
    decode_node,
    decode_node_list,
    decode_pod,
    nodes_from_document,
    pod_images,
)

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64

NODE = {
    "metadata": {
        "name": "n1",
        "labels": {"zone": "edge"},
        "annotations": {f"imageLayer.{D2}": "2048", "other": "x"},
    },
    "status": {
        "allocatable": {"cpu": "2", "memory": "4Gi"},
        "images": [
            {"names": ["reg/app@sha256:" + "f" * 64, "reg/app:1"], "sizeBytes": 10},
            {"names": ["reg/b:1"], "sizeBytes": 5, "layers": {D1: 1024}},
        ],
    },
}


def _nodes(doc: Any, suffix: str = ".json") -> list[Any]:
    origin = f"nodes{suffix}"
    data = (yaml.safe_dump(doc) if suffix == ".yaml" else json.dumps(doc)).encode()
    return [
        node_info(node, f"{origin}: items[{i}]")
        for i, node in enumerate(decode_node_list(data, origin))
    ]


@pytest.mark.parametrize("suffix", [".json", ".yaml"], ids=["json", "yaml"])
def test_node_with_all_three_layer_sources(suffix: str) -> None:
    [n] = _nodes({"items": [NODE]}, suffix)
    assert n.images[0].names[1] == "reg/app:1" and n.images[0].layers is None
    assert n.images[1].layers == (Layer(D1, 1024),)
    assert n.annotation_layers == (Layer(D2, 2048),)
    assert n.allocatable == {"cpu": "2", "memory": "4Gi"}
    assert n.labels == {"zone": "edge"}


def test_a_watched_node_decodes_as_a_file_node() -> None:
    # the watch hands parsed dicts; the one decoder gives the same NodeInfo
    assert node_info(decode_node(NODE, "watch"), "watch") == _nodes({"items": [NODE]})[0]
    assert node_info(decode_node(json.dumps(NODE).encode(), "watch"), "watch") == node_info(
        decode_node(NODE, "watch"), "watch"
    )


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("x", "expected object, got str"),
        ({"kind": "PodList", "items": []}, "expected 'NodeList'"),
        ({"items": [{"metadata": {}}]}, r"items\[0\]: metadata.name is missing"),
        (
            {"items": [{"metadata": {"name": "a"}, "status": {"images": [{"names": "x"}]}}]},
            r"items\[0\]: status.images\[0\].names: expected array, got str",
        ),
        (
            {"items": [{"metadata": {"name": "a"}, "status": {"images": [{"sizeBytes": -1}]}}]},
            r"sizeBytes: size -1 must be a non-negative integer",
        ),
        (
            {"items": [{"metadata": {"name": "a", "annotations": {f"imageLayer.{D1}": "big"}}}]},
            "must be the layer size in decimal bytes",
        ),
        (
            {"items": [{"metadata": {"name": "a"}, "status": {"allocatable": {"cpu": 2}}}]},
            r"status.allocatable\[...\]: expected str, got int",
        ),
        # kubectl's List of Pods is not a node list: the first non-Node item is named
        (
            {"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}, "spec": {}}]},
            r"items\[0\]: kind is 'Pod', expected 'Node'",
        ),
        # one Pod among Nodes: its index is named
        (
            {"items": [{"kind": "Node", "metadata": {"name": "a"}}, {"kind": "Pod"}]},
            r"items\[1\]: kind is 'Pod', expected 'Node'",
        ),
        # a single Pod object instead of a list
        ({"kind": "Pod", "spec": {}}, "kind is 'Pod', expected 'NodeList'"),
    ],
    ids=[
        "not-a-list",
        "wrong-kind",
        "no-name",
        "names-not-list",
        "negative-size",
        "bad-annotation",
        "allocatable-not-quantity",
        "list-of-pods",
        "pod-among-nodes",
        "a-pod",
    ],
)
@pytest.mark.parametrize("suffix", [".json", ".yaml"], ids=["json", "yaml"])
def test_bad_nodelists_name_file_and_field(doc: Any, message: str, suffix: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        _nodes(doc, suffix)
    assert str(info.value).startswith(f"nodes{suffix}")


def test_duplicate_node_names_are_refused_where_the_inventory_is_built() -> None:
    nodes = [{"metadata": {"name": "a"}}, {"metadata": {"name": "a"}}]
    builder = LayerIndexBuilder()
    with pytest.raises(InputError, match="'a' appears twice"):
        for i, node in enumerate(nodes_from_document({"items": nodes}, "nodes.json")):
            add_node_object(builder, node, f"nodes.json: items[{i}]")


def test_a_lenient_build_keeps_the_node_and_names_its_bad_image() -> None:
    # an extender request: one bad image must not cost the node its other images
    doc = {
        "metadata": {"name": "a", "annotations": {f"imageLayer.{D1}": "big"}},
        "status": {
            "images": [
                {"names": ["bad:1"], "sizeBytes": 1, "layers": {"md5:x": 1}},
                {"names": ["ok:1"], "sizeBytes": 7},
            ]
        },
    }
    problems: list[str] = []
    builder = LayerIndexBuilder(skip_invalid=True)
    add_node_object(builder, decode_node(doc, "Nodes.items[0]"), "Nodes.items[0]", problems)
    inventory: LayerIndex = builder.build()
    assert inventory.node_image_names(0) == ["ok:1"]
    assert len(problems) == 2 and all(p.startswith("node 'a': ignoring") for p in problems)


def test_pod_images_in_upstream_order_with_image_volumes() -> None:
    pod = pod_images(
        decode_pod(
            {
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {
                    "initContainers": [{"name": "i", "image": "init:1"}],
                    "containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}],
                    "volumes": [
                        {"name": "v", "image": {"reference": "data:1"}},
                        {"name": "e", "emptyDir": {}},
                    ],
                },
            },
            "pod.yaml",
        ),
        "pod.yaml",
    )
    assert pod.name == "ns/p"
    assert pod.images == ("init:1", "a:1", "b:1")
    assert pod.pulled == ("init:1", "a:1", "b:1", "data:1")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"kind": "Deployment"}, "expected 'Pod'"),
        ({"kind": "Pod"}, "spec is missing"),
        ({"spec": {"containers": []}}, "spec.containers is empty"),
        ({"spec": {"containers": [{"name": "a"}]}}, r"spec.containers\[0\].image is missing"),
        ({"spec": {"containers": "a:1"}}, r"spec.containers: expected array, got str"),
        ("a pod", "expected a v1 Pod object"),
        (
            {"spec": {"containers": [{"image": "a"}], "volumes": [{"name": "v", "image": {}}]}},
            r"spec.volumes\[0\].image.reference is missing",
        ),
        (
            {"spec": {"containers": [{"image": "a"}], "volumes": {"name": "v"}}},
            "spec.volumes: expected array, got object",
        ),
    ],
    ids=[
        "kind",
        "no-spec",
        "no-containers",
        "no-image",
        "containers-not-list",
        "not-object",
        "no-volume-reference",
        "volumes-map",
    ],
)
def test_bad_pods(doc: Any, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        pod_images(decode_pod(doc, "pod.yaml"), "pod.yaml")
    assert str(info.value).startswith("pod.yaml: ")
