"""The offline layer source (``--layers LAYERS.json``): keys, canonical forms, errors."""

from __future__ import annotations

from typing import Any

import pytest

from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.layers import Layer, StaticLayerSource

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


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
