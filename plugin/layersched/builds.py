"""Builds cached outside the repository: the cache root, and the Kubernetes build.

``make kubernetes`` builds the testbeds' Kubernetes from Debian's source package and
caches the binaries under ``$LAYERSCHED_CACHE_DIR/kubernetes/<build ID>/bin``. The
build's identity (version, build ID) is written once, in ``kubernetes-build.yml``
beside this module; the CLI's defaults, the tests and the benchmarks take it and its
paths from here, and ``playbooks/vars/kubernetes.yml`` derives the same paths from the
same file (``tests/unit/test_builds.py`` holds the two derivations equal and fails if
any other file spells a build ID or a build path by hand).
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


def _text(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise InputError(f"{KUBERNETES_BUILD_FILE}: {key} must be a non-empty string")
    return value


def parse_kubernetes_build(record: Any) -> KubernetesBuild:
    """Read ``kubernetes-build.yml``'s mapping."""
    if not isinstance(record, dict):
        raise InputError(f"{KUBERNETES_BUILD_FILE}: expected a mapping")
    binaries = record.get("binaries")
    if not isinstance(binaries, list) or not all(isinstance(b, str) for b in binaries):
        raise InputError(f"{KUBERNETES_BUILD_FILE}: binaries must be a list of names")
    return KubernetesBuild(
        source_package=_text(record, "source_package"),
        source_version=_text(record, "source_version"),
        version=_text(record, "version"),
        source_codename=_text(record, "source_codename"),
        binaries=tuple(binaries),
        pause_version=_text(record, "pause_version"),
        revision=_text(record, "revision"),
    )


@cache
def kubernetes_build() -> KubernetesBuild:
    """The Kubernetes build this checkout (or installed package) runs."""
    text = resources.files("layersched").joinpath(KUBERNETES_BUILD_FILE).read_text("utf-8")
    return parse_kubernetes_build(yaml.safe_load(text))
