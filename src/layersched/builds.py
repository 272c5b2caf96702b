"""The product's build, cached outside the repository: the cache root, the image
architectures, the release layersched's Go module pins, and its kube-scheduler (the
binary its images package).

layersched's kube-scheduler is built from its Go module (``src/kube-scheduler``:
upstream's command with the LayerLocality plugin registered out of tree), the way
out-of-tree schedulers are, with the go command against the release that module's
``go.mod`` pins (:func:`scheduler_build`). The binary is cached under
``$LAYERSCHED_CACHE_DIR/kubernetes/<build ID>/bin`` and Go's module and build caches under
``$LAYERSCHED_CACHE_DIR/go``. The build's identity is ``kubernetes-build.yml`` beside this
module (the module and its binaries) plus the module itself: the release is read from its
``go.mod`` and the build ID hashes its ``go.mod``, ``go.sum`` and sources, so a changed
plugin or a new pin never reuses an old binary.

The older supported minors have a Go module each under the module's ``minors/<minor>``
(``minors/1.35``): it requires layersched's module and replaces the release, and every
module that release's ``go.mod`` requires, with the versions that release requires
(``hack/pin_kubernetes.py --as-released``). The plugin's tests run there
(``tests/integration/test_kube_scheduler_minors.py``), and the release's images build
that minor's kube-scheduler there, under the minor's own build ID (the release and the
hash of both modules).

:class:`KubernetesBuild` and the record's parsing serve the harness too: the testbed's
Kubernetes (its control plane, nodes and kubectl, from the harness's own Go module,
``harness/control-plane``) is one build over both modules, which takes this build's
kube-scheduler as built (:mod:`layersched_harness.testbed.builds`). The machinery that
runs the go command is the harness's (``harness/scripts/kubernetes_build.py``, ``make
kubernetes``); so are the go command, the containerd 2.x download, the Go tools and CRI-O.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
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
#: What pins a Go module to a release (``--module-dir`` names any module of the repository).
PIN_SCRIPT = "src/kube-scheduler/hack/pin_kubernetes.py"
#: The module path every Kubernetes release is required under.
KUBERNETES_MODULE = "k8s.io/kubernetes"
#: Inside a build's bin dir: the build ID the binaries were built for.
BUILD_STAMP = ".stamp"
#: What of a Go module besides its sources the build ID hashes, and where its mains are.
GO_MODULE_FILES = ("go.mod", "go.sum")
GO_MAINS = "cmd"
#: Under the module: one Go module per older minor (``minors/1.35``).
GO_MINORS = "minors"
_MODULE_DIRECTIVE = re.compile(r"^module\s+(\S+)\s*$", re.MULTILINE)
_MINOR = re.compile(r"^1\.\d+$")
_GO_DIRECTIVE = re.compile(r"^go\s+(\d+(?:\.\d+)*)\s*$", re.MULTILINE)
#: The repository root, the one definition: the plugin's sources, the images' recipes and the
#: testbed's playbooks are named relative to it (a checkout's; a wheel has none).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Hex digits of the module's hash in the build ID.
PLUGIN_HASH_CHARS = 12
GO_SOURCE_SUFFIX = ".go"
#: The architectures layersched's images are built for (Go's GOARCH names, as OCI
#: platforms name them too): every cloud's x86 and Arm nodes (Graviton, Ampere, Axion).
IMAGE_ARCHES = ("amd64", "arm64")
#: ``platform.machine()`` of the hosts that build them, as Go names the architecture.
_MACHINE_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
#: A cross-compiled binary's directory in a build's cache dir: ``linux-<arch>``.
PLATFORM_DIR_PREFIX = "linux-"
GO_TEST_SUFFIX = "_test.go"
GO_TESTDATA = "testdata"


def host_arch() -> str:
    """This machine's architecture as Go and OCI name it (``amd64``, ``arm64``)."""
    machine = platform.machine()
    try:
        return _MACHINE_ARCH[machine.lower()]
    except KeyError:
        raise InputError(
            f"this machine's architecture {machine!r} is none of layersched's image "
            f"architectures ({', '.join(IMAGE_ARCHES)}): build on an x86-64 or Arm64 host"
        ) from None


def check_arch(arch: str, what: str = "--arch") -> str:
    """``arch`` when it is one of :data:`IMAGE_ARCHES`; else an InputError naming them."""
    if arch not in IMAGE_ARCHES:
        raise InputError(f"{what} {arch!r}: choose {' or '.join(IMAGE_ARCHES)}")
    return arch


def cache_root() -> Path:
    """``$LAYERSCHED_CACHE_DIR``, else ``/var/cache/layersched``."""
    return Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_ROOT)


def go_sources_sha256(directory: Path) -> str:
    """The hash of a Go module's sources: one line ``<relative path> <sha256 of the file>``
    per ``.go`` file that is no test (nor under ``testdata/``), sorted by path, each ending
    in a newline, hashed (``harness/playbooks/vars/kubernetes.yml`` computes the same)."""
    lines = []
    for path in directory.rglob(f"*{GO_SOURCE_SUFFIX}"):
        relative = path.relative_to(directory).as_posix()
        if relative.endswith(GO_TEST_SUFFIX) or GO_TESTDATA in relative.split("/"):
            continue
        lines.append((relative, hashlib.sha256(path.read_bytes()).hexdigest()))
    text = "".join(f"{relative} {digest}\n" for relative, digest in sorted(lines))
    return hashlib.sha256(text.encode()).hexdigest()


def module_sha256(directory: Path) -> str:
    """The hash of what a build compiles from a Go module: one line ``<name> <sha256>``
    for ``go.mod``, ``go.sum`` and the sources (:func:`go_sources_sha256`), hashed."""
    lines = [
        (name, hashlib.sha256((directory / name).read_bytes()).hexdigest())
        for name in GO_MODULE_FILES
    ]
    lines.append(("sources", go_sources_sha256(directory)))
    text = "".join(f"{name} {digest}\n" for name, digest in lines)
    return hashlib.sha256(text.encode()).hexdigest()


def required_version(go_mod: str, module: str = KUBERNETES_MODULE) -> str | None:
    """The version ``go.mod`` requires ``module`` at, or None when it does not."""
    for line in go_mod.splitlines():
        words = line.split("//", 1)[0].split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) == 2 and words[0] == module:
            return words[1]
    return None


def pinned_version(go_mod: str, module: str = KUBERNETES_MODULE) -> str | None:
    """The version of ``module`` a build from ``go.mod`` compiles: the version its
    ``replace`` names (a minor's module: the release, as released), else the required
    one."""
    for line in go_mod.splitlines():
        words = line.split("//", 1)[0].split()
        if words[:1] == ["replace"]:
            words = words[1:]
        if len(words) == 4 and words[0] == module and words[1:3] == ["=>", module]:
            return words[3]
    return required_version(go_mod, module)


def _module_path(go_mod: str, where: Path) -> str:
    match = _MODULE_DIRECTIVE.search(go_mod)
    if match is None:
        raise InputError(f"{where}: no module directive: restore it from git")
    return match[1]


@dataclass(frozen=True, slots=True)
class KubernetesBuild:
    """Binaries built from one Go module's mains against the release it pins, and where
    they are cached: layersched's kube-scheduler (:func:`scheduler_build`), or an older
    minor's from that minor's module; or the testbed's Kubernetes, which takes another
    build's binaries as built (:attr:`includes`)."""

    #: The directory the go commands run in, relative to the repository root: the module,
    #: or a minor's module under it.
    module: str
    #: The Kubernetes release its go.mod pins (``v1.37.2``): what ``--version`` prints.
    version: str
    binaries: tuple[str, ...]
    #: The hash of go.mod, go.sum and the sources (part of the build ID); for a minor, of
    #: both modules.
    module_sha256: str
    #: The import path of the package holding the mains (``layersched.io/kube-scheduler``):
    #: a main is ``<mains>/cmd/<name>``, in the module and in a minor's module alike.
    mains: str = ""
    #: A build whose binaries this one takes as built, into its own bin dir (the testbed's
    #: Kubernetes takes layersched's kube-scheduler); its hash is part of
    #: :attr:`module_sha256`.
    includes: KubernetesBuild | None = None

    @property
    def own_binaries(self) -> tuple[str, ...]:
        """The binaries compiled from this build's own module (not :attr:`includes`')."""
        taken = self.includes.binaries if self.includes else ()
        return tuple(name for name in self.binaries if name not in taken)

    def directory(self, repo: Path = REPO_ROOT) -> Path:
        """Where the module is in this checkout."""
        return repo / self.module

    @property
    def minor(self) -> tuple[int, int]:
        """``(1, 37)`` of ``v1.37.2``."""
        major, minor = self.version.lstrip("v").split(".")[:2]
        return int(major), int(minor)

    @property
    def build_id(self) -> str:
        """The binaries' cache key: ``<version>+src.<hash of go.mod, go.sum, sources>``."""
        return f"{self.version}+src.{self.module_sha256[:PLUGIN_HASH_CHARS]}"

    def cache_dir(self, root: Path | None = None) -> Path:
        """``<cache root>/kubernetes/<build ID>``: the binaries and the build's stamp."""
        return (root or cache_root()) / "kubernetes" / self.build_id

    def go_cache_dir(self, root: Path | None = None) -> Path:
        """``<cache root>/go``: the Go module cache (``mod``) and build cache (``build``),
        shared by every build (Go keys both by content already)."""
        return (root or cache_root()) / "go"

    def bin_dir(self, root: Path | None = None) -> Path:
        """Where the built binaries are."""
        return self.cache_dir(root) / "bin"

    def go_version_needed(self, repo: Path = REPO_ROOT) -> str:
        """The module's ``go`` line: the oldest toolchain that builds it."""
        match = _GO_DIRECTIVE.search((self.directory(repo) / "go.mod").read_text("utf-8"))
        return match[1] if match else "1.26"

    def go_env(self, root: Path | None = None) -> dict[str, str]:
        """The environment every go command of the build runs with: the module and build
        caches under :meth:`go_cache_dir`, a removable module cache, the local toolchain
        only (no download of another), static binaries."""
        cache = self.go_cache_dir(root)
        return {
            **os.environ,
            "GOMODCACHE": str(cache / "mod"),
            "GOCACHE": str(cache / "build"),
            "GOPATH": str(cache / "path"),
            "GOFLAGS": "-modcacherw",
            "GOTOOLCHAIN": "local",
            "CGO_ENABLED": "0",
        }

    def main_package(self, name: str) -> str:
        """The import path of binary ``name``'s main."""
        return f"{self.mains}/{GO_MAINS}/{name}"

    def binary(self, name: str, root: Path | None = None) -> Path:
        """The path of binary ``name`` (``kube-scheduler``, ``kubectl``, ``pause`` …)."""
        return self.bin_dir(root) / name

    def platform_binary(self, name: str, arch: str, root: Path | None = None) -> Path:
        """Binary ``name`` compiled for ``linux/<arch>`` (``GOARCH``, cgo off), the images'
        input: ``<cache dir>/linux-<arch>/<name>``, keyed like :meth:`bin_dir` by the build
        ID and by the architecture. Written under a temporary name and renamed, so a file
        there is a whole build (``harness/scripts/kubernetes_build.py --arch``)."""
        return self.cache_dir(root) / f"{PLATFORM_DIR_PREFIX}{check_arch(arch)}" / name

    def require_platform(self, name: str, arch: str, root: Path | None = None) -> Path:
        """:meth:`platform_binary` once built; else an InputError saying how to build it."""
        path = self.platform_binary(name, arch, root)
        if not path.is_file():
            older = Path(self.module).parent.name == GO_MINORS
            minor = f" --minor {Path(self.module).name}" if older else ""
            raise InputError(
                f"{name} of Kubernetes {self.version} for linux/{arch} (build {self.build_id}) "
                f"is not built: {path} missing: run `.venv/bin/python "
                "harness/scripts/kubernetes_build.py "
                f"--arch {arch} --binary {name}{minor}` or `make images` (caches under "
                f"{self.cache_dir(root).parent}; {CACHE_DIR_ENV} moves it)"
            )
        return path

    def stamped(self, root: Path | None = None) -> bool:
        """The bin dir's stamp names this build (written once every binary was built)."""
        try:
            stamp = (self.bin_dir(root) / BUILD_STAMP).read_text("utf-8").strip()
        except OSError:
            return False
        return stamp == self.build_id

    def missing(self, *names: str, root: Path | None = None) -> list[Path]:
        """Those of binaries ``names`` (default: every one built) that are not there; the
        stamp too, when it does not name this build."""
        wanted = names or self.binaries
        absent = [path for path in (self.binary(n, root) for n in wanted) if not path.is_file()]
        if not self.stamped(root):
            absent.append(self.bin_dir(root) / BUILD_STAMP)
        return absent

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


def version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def record_text(record: dict[str, Any], key: str, where: str = KUBERNETES_BUILD_FILE) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise InputError(f"{where}: {key} must be a non-empty string")
    return value


def record_binaries(record: Any, where: str) -> tuple[str, ...]:
    """The record's ``binaries``, after checking it is a mapping with a list of names."""
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a mapping")
    binaries = record.get("binaries")
    if not isinstance(binaries, list) or not all(isinstance(b, str) for b in binaries):
        raise InputError(f"{where}: binaries must be a list of names")
    return tuple(binaries)


def parse_kubernetes_build(
    record: Any, repo: Path = REPO_ROOT, where: str = KUBERNETES_BUILD_FILE
) -> KubernetesBuild:
    """Read a build record's mapping (``kubernetes-build.yml``; the harness's control
    plane has one of the same shape, ``where``); the release and the module's hash are read
    from the module in ``repo``."""
    binaries = record_binaries(record, where)
    module = record_text(record, "module", where)
    directory = repo / module
    try:
        go_mod = (directory / "go.mod").read_text("utf-8")
    except OSError as err:
        raise InputError(
            f"{where}: module {module!r}: no go.mod at {directory} ({err}): "
            "the build's identity hashes the module, so run from a checkout of the repository"
        ) from err
    version = required_version(go_mod)
    if version is None:
        raise InputError(
            f"{directory / 'go.mod'} requires no {KUBERNETES_MODULE}: pin a release with "
            f"`python3 {PIN_SCRIPT} v1.MINOR.PATCH --module-dir {module}`"
        )
    _check_mains(directory, binaries, where)
    return KubernetesBuild(
        module=module,
        version=version,
        binaries=binaries,
        module_sha256=module_sha256(directory),
        mains=_module_path(go_mod, directory / "go.mod"),
    )


def _check_mains(directory: Path, binaries: tuple[str, ...], where: str) -> None:
    for name in binaries:
        if not (directory / GO_MAINS / name).is_dir():
            raise InputError(
                f"{where}: binary {name!r} has no main at "
                f"{directory / GO_MAINS / name}: add cmd/{name}/main.go or drop the name"
            )


def supported_minors(record: Any, repo: Path = REPO_ROOT) -> tuple[str, ...]:
    """The older minors with a module under the build's ``minors/`` (``("1.35", "1.36")``),
    oldest first."""
    directory = repo / record_text(record, "module") / GO_MINORS
    found = [p.parent.name for p in directory.glob("*/go.mod") if _MINOR.match(p.parent.name)]
    return tuple(sorted(found, key=version_key))


def parse_minor_build(
    record: Any, minor: str, repo: Path = REPO_ROOT, where: str = KUBERNETES_BUILD_FILE
) -> KubernetesBuild:
    """The build of ``minor`` (``"1.35"``) from a build record's mapping: its
    ``minor_binaries``, compiled in the module's ``minors/<minor>``; the release is the one
    that module replaces ``k8s.io/kubernetes`` with, and the build ID hashes both modules."""
    main = parse_kubernetes_build(record, repo, where)
    binaries = record_binaries({"binaries": record.get("minor_binaries")}, where)
    _check_mains(main.directory(repo), binaries, where)
    module = f"{main.module}/{GO_MINORS}/{minor}"
    directory = repo / module
    try:
        go_mod = (directory / "go.mod").read_text("utf-8")
    except OSError as err:
        have = ", ".join(supported_minors(record, repo)) or "none"
        raise InputError(
            f"Kubernetes {minor}: no module at {directory} ({err.strerror}); the minors with "
            f"one: {have}"
        ) from err
    version = pinned_version(go_mod)
    if version is None or not version.startswith(f"v{minor}."):
        raise InputError(
            f"{directory / 'go.mod'} pins {KUBERNETES_MODULE} {version}, not a {minor} "
            f"release: run `python3 {PIN_SCRIPT} v{minor}.PATCH "
            f"--as-released --module-dir {module}`"
        )
    both = f"{main.module_sha256}\n{module_sha256(directory)}\n"
    return KubernetesBuild(
        module=module,
        version=version,
        binaries=binaries,
        module_sha256=hashlib.sha256(both.encode()).hexdigest(),
        mains=main.mains,
    )


def _build_record() -> Any:
    text = resources.files("layersched").joinpath(KUBERNETES_BUILD_FILE).read_text("utf-8")
    return yaml.safe_load(text)


@cache
def scheduler_build(minor: str | None = None) -> KubernetesBuild:
    """layersched's kube-scheduler build in this checkout (its release is the one
    layersched supports and deploys by default); with ``minor`` (``"1.35"``), that older
    minor's (the release's images)."""
    if minor is None:
        return parse_kubernetes_build(_build_record())
    return parse_minor_build(_build_record(), minor)


def supported_scheduler_minors() -> tuple[str, ...]:
    """The older minors layersched's module has a module for (``("1.35", "1.36")``)."""
    return supported_minors(_build_record())


def scheduler_minor_builds() -> tuple[KubernetesBuild, ...]:
    """The kube-scheduler build of every older minor with a module, oldest first."""
    return tuple(scheduler_build(minor) for minor in supported_scheduler_minors())
