"""Parsing of user inputs: NodeList, Pod, LAYERS.json — errors name the file and field."""

from __future__ import annotations

from typing import Any

import pytest

from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.inventory import node_from_json, nodes_from_json
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.pod import pod_from_json

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def test_node_with_all_three_layer_sources() -> None:
    doc = {
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
    n = node_from_json(doc, "nodes.json")
    assert n.images[0].names[1] == "reg/app:1" and n.images[0].layers is None
    assert n.images[1].layers == (Layer(D1, 1024),)
    assert n.annotation_layers == (Layer(D2, 2048),)
    assert n.allocatable == {"cpu": "2", "memory": "4Gi"}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("x", "expected a v1 NodeList"),
        ({"kind": "PodList", "items": []}, "expected 'NodeList'"),
        ({"items": [{"metadata": {}}]}, r"items\[0\]: metadata.name is missing"),
        (
            {"items": [{"metadata": {"name": "a"}, "status": {"images": [{"names": "x"}]}}]},
            r"status.images\[0\].names must be a list",
        ),
        (
            {"items": [{"metadata": {"name": "a"}, "status": {"images": [{"sizeBytes": -1}]}}]},
            r"sizeBytes: size -1 must be a non-negative integer",
        ),
        (
            {"items": [{"metadata": {"name": "a", "annotations": {f"imageLayer.{D1}": "big"}}}]},
            "must be the layer size in decimal bytes",
        ),
        ({"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "a"}}]}, "appears twice"),
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
        "dup",
        "list-of-pods",
        "pod-among-nodes",
        "a-pod",
    ],
)
def test_bad_nodelists_name_file_and_field(doc: Any, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        nodes_from_json(doc, "nodes.json")
    assert str(info.value).startswith("nodes.json")


def test_pod_images_in_upstream_order() -> None:
    pod = pod_from_json(
        {
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {
                "initContainers": [{"name": "i", "image": "init:1"}],
                "containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}],
            },
        },
        "pod.yaml",
    )
    assert pod.images == ("init:1", "a:1", "b:1")
    assert pod.image_volumes == ()


def test_pod_image_volumes_in_volume_order() -> None:
    # spec.volumes[*].image.reference (KEP-4639), other volume kinds skipped; not in .images
    pod = pod_from_json(
        {
            "spec": {
                "containers": [{"name": "a", "image": "a:1"}],
                "volumes": [
                    {"name": "v1", "image": {"reference": "data:2", "pullPolicy": "Always"}},
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "v2", "image": {"reference": "models:3"}},
                ],
            },
        },
        "pod.yaml",
    )
    assert pod.image_volumes == ("data:2", "models:3")
    assert pod.images == ("a:1",)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"kind": "Deployment"}, "expected 'Pod'"),
        ({"kind": "Pod"}, "spec is missing"),
        ({"spec": {"containers": []}}, "spec.containers is empty"),
        ({"spec": {"containers": [{"name": "a"}]}}, r"spec.containers\[0\].image is missing"),
        (
            {"spec": {"containers": [{"image": "a"}], "volumes": [{"name": "v", "image": {}}]}},
            r"spec.volumes\[0\].image.reference is missing",
        ),
        (
            {"spec": {"containers": [{"image": "a"}], "volumes": {"name": "v"}}},
            "spec.volumes must be a list",
        ),
    ],
    ids=["kind", "no-spec", "no-containers", "no-image", "no-volume-reference", "volumes-map"],
)
def test_bad_pods(doc: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        pod_from_json(doc, "pod.yaml")


def test_layers_json_matches_after_latest_rule() -> None:
    source = StaticLayerSource.from_json({"app": [{"digest": D1, "size": 3}]}, "layers.json")
    assert source.resolve("app:latest") == (Layer(D1, 3),)


@pytest.mark.parametrize(
    ("key", "image", "found"),
    [
        # kubelet reports the registry form of the pod's 'nginx:1.25'
        ("nginx:1.25", "docker.io/library/nginx:1.25", True),
        # and the other way round: keyed as kubelet reports, asked as the pod spec says
        ("docker.io/library/nginx:1.25", "nginx:1.25", True),
        # the :latest rule and the canonical form together
        ("nginx", "docker.io/library/nginx:latest", True),
        # index.docker.io is docker.io
        ("index.docker.io/library/nginx:1.25", "nginx:1.25", True),
        # another registry is another image
        ("quay.io/nginx:1.25", "nginx:1.25", False),
        # another tag is another image
        ("nginx:1.25", "docker.io/library/nginx:1.26", False),
        # a digest names the content, the tag beside it does not: kubelet reports the
        # pod's 'nginx:1.25@sha256:2…' as 'docker.io/library/nginx@sha256:2…'
        (f"nginx:1.25@{D2}", f"docker.io/library/nginx@{D2}", True),
        # and the other way round: keyed as kubelet reports, asked as the pod spec says
        (f"docker.io/library/nginx@{D2}", f"nginx:1.25@{D2}", True),
        # the same digest under another tag is still that content
        (f"nginx:1.25@{D2}", f"nginx:1.26@{D2}", True),
        # another digest is another image, whatever the tag says
        (f"nginx:1.25@{D2}", f"nginx:1.25@{D1}", False),
        # a digest reference never matches a tag-only key: the tag may have moved
        ("nginx:1.25", f"docker.io/library/nginx@{D2}", False),
        # and a tag-only reference never matches a digest key
        (f"nginx:1.25@{D2}", "docker.io/library/nginx:1.25", False),
        # the digest keeps its repository: another repository is another image
        (f"nginx:1.25@{D2}", f"docker.io/library/httpd@{D2}", False),
    ],
    ids=[
        "pod-key",
        "kubelet-key",
        "latest",
        "legacy-domain",
        "other-registry",
        "other-tag",
        "tag-digest-key-kubelet-digest",
        "kubelet-digest-key-tag-digest-pod",
        "digest-other-tag",
        "other-digest",
        "digest-vs-tag-key",
        "tag-vs-digest-key",
        "digest-other-repo",
    ],
)
def test_layers_json_falls_back_to_the_canonical_form(key: str, image: str, found: bool) -> None:
    source = StaticLayerSource.from_json({key: [{"digest": D1, "size": 3}]}, "layers.json")
    if found:
        assert source.resolve(image) == (Layer(D1, 3),)
    else:
        with pytest.raises(LayerResolutionError, match="not in the offline layer file"):
            source.resolve(image)


def test_layers_json_conflicting_forms_are_refused() -> None:
    # both forms listed with the same layers: fine; with different layers: which one is meant?
    same = {
        "nginx:1": [{"digest": D1, "size": 3}],
        "docker.io/library/nginx:1": [{"digest": D1, "size": 3}],
    }
    assert StaticLayerSource.from_json(same, "layers.json").resolve("nginx:1") == (Layer(D1, 3),)
    different = same | {"docker.io/library/nginx:1": [{"digest": D2, "size": 4}]}
    with pytest.raises(
        InputError,
        match=r"^layers.json: keys 'nginx:1' and 'docker.io/library/nginx:1' name the same image",
    ):
        StaticLayerSource.from_json(different, "layers.json")


def test_layers_json_one_digest_under_two_tags_with_different_layers_is_refused() -> None:
    # one digest is one content: two tags pinning it cannot list different layers
    keys = {f"nginx:1.25@{D2}": [{"digest": D1, "size": 3}], f"nginx:1.26@{D2}": []}
    with pytest.raises(InputError, match=f"name the same image \\(docker.io/library/nginx@{D2}\\)"):
        StaticLayerSource.from_json(keys, "layers.json")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected a JSON object"),
        ({"a": {}}, "expected a list of layers"),
        ({"a": [{"digest": "md5:x", "size": 1}]}, r"\[0\].digest: 'md5:x' is not a digest"),
        ({"a": [{"digest": D1, "size": "1"}]}, r"\[0\].size: size '1' must be a non-negative"),
    ],
    ids=["not-object", "not-list", "bad-digest", "string-size"],
)
def test_bad_layers_json(doc: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        StaticLayerSource.from_json(doc, "layers.json")
