"""The deployed stack's images, built without Docker: reproducible OCI images from pinned inputs.

Two images, each a stack of gzipped tar layers assembled in Python
(:mod:`layersched.images.oci`), then pushed with the registry client:

* ``layersched`` (the extender and the agent), three layers, each a module of its own:

  1. **debian** (:mod:`layersched.images.debian`): the Debian bookworm packages of
     ``install/images/layersched/debian.lock`` (:mod:`layersched.images.locks`), and
     ``/etc/passwd``/``/etc/group`` naming the unprivileged user 65532, and ``/tmp``.
  2. **python** (:mod:`layersched.images.wheels`): the wheels of
     ``install/images/layersched/requirements.lock``, installed into Debian Python's
     dist-packages.
  3. **layersched** (:mod:`layersched.images.product`): a wheel of this repository (its
     git-tracked product files) installed the same way, and ``/usr/local/bin/layersched``.

  The config matches ``install/images/layersched/Containerfile``: entrypoint ``layersched``,
  command ``extender --port 8888``, user ``65532:65532``, ``PYTHONDONTWRITEBYTECODE``
  and ``PYTHONUNBUFFERED``.

* ``kube-scheduler``: one layer with the kube-scheduler binary the cluster was built
  with (``/usr/local/bin/kube-scheduler``, static), ``/etc/passwd``/``/etc/group``
  and ``/tmp``; user 65532.

**Reproducible.** Layers are reproducible tars (:mod:`layersched.images.rootfs`), and JSON
is canonical: the same inputs give the same digests. Layers are cached outside the
repository under ``$LAYERSCHED_CACHE_DIR/images`` (default
``/var/cache/layersched/images``), keyed by a hash of their inputs
(:mod:`layersched.images.buildcache`), so a rebuild with nothing changed takes seconds.
"""

from __future__ import annotations

import gzip
import io
import sys
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from layersched import __version__
from layersched.builds import (
    IMAGE_ARCHES,
    REPO_ROOT,
    cache_root,
    check_arch,
    host_arch,
)
from layersched.core.errors import InputError
from layersched.core.manifest import Platform
from layersched.images.binary import GoBuildInfo, elf_facts, go_build_info
from layersched.images.buildcache import BuiltLayers, build_lock
from layersched.images.debian import debian_layer, fetch_debs
from layersched.images.locks import (
    DEBIAN_LOCK,
    LOCK_DEFAULT_ARCH,
    REQUIREMENTS_LOCK,
    debian_pins,
    file_sha256,
    parse_debian_lock,
    parse_requirements_lock,
    read_lock,
)
from layersched.images.oci import (
    EXECUTABLE_MODE,
    BuiltImage,
    BuiltIndex,
    LayerBlob,
    build_image,
    build_index,
)
from layersched.images.product import layersched_layer, source_hash, tracked_files
from layersched.images.rootfs import USER, TarTree, base_files
from layersched.images.wheels import fetch_wheels, python_layer

KUBE_SCHEDULER_BIN = "usr/local/bin/kube-scheduler"
LAYERSCHED_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
KUBE_SCHEDULER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
LAYERSCHED_ENTRYPOINT = ("layersched",)
LAYERSCHED_CMD = ("extender", "--port", "8888")
TITLE_LABEL = "org.opencontainers.image.title"
VERSION_LABEL = "org.opencontainers.image.version"
#: Labels recording the layersched image's inputs (``...debian-lock`` and so on).
INPUTS_LABEL_PREFIX = "io.layersched.inputs."


@dataclass(frozen=True, slots=True)
class StackImages:
    """The two built images."""

    layersched: BuiltImage
    kube_scheduler: BuiltImage


def _arch_suffix(arch: str) -> str:
    """What names ``arch``'s cache entries and download directories: nothing for amd64
    (the builder's first architecture, whose entries predate the others), ``-arm64``."""
    return "" if arch == LOCK_DEFAULT_ARCH else f"-{arch}"


def build_layersched_image(
    repo_root: Path = REPO_ROOT,
    root: Path | None = None,
    progress: Callable[[str], None] | None = None,
    arch: str = LOCK_DEFAULT_ARCH,
) -> BuiltImage:
    """The layersched image for ``linux/<arch>`` (see the module docstring): ``arch``'s
    Debian packages and wheels, the same product layer; layers come from the cache when
    they can."""
    say = progress or (lambda _message: None)
    with build_lock(root or cache_root(), say):
        return _build_layersched_image(repo_root, root or cache_root(), say, arch)


def _build_layersched_image(
    repo_root: Path, root: Path, say: Callable[[str], None], arch: str
) -> BuiltImage:
    cache = BuiltLayers(root)
    downloads = root / "images"
    suffix = _arch_suffix(check_arch(arch, "the image's architecture"))
    deb_pins = debian_pins(read_lock(DEBIAN_LOCK, parse_debian_lock), arch, str(DEBIAN_LOCK))
    wheel_pins = read_lock(REQUIREMENTS_LOCK, parse_requirements_lock)
    # another architecture's wheels are installed by their tags; the host's as before
    foreign = None if arch == host_arch() else arch

    def debian() -> LayerBlob:
        say(f"fetching and unpacking the Debian packages ({arch})")
        debs = downloads / f"debs{suffix}"
        return debian_layer(deb_pins, fetch_debs(deb_pins, debs, arch=arch))

    def python() -> LayerBlob:
        say(f"fetching and installing the pinned wheels ({arch})")
        wheels = downloads / f"wheels{suffix}"
        fetch_wheels(REQUIREMENTS_LOCK, wheels, arch)
        return python_layer(wheel_pins, wheels, foreign)

    files = tracked_files(repo_root)
    say(f"layer 1/3: debian ({arch})")
    base = cache.layer(
        cache.key(f"debian{suffix}", (f"{p.name}={p.sha256}" for p in deb_pins)), debian
    )
    say(f"layer 2/3: python ({arch})")
    deps = cache.layer(
        cache.key(f"python{suffix}", (f"{p.name}={p.sha256}" for p in wheel_pins)), python
    )
    say("layer 3/3: layersched")
    app = cache.layer(
        cache.key("layersched", [source_hash(repo_root, files), sys.version.split()[0]]),
        lambda: layersched_layer(repo_root, files),
    )
    return build_image(
        [base, deps, app],
        platform=Platform("linux", arch),
        labels={
            TITLE_LABEL: "layersched",
            VERSION_LABEL: __version__,
            # what went in: the locks (each pin's version and sha256) and the wheel's sources
            INPUTS_LABEL_PREFIX + "debian-lock": f"sha256:{file_sha256(DEBIAN_LOCK)}",
            INPUTS_LABEL_PREFIX + "requirements-lock": f"sha256:{file_sha256(REQUIREMENTS_LOCK)}",
            INPUTS_LABEL_PREFIX + "sources": f"sha256:{source_hash(repo_root, files)}",
        },
        entrypoint=LAYERSCHED_ENTRYPOINT,
        cmd=LAYERSCHED_CMD,
        env=LAYERSCHED_ENV,
        user=USER,
        working_dir="/",
    )


def build_layersched_index(
    arches: Sequence[str] = IMAGE_ARCHES,
    repo_root: Path = REPO_ROOT,
    root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> BuiltIndex:
    """The layersched image of each architecture, in one OCI index (the product layer is
    the same blob in each)."""
    images = [build_layersched_image(repo_root, root, progress, arch) for arch in arches]
    return build_index(images, annotations=_index_annotations("layersched", __version__))


def _index_annotations(title: str, version: str) -> dict[str, str]:
    return {TITLE_LABEL: title, VERSION_LABEL: version}


#: Labels of the kube-scheduler image: what the binary's Go build info says went in.
GO_VERSION_LABEL = INPUTS_LABEL_PREFIX + "go-version"
GO_BUILD_LABEL = INPUTS_LABEL_PREFIX + "go-build"
GO_MODULES_LABEL = INPUTS_LABEL_PREFIX + "go-modules"
KUBERNETES_MODULE_LABEL = INPUTS_LABEL_PREFIX + "kubernetes-module"
KUBERNETES_GO_MODULE = "k8s.io/kubernetes"


def kube_scheduler_labels(info: GoBuildInfo) -> dict[str, str]:
    """The image's record of its inputs, read from its binary: the Go version, the build
    settings (``CGO_ENABLED``, ``GOARCH``, ``-trimpath``...), the Kubernetes release
    compiled with its go.sum checksum, and one digest over every linked module's path,
    version and checksum (:attr:`GoBuildInfo.deps_sha256`; ``go version -m`` on the
    binary lists them)."""
    kubernetes = info.dep(KUBERNETES_GO_MODULE)
    labels = {
        GO_VERSION_LABEL: info.go_version,
        GO_BUILD_LABEL: " ".join(f"{key}={value}" for key, value in info.settings),
        GO_MODULES_LABEL: info.deps_sha256,
    }
    if kubernetes is not None:
        labels[KUBERNETES_MODULE_LABEL] = kubernetes.line()
    return labels


def build_kube_scheduler_image(
    binary: Path,
    kubernetes_version: str,
    arch: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> BuiltImage:
    """The kube-scheduler image for ``linux/<arch>`` (default: the binary's own
    architecture): ``binary``, which must be a static ELF of that architecture, run as
    user 65532, its inputs recorded in labels (:func:`kube_scheduler_labels`, and
    ``labels``)."""
    what = f"the kube-scheduler binary {binary}"
    try:
        content = binary.read_bytes()
    except OSError as err:
        raise InputError(f"reading {what}: {err}; build it with `make kubernetes`") from err
    facts = elf_facts(content, what)
    arch = arch or facts.machine
    if facts.machine != check_arch(arch, "the image's architecture"):
        raise InputError(
            f"{what} is built for {facts.machine}, not {arch}: build it with GOARCH={arch} "
            f"(.venv/bin/python harness/scripts/kubernetes_build.py --arch {arch})"
        )
    if not facts.static:
        raise InputError(
            f"{what} needs a dynamic loader, which the image has not: build it with "
            "CGO_ENABLED=0 (as make kubernetes does)"
        )
    tree = TarTree()
    tree.add_file(KUBE_SCHEDULER_BIN, content, EXECUTABLE_MODE)
    base_files(tree)
    return build_image(
        [tree.layer()],
        platform=Platform("linux", arch),
        labels={
            TITLE_LABEL: "kube-scheduler",
            VERSION_LABEL: kubernetes_version,
            **kube_scheduler_labels(go_build_info(content, what)),
            **(labels or {}),
        },
        entrypoint=(f"/{KUBE_SCHEDULER_BIN}",),
        env=KUBE_SCHEDULER_ENV,
        user=USER,
        working_dir="/",
    )


def build_kube_scheduler_index(images: Sequence[BuiltImage], kubernetes_version: str) -> BuiltIndex:
    """One kube-scheduler image per architecture (:func:`build_kube_scheduler_image`), in
    one OCI index."""
    return build_index(images, annotations=_index_annotations("kube-scheduler", kubernetes_version))


def image_size_bytes(image: BuiltImage) -> int:
    """Compressed size: the layers, the config and the manifest, as a registry stores them."""
    return (
        sum(layer.size_bytes for layer in image.layers)
        + len(image.config_bytes)
        + len(image.manifest_bytes)
    )


def unpack(image: BuiltImage, directory: Path) -> Iterator[str]:
    """Unpack ``image``'s layers (base first) into ``directory``; yields each layer digest."""
    for layer in image.layers:
        blob = image.blobs[layer.digest]
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob)), mode="r:") as tar:
            tar.extractall(directory, filter="tar")
        yield layer.digest
