"""CRI method names as the relay sees them on the wire.

A gRPC method arrives as ``/<package>.<Service>/<Method>``. The relay knows the
two CRI packages kubelets speak (``runtime.v1alpha2`` up to Kubernetes 1.25,
``runtime.v1`` from 1.23), their two services and the shape of each call; any
other path is still forwarded, as a bidirectional stream of raw messages.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: The CRI protobuf packages. Their messages share field numbers (v1 was cut
#: from v1alpha2 unchanged), so one set of message types parses both.
CRI_PACKAGES = ("runtime.v1alpha2", "runtime.v1")
RUNTIME_SERVICE = "RuntimeService"
IMAGE_SERVICE = "ImageService"
#: The label value standing for any method outside :data:`KNOWN_METHODS`, so
#: that a client sending made-up method names cannot grow the metrics.
OTHER_METHOD = "other"


class Cardinality(enum.Enum):
    """How many messages each side sends."""

    UNARY = "unary"
    #: One request, a stream of responses (``GetContainerEvents``).
    SERVER_STREAM = "server-stream"
    #: Unknown to the relay: forwarded message by message in both directions.
    STREAM = "stream"


#: Every RuntimeService/ImageService method of v1alpha2 and v1 (up to
#: Kubernetes 1.31), all unary except ``GetContainerEvents``.
_RUNTIME_METHODS = (
    "Version", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "PodSandboxStatus",
    "ListPodSandbox", "CreateContainer", "StartContainer", "StopContainer", "RemoveContainer",
    "ListContainers", "ContainerStatus", "UpdateContainerResources", "ReopenContainerLog",
    "ExecSync", "Exec", "Attach", "PortForward", "ContainerStats", "ListContainerStats",
    "PodSandboxStats", "ListPodSandboxStats", "UpdateRuntimeConfig", "Status",
    "CheckpointContainer", "GetContainerEvents", "ListMetricDescriptors",
    "ListPodSandboxMetrics", "RuntimeConfig",
)  # fmt: skip
_IMAGE_METHODS = ("ListImages", "ImageStatus", "PullImage", "RemoveImage", "ImageFsInfo")
_SERVER_STREAMING = frozenset({"GetContainerEvents"})

#: ``Service/Method`` for every method the relay knows (bounded metric labels).
KNOWN_METHODS = frozenset(
    [f"{RUNTIME_SERVICE}/{name}" for name in _RUNTIME_METHODS]
    + [f"{IMAGE_SERVICE}/{name}" for name in _IMAGE_METHODS]
)


@dataclass(frozen=True, slots=True)
class Method:
    """One gRPC method path split into its parts."""

    #: The full path as sent, ``/runtime.v1alpha2.ImageService/PullImage``.
    path: str
    #: ``runtime.v1alpha2`` or ``runtime.v1``; empty for a non-CRI path.
    package: str
    #: ``ImageService``, ``RuntimeService`` or whatever the path names.
    service: str
    #: ``PullImage``.
    name: str

    @property
    def known(self) -> bool:
        """Whether this is a CRI method of a CRI package the relay knows."""
        return self.package in CRI_PACKAGES and self.short in KNOWN_METHODS

    @property
    def short(self) -> str:
        """``ImageService/PullImage``: the version-independent name."""
        return f"{self.service}/{self.name}"

    @property
    def label(self) -> str:
        """The metric label: :attr:`short` for a known method, else ``other``."""
        return self.short if self.known else OTHER_METHOD

    @property
    def version(self) -> str:
        """``v1alpha2``/``v1`` for a CRI package, else ``other`` (a bounded label)."""
        return self.package.removeprefix("runtime.") if self.package in CRI_PACKAGES else "other"

    @property
    def cardinality(self) -> Cardinality:
        """How to forward the call."""
        if not self.known:
            return Cardinality.STREAM
        if self.name in _SERVER_STREAMING:
            return Cardinality.SERVER_STREAM
        return Cardinality.UNARY

    def is_image_call(self, name: str) -> bool:
        """Whether this is ``ImageService/<name>`` of a CRI package."""
        return self.known and self.service == IMAGE_SERVICE and self.name == name


def parse_method(path: str) -> Method:
    """Split ``/pkg.Service/Method``; a path of another shape keeps its text as the name."""
    qualified, _, name = path.lstrip("/").partition("/")
    package, _, service = qualified.rpartition(".")
    return Method(path=path, package=package, service=service, name=name)
