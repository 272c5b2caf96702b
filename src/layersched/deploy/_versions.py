"""The Kubernetes versions the install is rendered for, and what each one changes.

``layersched deploy render|overlay --kubernetes-version 1.X[.Y]`` renders the install for
one minor between :data:`OLDEST_MINOR` and :data:`NEWEST_MINOR`. Per minor the generator
chooses (docs/deploy.md has the matrix):

* the ``KubeSchedulerConfiguration`` API: the newest that kube-scheduler serves
  (:func:`layersched.deploy.scheduler_api_version_for`);
* the PodDisruptionBudget API: ``policy/v1`` from 1.21 (:func:`pdb_api_version`);
* kube-scheduler's image: upstream's ``registry.k8s.io/kube-scheduler:v1.X.Y`` (or a
  mirror of it); the local testbed's is built from layersched's Go module
  (``src/kube-scheduler``) at v1.37.2, with the LayerLocality plugin;
* kube-scheduler's RBAC: upstream's bootstrap policy of that minor
  (:mod:`layersched.deploy._rbac`);
* kube-scheduler's probes: ``/healthz`` up to 1.30; ``/livez`` and ``/readyz`` from 1.31
  (:func:`scheduler_probe_paths`);
* the CRI-O agent's mounts: ``recursiveReadOnly: Enabled`` from 1.33
  (:func:`recursive_read_only`).

Pure: parsing and tables, no API access (``--kubernetes-version auto`` reads the server's
``/version`` in the CLI and hands the answer here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from layersched.core.errors import InputError

#: The minors the generator renders (all of major 1).
OLDEST_MINOR = 20
NEWEST_MINOR = 37
SUPPORTED_MINORS = tuple(range(OLDEST_MINOR, NEWEST_MINOR + 1))
#: The newest patch release of each minor we know of: the newest ``v0.<minor>.<patch>`` tag
#: of the kube-scheduler staging repository (kubernetes/kube-scheduler, read 2026-11-23;
#: 1.37's from the Go module proxy, which serves k8s.io/kube-scheduler up to v0.37.2,
#: 2026-11-25; the same tags tests/fixtures/kube_scheduler_config_fields.json was read
#: from). A version given without a patch (``1.30``) gets this one; a patch past it is no
#: release (yet) and is refused. The newest minor's is the release layersched builds and
#: runs from Go modules (``make kubernetes``: ``layersched.builds.scheduler_build().version``,
#: v1.37.2, what src/kube-scheduler/go.mod pins): a unit test holds the two equal.
NEWEST_PATCH: dict[int, int] = {
    20: 15, 21: 14, 22: 17, 23: 17, 24: 17, 25: 16, 26: 15, 27: 16, 28: 15,
    29: 15, 30: 14, 31: 14, 32: 13, 33: 13, 34: 10, 35: 7, 36: 3, 37: 2,
}  # fmt: skip
#: The minor whose kube-scheduler first serves ``/livez`` and ``/readyz`` (and lets them
#: through its authorizer unauthenticated, with ``/healthz``): 1.31's
#: cmd/kube-scheduler/app/server.go installs ``InstallLivezHandler`` and
#: ``InstallReadyzHandler`` (its readiness adds the informers' sync and the leader
#: election watchdog); 1.30's installs ``/healthz`` only.
SCHEDULER_LIVEZ_SINCE_MINOR = 31
#: The minor from which a volume mount's ``recursiveReadOnly`` is GA (KEP-3857: alpha in
#: 1.30, beta and on by default in 1.31, GA in 1.33). Before it, a ``readOnly`` hostPath
#: leaves the mounts below it writable (issue 44).
RECURSIVE_READ_ONLY_SINCE_MINOR = 33
#: policy/v1 PodDisruptionBudget is served from 1.21; 1.20 has v1beta1 only (removed in 1.25).
PDB_V1_SINCE_MINOR = 21
PDB_API_VERSION_V1BETA1 = "policy/v1beta1"
PDB_API_VERSION_V1 = "policy/v1"
#: Where upstream publishes kube-scheduler, one tag per Kubernetes release.
UPSTREAM_KUBE_SCHEDULER = "registry.k8s.io/kube-scheduler"
#: Where the release publishes layersched's kube-scheduler (upstream's with the
#: LayerLocality plugin), one multi-arch image per supported minor.
PUBLISHED_KUBE_SCHEDULER = "ghcr.io/layersched/kube-scheduler"
#: The Kubernetes release each of those images is built from: the release that minor's Go
#: module compiles (``src/kube-scheduler``'s go.mod for the newest, ``minors/1.X``'s
#: replace for the older ones; tests/unit/test_published.py holds the two equal). Installed
#: packages read it here, without the Go module.
PLUGIN_RELEASES: dict[int, str] = {35: "v1.35.4", 36: "v1.36.3", 37: "v1.37.2"}
#: What tags an image of layersched's kube-scheduler: the Kubernetes release, then
#: layersched's (k3s's convention: ``v1.37.2-layersched.0.1.0``).
PLUGIN_TAG_SEPARATOR = "-layersched."


def plugin_image_tag(minor: int, version: str) -> str:
    """The tag of layersched ``version``'s kube-scheduler for Kubernetes 1.``minor``."""
    try:
        release = PLUGIN_RELEASES[minor]
    except KeyError:
        have = ", ".join(f"1.{m}" for m in sorted(PLUGIN_RELEASES))
        raise InputError(
            f"Kubernetes 1.{minor}: layersched's kube-scheduler (the LayerLocality plugin) is "
            f"built for {have}; use the extender on this version"
        ) from None
    return f"{release}{PLUGIN_TAG_SEPARATOR}{version}"


#: kube-scheduler's health paths.
HEALTHZ_PATH = "/healthz"
LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"
#: ``--kubernetes-version auto``: read the cluster's version through the kubeconfig.
AUTO = "auto"

_VERSION = re.compile(r"^v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?(?:[-+].*)?$")


@dataclass(frozen=True, slots=True, order=True)
class KubernetesVersion:
    """A Kubernetes release of major 1 that the generator renders for."""

    minor: int
    patch: int

    @property
    def tag(self) -> str:
        """``v1.30.14``: upstream's image tag and what the objects are rendered for."""
        return f"v1.{self.minor}.{self.patch}"

    def __str__(self) -> str:
        return self.tag


def parse_kubernetes_version(text: str, what: str = "--kubernetes-version") -> KubernetesVersion:
    """``1.30``, ``1.30.4``, ``v1.30.4`` or a server's ``v1.30.4-eks-a737599`` (the suffix is
    dropped). Without a patch: :data:`NEWEST_PATCH`'s. Outside 1.20-1.37, or a patch newer
    than the newest release of its minor we know of: an InputError."""
    match = _VERSION.match(text.strip())
    if match is None:
        raise InputError(
            f"{what} {text!r} is not a Kubernetes version: write it like 1.30, 1.30.4 or v1.30.4"
            f" (or {AUTO} to read it from the cluster)"
        )
    major, minor = int(match["major"]), int(match["minor"])
    if major != 1 or minor not in SUPPORTED_MINORS:
        raise InputError(
            f"{what} {text!r}: the install is rendered for Kubernetes 1.{OLDEST_MINOR} to "
            f"1.{NEWEST_MINOR}; choose one of those"
        )
    newest = NEWEST_PATCH[minor]
    if match["patch"] is None:
        return KubernetesVersion(minor, newest)
    patch = int(match["patch"])
    if patch > newest:
        # no kube-scheduler image of that tag to pull (or a release newer than this table:
        # the newest one known renders for it, within kube-scheduler's skew)
        raise InputError(
            f"{what} {text!r}: 1.{minor}.{patch} is not a Kubernetes release: the newest "
            f"1.{minor} release we know is v1.{minor}.{newest}; pass --kubernetes-version "
            f"1.{minor} for it, or a patch from 1.{minor}.0 to 1.{minor}.{newest}"
        )
    return KubernetesVersion(minor, patch)


def pdb_api_version(kubernetes_version: str) -> str:
    """``policy/v1`` from Kubernetes 1.21 on (the only one from 1.25), else ``policy/v1beta1``."""
    version = parse_kubernetes_version(kubernetes_version, "kubernetesVersion")
    return PDB_API_VERSION_V1 if version.minor >= PDB_V1_SINCE_MINOR else PDB_API_VERSION_V1BETA1


def recursive_read_only(kubernetes_version: str) -> bool:
    """Whether a volume mount may say ``recursiveReadOnly: Enabled`` (GA from 1.33: the
    kubelet then refuses the pod if the runtime cannot make the mount read-only all the
    way down)."""
    version = parse_kubernetes_version(kubernetes_version, "kubernetesVersion")
    return version.minor >= RECURSIVE_READ_ONLY_SINCE_MINOR


def scheduler_probe_paths(kubernetes_version: str) -> tuple[str, str]:
    """kube-scheduler's (liveness, readiness) paths: ``/livez`` and ``/readyz`` where it
    serves them, else ``/healthz`` for both."""
    version = parse_kubernetes_version(kubernetes_version, "kubernetesVersion")
    if version.minor >= SCHEDULER_LIVEZ_SINCE_MINOR:
        return LIVEZ_PATH, READYZ_PATH
    return HEALTHZ_PATH, HEALTHZ_PATH
