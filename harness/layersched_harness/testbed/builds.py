"""The harness's builds, cached outside the repository beside the product's kube-scheduler
build (:mod:`layersched.builds`): the testbed's Kubernetes, the go command, the containerd
2.x download, the Go tools and CRI-O. None of them is part of a deployment: the testbed's
control plane and nodes, the integration tests, CI's linters and ``make crio`` use them.

``make kubernetes`` builds the testbed's Kubernetes (:func:`kubernetes_build`) from two Go
modules: etcd, kube-apiserver, kube-controller-manager, kubelet, kubectl and pause from
the harness's ``harness/control-plane`` (``control-plane-build.yml`` beside this module),
and layersched's kube-scheduler from the product's module (:func:`layersched.builds.
scheduler_build`), taken as built. Both modules pin the same release; the build ID is that
release and the hash of both modules, and the binaries are cached together under
``$LAYERSCHED_CACHE_DIR/kubernetes/<build ID>/bin``. The older minors' control planes
(``make live-minors``) are the same over each module's ``minors/<minor>``.

``make containerd`` downloads Debian's containerd 2.x binary package (never installing
it) and unpacks it under ``$LAYERSCHED_CACHE_DIR/containerd/<version>``; its identity is
``containerd-download.yml`` beside this module, read here (the testbed's nodes and the
integration tests) and by ``harness/playbooks/vars/containerd.yml`` (the role that downloads it).

``make tools`` (``go-tools.yml``) and ``make crio`` (``crio-build.yml``) build commands
from their own Go modules with ``go install PACKAGE@VERSION`` (:class:`GoTool`), cached by
version under ``$LAYERSCHED_CACHE_DIR/tools/NAME-VERSION/bin``, always with cgo off, so no
C source fetched through the module proxy is ever compiled.

:func:`find_go` picks the go command every Go build of the project runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from layersched.builds import (
    CACHE_DIR_ENV,
    PIN_SCRIPT,
    REPO_ROOT,
    KubernetesBuild,
    cache_root,
    parse_kubernetes_build,
    parse_minor_build,
    record_binaries,
    record_text,
    required_version,
    scheduler_build,
    supported_scheduler_minors,
    version_key,
)
from layersched.core.errors import InputError

#: The containerd 2.x download's data file, beside this module.
CONTAINERD_DOWNLOAD_FILE = "containerd-download.yml"
#: What downloads it.
CONTAINERD_COMMAND = "make containerd"
#: Inside a download's cache dir: the unpacked package, and the Debian version unpacked.
CONTAINERD_TREE = "root"
CONTAINERD_STAMP = ".stamp"
#: The newer toolchain of this project's machines, tried when PATH's go is too old.
FALLBACK_GO = Path("/usr/local/go/bin/go")


def _go_version(go: str) -> str:
    try:
        done = subprocess.run(
            [go, "env", "GOVERSION"],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "GOTOOLCHAIN": "local"},
        )
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def find_go(needed: str) -> tuple[str, str]:
    """A go command at least as new as ``needed`` (a go.mod's go line), and its version:
    PATH's, else :data:`FALLBACK_GO`; an InputError naming what was found otherwise."""
    tried = []
    for candidate in (shutil.which("go"), str(FALLBACK_GO)):
        if not candidate or not Path(candidate).is_file():
            continue
        version = _go_version(candidate)
        tried.append(f"{candidate} ({version or 'no answer'})")
        if version and version_key(version) >= version_key(needed):
            return candidate, version
    raise InputError(
        f"the Kubernetes build needs Go {needed} or later; found {', '.join(tried) or 'no go'}:"
        f" install Go {needed}+ (this project's machines have it at {FALLBACK_GO})"
    )


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
    binaries = record_binaries(record, CONTAINERD_DOWNLOAD_FILE)
    if "containerd" not in binaries:
        raise InputError(f"{CONTAINERD_DOWNLOAD_FILE}: binaries must name containerd")
    fields = {
        key: record_text(record, key, CONTAINERD_DOWNLOAD_FILE)
        for key in ("package", "version", "suite", "archive_codename")
    }
    return ContainerdDownload(binaries=binaries, **fields)


@cache
def containerd_download() -> ContainerdDownload:
    """The containerd 2.x the integration tests run beside the system's 1.6."""
    text = resources.files(__package__).joinpath(CONTAINERD_DOWNLOAD_FILE).read_text("utf-8")
    return parse_containerd_download(yaml.safe_load(text))


#: The Go tools' data file, beside this module, and what builds them.
GO_TOOLS_FILE = "go-tools.yml"
TOOLS_COMMAND = "make tools"


@dataclass(frozen=True, slots=True)
class GoTool:
    """A command built from its Go module (``go install PACKAGE@VERSION``), cached by version."""

    name: str
    #: The main package's import path, e.g. ``helm.sh/helm/v3/cmd/helm``.
    package: str
    version: str
    #: ``-X`` flags the tool's own build stamps (its version; helm's Kubernetes version).
    ldflags: tuple[str, ...] = ()
    #: Build tags (CRI-O's exclusions of what needs C libraries this machine lacks).
    tags: tuple[str, ...] = ()
    #: What builds it (named by :meth:`require`).
    command: str = TOOLS_COMMAND
    #: A Go module of ours (relative to the repository root) whose go.mod requires the
    #: tool's module at ``version``: the package is built there with ``go build`` rather
    #: than ``go install PACKAGE@VERSION`` (which reads the module's version list, and
    #: the proxy refuses CRI-O's). Empty: ``go install``.
    module: str = ""

    def bin_dir(self, root: Path | None = None) -> Path:
        """``<cache root>/tools/<name>-<version>/bin``: ``go install``'s GOBIN."""
        return (root or cache_root()) / "tools" / f"{self.name}-{self.version}" / "bin"

    def binary(self, root: Path | None = None) -> Path:
        return self.bin_dir(root) / self.name

    def require(self, root: Path | None = None) -> Path:
        """The binary, once built; else an InputError saying how to build it."""
        path = self.binary(root)
        if not path.is_file():
            raise InputError(
                f"{self.name} {self.version} is not built ({path} missing): run "
                f"`{self.command}` (go install {self.package}@{self.version}; {CACHE_DIR_ENV} "
                "moves the cache)"
            )
        return path


def _strings(fields: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = fields.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InputError(f"{where}: {key} must be a list of strings")
    return tuple(value)


def parse_go_tools(
    record: Any, file: str = GO_TOOLS_FILE, command: str = TOOLS_COMMAND
) -> dict[str, GoTool]:
    """``go-tools.yml`` (or ``crio-build.yml``, built by ``command``): ``NAME: {package,
    version, ldflags, tags}`` per tool."""
    if not isinstance(record, dict) or not record:
        raise InputError(f"{file}: expected a mapping NAME: {{package, version}}")
    tools = {}
    for name, fields in record.items():
        if not isinstance(fields, dict):
            raise InputError(f"{file}: {name}: expected package and version")
        where = f"{file}: {name}"
        tools[str(name)] = GoTool(
            str(name),
            record_text(fields, "package", where),
            record_text(fields, "version", where),
            _strings(fields, "ldflags", where),
            _strings(fields, "tags", where),
            command,
            str(fields.get("module") or ""),
        )
    return tools


def _package_record(file: str) -> Any:
    return yaml.safe_load(resources.files(__package__).joinpath(file).read_text("utf-8"))


@cache
def go_tools() -> dict[str, GoTool]:
    """The Go tools of ``go-tools.yml`` (package data)."""
    return parse_go_tools(_package_record(GO_TOOLS_FILE))


def go_tool(name: str) -> GoTool:
    """One tool of ``go-tools.yml`` by name (``helm``, ``actionlint``)."""
    return go_tools()[name]


#: CRI-O's build, beside this module, and what builds it (not CI: the live CRI-O tests
#: and the testbed's CRI-O nodes need it).
CRIO_BUILD_FILE = "crio-build.yml"
CRIO_COMMAND = "make crio"
CRIO = "crio"
CRIO_MODULE = "github.com/cri-o/cri-o"


@cache
def crio_build() -> GoTool:
    """CRI-O as ``crio-build.yml`` pins it: the release, the package, the build tags and
    the module it is built in, whose go.mod must require that release."""
    tools = parse_go_tools(_package_record(CRIO_BUILD_FILE), CRIO_BUILD_FILE, CRIO_COMMAND)
    if CRIO not in tools:
        raise InputError(f"{CRIO_BUILD_FILE}: expected a {CRIO} entry")
    crio = tools[CRIO]
    if crio.module:
        go_mod = REPO_ROOT / crio.module / "go.mod"
        try:
            required = required_version(go_mod.read_text("utf-8"), CRIO_MODULE)
        except OSError as err:
            raise InputError(f"{CRIO_BUILD_FILE}: module {crio.module}: {err.strerror}") from err
        if required != crio.version:
            raise InputError(
                f"{go_mod} requires {CRIO_MODULE} {required}, {CRIO_BUILD_FILE} says "
                f"{crio.version}: make them agree (go get {CRIO_MODULE}@{crio.version} && "
                "go mod tidy in that module)"
            )
    return crio


#: The testbed's control plane, beside this module: its Go module and binaries.
CONTROL_PLANE_BUILD_FILE = "control-plane-build.yml"


def join_builds(scheduler: KubernetesBuild, control_plane: KubernetesBuild) -> KubernetesBuild:
    """One build of both: ``control_plane``'s binaries compiled in its module and
    ``scheduler``'s taken as built (:attr:`KubernetesBuild.includes`), in one bin dir under
    a build ID over both modules; an InputError when the two pin different releases."""
    if control_plane.version != scheduler.version:
        raise InputError(
            f"{control_plane.module}/go.mod pins Kubernetes {control_plane.version} but "
            f"{scheduler.module} pins {scheduler.version}: the testbed runs one release; "
            f"re-pin with `python3 {PIN_SCRIPT} {scheduler.version} --module-dir "
            f"{control_plane.module}`"
            + (" --as-released" if "/minors/" in scheduler.module else "")
        )
    both = f"{scheduler.module_sha256}\n{control_plane.module_sha256}\n"
    return KubernetesBuild(
        module=control_plane.module,
        version=scheduler.version,
        binaries=tuple(sorted((*control_plane.binaries, *scheduler.binaries))),
        module_sha256=hashlib.sha256(both.encode()).hexdigest(),
        mains=control_plane.mains,
        includes=scheduler,
    )


@cache
def kubernetes_build(minor: str | None = None) -> KubernetesBuild:
    """The testbed's Kubernetes in this checkout (``make kubernetes``); with ``minor``
    (``"1.35"``), that older minor's live control plane (``make live-minors``)."""
    record = _package_record(CONTROL_PLANE_BUILD_FILE)
    if minor is None:
        control_plane = parse_kubernetes_build(record, where=CONTROL_PLANE_BUILD_FILE)
    else:
        control_plane = parse_minor_build(record, minor, where=CONTROL_PLANE_BUILD_FILE)
    return join_builds(scheduler_build(minor), control_plane)


def minor_builds() -> tuple[KubernetesBuild, ...]:
    """The testbed build of every older minor layersched's module supports, oldest first."""
    return tuple(kubernetes_build(minor) for minor in supported_scheduler_minors())
