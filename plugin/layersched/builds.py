"""Builds cached outside the repository: the cache root, the Kubernetes build, and the
containerd 2.x download.

``make kubernetes`` builds the testbeds' Kubernetes from Debian's source package and
caches the binaries under ``$LAYERSCHED_CACHE_DIR/kubernetes/<build ID>/bin``. The
build's identity (version, build ID) is written once, in ``kubernetes-build.yml``
beside this module; the CLI's defaults, the tests and the benchmarks take it and its
paths from here, and ``playbooks/vars/kubernetes.yml`` derives the same paths from the
same file (``tests/unit/test_builds.py`` holds the two derivations equal and fails if
any other file spells a build ID or a build path by hand).

``make containerd`` downloads Debian's containerd 2.x binary package (never installing
it) and unpacks it under ``$LAYERSCHED_CACHE_DIR/containerd/<version>``; its identity is
``containerd-download.yml`` beside this module, read here (the integration tests'
fixture) and by ``playbooks/vars/containerd.yml`` (the role that downloads it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from layersched.core.errors import InputError

#: Moves every cache of the project (Kubernetes build, image layers, downloads).
CACHE_DIR_ENV = "LAYERSCHED_CACHE_DIR"
DEFAULT_CACHE_ROOT = Path("/var/cache/layersched")
#: The data file, beside this module (package data).
KUBERNETES_BUILD_FILE = "kubernetes-build.yml"
#: What builds the cache (the README's set-up step).
BUILD_COMMAND = "make kubernetes"
#: The containerd 2.x download's data file, beside this module.
CONTAINERD_DOWNLOAD_FILE = "containerd-download.yml"
#: What downloads it.
CONTAINERD_COMMAND = "make containerd"
#: Inside a download's cache dir: the unpacked package, and the Debian version unpacked.
CONTAINERD_TREE = "root"
CONTAINERD_STAMP = ".stamp"


def cache_root() -> Path:
    """``$LAYERSCHED_CACHE_DIR``, else ``/var/cache/layersched``."""
    return Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_ROOT)


@dataclass(frozen=True, slots=True)
class KubernetesBuild:
    """What ``make kubernetes`` builds, and where it caches it."""

    source_package: str
    source_version: str
    #: What the binaries' ``--version`` prints (``v1.20.2``).
    version: str
    source_codename: str
    binaries: tuple[str, ...]
    pause_version: str
    #: What the build changes on top of the source package (part of the build ID).
    revision: str

    @property
    def build_id(self) -> str:
        """The cache key: ``<source version>+<revision>``."""
        return f"{self.source_version}+{self.revision}"

    def cache_dir(self, root: Path | None = None) -> Path:
        """``<cache root>/kubernetes/<build ID>``: sources, logs and binaries."""
        return (root or cache_root()) / "kubernetes" / self.build_id

    def bin_dir(self, root: Path | None = None) -> Path:
        """Where the built binaries (and the pause program) are."""
        return self.cache_dir(root) / "bin"

    def binary(self, name: str, root: Path | None = None) -> Path:
        """The path of binary ``name`` (``kube-scheduler``, ``kubectl``, ``pause`` …)."""
        return self.bin_dir(root) / name

    def missing(self, *names: str, root: Path | None = None) -> list[Path]:
        """Those of binaries ``names`` (default: every one built) that are not there."""
        wanted = names or (*self.binaries, "pause")
        return [path for path in (self.binary(n, root) for n in wanted) if not path.is_file()]

    def require(self, *names: str, root: Path | None = None) -> Path:
        """The bin dir, once every binary of ``names`` is there; else an InputError saying
        which are missing and how to build them."""
        absent = self.missing(*names, root=root)
        if absent:
            listed = ", ".join(str(path) for path in absent)
            raise InputError(
                f"Kubernetes {self.version} (build {self.build_id}) is not built: {listed} "
                f"missing: run `{BUILD_COMMAND}` (caches under {self.cache_dir(root).parent}; "
                f"{CACHE_DIR_ENV} moves it)"
            )
        return self.bin_dir(root)


def _text(record: dict[str, Any], key: str, where: str = KUBERNETES_BUILD_FILE) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise InputError(f"{where}: {key} must be a non-empty string")
    return value


def _binaries(record: Any, where: str) -> tuple[str, ...]:
    """The record's ``binaries``, after checking it is a mapping with a list of names."""
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a mapping")
    binaries = record.get("binaries")
    if not isinstance(binaries, list) or not all(isinstance(b, str) for b in binaries):
        raise InputError(f"{where}: binaries must be a list of names")
    return tuple(binaries)


def parse_kubernetes_build(record: Any) -> KubernetesBuild:
    """Read ``kubernetes-build.yml``'s mapping."""
    binaries = _binaries(record, KUBERNETES_BUILD_FILE)
    return KubernetesBuild(
        source_package=_text(record, "source_package"),
        source_version=_text(record, "source_version"),
        version=_text(record, "version"),
        source_codename=_text(record, "source_codename"),
        binaries=binaries,
        pause_version=_text(record, "pause_version"),
        revision=_text(record, "revision"),
    )


@cache
def kubernetes_build() -> KubernetesBuild:
    """The Kubernetes build this checkout (or installed package) runs."""
    text = resources.files("layersched").joinpath(KUBERNETES_BUILD_FILE).read_text("utf-8")
    return parse_kubernetes_build(yaml.safe_load(text))


@dataclass(frozen=True, slots=True)
class ContainerdDownload:
    """What ``make containerd`` downloads and unpacks, and where."""

    package: str
    #: The upstream release (``2.1.9``); any Debian revision of it is taken.
    version: str
    suite: str
    archive_codename: str
    binaries: tuple[str, ...]

    def cache_dir(self, root: Path | None = None) -> Path:
        """``<cache root>/containerd/<version>``."""
        return (root or cache_root()) / "containerd" / self.version

    def tree_dir(self, root: Path | None = None) -> Path:
        """The unpacked package (``usr/bin/containerd`` …)."""
        return self.cache_dir(root) / CONTAINERD_TREE

    def binary(self, name: str, root: Path | None = None) -> Path:
        """The path of program ``name`` (``containerd``, ``ctr``)."""
        return self.tree_dir(root) / "usr" / "bin" / name

    def debian_version(self, root: Path | None = None) -> str | None:
        """The Debian version unpacked (``2.1.9+ds1-5``), or None when nothing is."""
        try:
            text = (self.cache_dir(root) / CONTAINERD_STAMP).read_text("utf-8").strip()
        except OSError:
            return None
        return text or None

    def missing(self, root: Path | None = None) -> list[Path]:
        """The binaries (and the stamp) that are not there."""
        paths = [self.binary(name, root) for name in self.binaries]
        absent = [path for path in paths if not path.is_file()]
        if self.debian_version(root) is None:
            absent.append(self.cache_dir(root) / CONTAINERD_STAMP)
        return absent

    def require(self, root: Path | None = None) -> Path:
        """The ``containerd`` binary, once the download is complete; else an InputError
        saying what is missing and how to get it."""
        absent = self.missing(root)
        if absent:
            listed = ", ".join(str(path) for path in absent)
            raise InputError(
                f"containerd {self.version} (Debian {self.suite}) is not downloaded: {listed} "
                f"missing: run `{CONTAINERD_COMMAND}` (caches under "
                f"{self.cache_dir(root).parent}; {CACHE_DIR_ENV} moves it)"
            )
        return self.binary("containerd", root)


def parse_containerd_download(record: Any) -> ContainerdDownload:
    """Read ``containerd-download.yml``'s mapping."""
    binaries = _binaries(record, CONTAINERD_DOWNLOAD_FILE)
    if "containerd" not in binaries:
        raise InputError(f"{CONTAINERD_DOWNLOAD_FILE}: binaries must name containerd")
    fields = {
        key: _text(record, key, CONTAINERD_DOWNLOAD_FILE)
        for key in ("package", "version", "suite", "archive_codename")
    }
    return ContainerdDownload(binaries=binaries, **fields)


@cache
def containerd_download() -> ContainerdDownload:
    """The containerd 2.x the integration tests run beside the system's 1.6."""
    text = resources.files("layersched").joinpath(CONTAINERD_DOWNLOAD_FILE).read_text("utf-8")
    return parse_containerd_download(yaml.safe_load(text))
