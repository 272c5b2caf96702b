"""The release's kube-scheduler images, on synthetic Go binaries (tests/fixtures/gobinary.py):
each architecture's image holds a static binary of that architecture and records its inputs
in labels; one index lists both platforms; the release's layouts and record name them by
digest. The real binaries: tests/integration/test_stack_images.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layersched import __version__
from layersched.builds import CACHE_DIR_ENV, scheduler_build, scheduler_minor_builds
from layersched.core.errors import InputError
from layersched.deploy import (
    PLUGIN_RELEASES,
    PUBLISHED_KUBE_SCHEDULER,
    default_published,
    published_images_from_json,
)
from layersched.images.build import (
    GO_BUILD_LABEL,
    GO_MODULES_LABEL,
    GO_VERSION_LABEL,
    KUBERNETES_MODULE_LABEL,
    build_kube_scheduler_image,
    build_kube_scheduler_index,
)
from layersched.images.oci import OCI_INDEX, build_image, build_index
from layersched.images.release import (
    BUILD_ID_LABEL,
    GO_SUM_LABEL,
    ReleaseImage,
    kube_scheduler_release,
    published_record,
    write_layouts,
)
from tests.fixtures.gobinary import EM_AARCH64, EM_X86_64, PT_INTERP, PT_LOAD, go_binary


def _modinfo(arch: str, kubernetes: str = "v1.37.2") -> str:
    return (
        "path\tlayersched.io/kube-scheduler/cmd/kube-scheduler\n"
        "mod\tlayersched.io/kube-scheduler\t(devel)\t\n"
        f"dep\tk8s.io/kubernetes\t{kubernetes}\th1:k8s=\n"
        f"build\t-trimpath=true\nbuild\tCGO_ENABLED=0\nbuild\tGOARCH={arch}\nbuild\tGOOS=linux\n"
    )


def _binary(tmp_path: Path, arch: str, machine: int, types: tuple[int, ...] = (PT_LOAD,)) -> Path:
    path = tmp_path / f"kube-scheduler-{arch}"
    path.write_bytes(go_binary(machine, "go1.26.8", _modinfo(arch), types))
    return path


def test_the_image_records_what_its_binary_was_built_from(tmp_path: Path) -> None:
    image = build_kube_scheduler_image(_binary(tmp_path, "arm64", EM_AARCH64), "v1.37.2", "arm64")
    config = json.loads(image.config_bytes)
    assert (config["os"], config["architecture"]) == ("linux", "arm64")
    labels = config["config"]["Labels"]
    assert labels[GO_VERSION_LABEL] == "go1.26.8"
    assert labels[GO_BUILD_LABEL] == "-trimpath=true CGO_ENABLED=0 GOARCH=arm64 GOOS=linux"
    assert labels[KUBERNETES_MODULE_LABEL] == "k8s.io/kubernetes v1.37.2 h1:k8s="
    assert labels[GO_MODULES_LABEL].startswith("sha256:")
    # the platform defaults to the binary's own
    again = build_kube_scheduler_image(_binary(tmp_path, "arm64", EM_AARCH64), "v1.37.2")
    assert again.digest == image.digest


@pytest.mark.parametrize(
    ("arch", "machine", "types", "message"),
    [
        # an amd64 binary in an arm64 image would never start on the node
        ("arm64", EM_X86_64, (PT_LOAD,), "is built for amd64, not arm64: build it with GOARCH"),
        # a cgo binary needs a loader and a libc the image has not
        ("amd64", EM_X86_64, (PT_INTERP, PT_LOAD), "needs a dynamic loader"),
        ("riscv64", EM_X86_64, (PT_LOAD,), "the image's architecture 'riscv64': choose"),
    ],
    ids=["wrong-arch", "cgo", "unknown-arch"],
)
def test_a_binary_that_cannot_run_in_the_image_is_refused(
    tmp_path: Path, arch: str, machine: int, types: tuple[int, ...], message: str
) -> None:
    binary = tmp_path / "kube-scheduler"
    binary.write_bytes(go_binary(machine, "go1.26.8", _modinfo("amd64"), types))
    with pytest.raises(InputError, match=message):
        build_kube_scheduler_image(binary, "v1.37.2", arch)


def test_one_index_lists_each_platform_once(tmp_path: Path) -> None:
    amd64 = build_kube_scheduler_image(_binary(tmp_path, "amd64", EM_X86_64), "v1.37.2")
    arm64 = build_kube_scheduler_image(_binary(tmp_path, "arm64", EM_AARCH64), "v1.37.2")
    index = build_kube_scheduler_index([amd64, arm64], "v1.37.2")
    doc = json.loads(index.index_bytes)
    assert doc["mediaType"] == OCI_INDEX
    assert [(m["platform"]["os"], m["platform"]["architecture"]) for m in doc["manifests"]] == [
        ("linux", "amd64"),
        ("linux", "arm64"),
    ]
    assert [m["digest"] for m in doc["manifests"]] == [amd64.digest, arm64.digest]
    assert doc["annotations"]["org.opencontainers.image.version"] == "v1.37.2"
    with pytest.raises(InputError, match="each platform once"):
        build_kube_scheduler_index([amd64, amd64], "v1.37.2")


@pytest.fixture
def cached_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The 1.37 build's binaries for both architectures, as `kubernetes_build.py --arch`
    caches them, under a cache root of the test's own."""
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    build = scheduler_build()
    for arch, machine in (("amd64", EM_X86_64), ("arm64", EM_AARCH64)):
        path = build.platform_binary("kube-scheduler", arch)
        path.parent.mkdir(parents=True)
        path.write_bytes(go_binary(machine, "go1.26.8", _modinfo(arch)))
    return tmp_path


def test_the_release_image_of_a_minor(cached_binaries: Path) -> None:
    build = scheduler_build()
    image = kube_scheduler_release(build, prefix="registry.example/ls")
    assert image.repository == "registry.example/ls/kube-scheduler"
    # k3s's convention: the Kubernetes release, then layersched's
    assert image.tag == f"{build.version}-layersched.{__version__}"
    assert image.minor == build.minor[1]
    labels = [json.loads(i.config_bytes)["config"]["Labels"] for i in image.index.images]
    assert {label[BUILD_ID_LABEL] for label in labels} == {build.build_id}
    assert all(label[GO_SUM_LABEL].startswith("sha256:") for label in labels)
    assert list(image.platforms()) == ["linux/amd64", "linux/arm64"]


def test_a_missing_binary_says_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    with pytest.raises(InputError, match=r"kubernetes_build\.py --arch arm64 --binary"):
        kube_scheduler_release(scheduler_build(), arches=("arm64",))


def test_layouts_and_the_record_name_each_image_by_digest(cached_binaries: Path) -> None:
    scheduler = kube_scheduler_release(scheduler_build(), prefix="r.example/ls")
    app = build_image([b"app"])
    layersched = ReleaseImage("r.example/ls/layersched", __version__, build_index([app]))
    out = cached_binaries / "out"
    written = write_layouts(out, [layersched, scheduler])
    assert written == {
        f"r.example/ls/layersched:{__version__}": out / "layersched",
        f"r.example/ls/kube-scheduler:{scheduler.tag}": out / "kube-scheduler",
    }
    index = json.loads((out / "kube-scheduler" / "index.json").read_text())
    [entry] = index["manifests"]
    assert entry["digest"] == scheduler.index.digest
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == scheduler.tag
    # every blob the index reaches is in the layout
    blobs = {p.name for p in (out / "kube-scheduler" / "blobs" / "sha256").iterdir()}
    for image in scheduler.index.images:
        assert image.digest.removeprefix("sha256:") in blobs
        assert {d.removeprefix("sha256:") for d in image.blobs} <= blobs

    record = published_record([layersched, scheduler])
    again = published_images_from_json(json.loads(json.dumps(record.to_json())), "record")
    minor = scheduler.minor
    assert minor is not None
    assert again.plugin_image(minor).digest == scheduler.index.digest
    assert again.plugin_image(minor).details["platforms"]["linux/arm64"]["size_bytes"] > 0
    assert again.layersched.ref.reference == f"r.example/ls/layersched@{layersched.index.digest}"


def test_without_a_record_the_images_are_the_releases_tags() -> None:
    published = default_published("9.9.9")
    assert published.layersched.ref.reference == "ghcr.io/layersched/layersched:9.9.9"
    image = published.plugin_image(36)
    assert image.repository == PUBLISHED_KUBE_SCHEDULER and image.digest == ""
    assert image.tag.endswith("-layersched.9.9.9")
    with pytest.raises(InputError, match=r"Kubernetes 1\.34: no kube-scheduler of layersched"):
        published.plugin_image(34)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected an object with 'layersched'"),
        ({"layersched": {"repository": "r/l", "tag": "1"}}, r"layersched\.digest: expected"),
        (
            {"layersched": {"repository": "r/l", "tag": "1", "digest": "sha256:abc"}},
            "expected sha256:<64 hex digits>",
        ),
        (
            {"layersched": {"repository": "r/l", "tag": "1", "digest": "sha256:" + "a" * 64},
             "kube-scheduler": {"1.30": {}}},
            r"'1\.30': expected one of 1\.35, 1\.36, 1\.37",
        ),
    ],
    ids=["not-an-object", "no-digest", "short-digest", "unsupported-minor"],
)  # fmt: skip
def test_a_bad_record_names_the_field(doc: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        published_images_from_json(doc, "images.json")


def test_the_plugin_releases_are_the_ones_the_go_modules_compile() -> None:
    # installed packages read the releases from the table; checkouts compile them
    builds = {b.minor[1]: b.version for b in (*scheduler_minor_builds(), scheduler_build())}
    assert builds == PLUGIN_RELEASES
