"""CRI v1 client: what a node's container runtime (containerd, CRI-O) holds.

A gRPC client for the Kubernetes Container Runtime Interface v1 image calls
(Version, ListImages, ImageStatus, PullImage, RemoveImage, ImageFsInfo), built
on layersched's own minimal ``api.proto`` (upstream package ``runtime.v1`` and
field numbers; see ``docs/cri.md``). Results are frozen dataclasses; failures
are :class:`~layersched.core.errors.CRIError`.
"""

from layersched.cri._client import (
    CRI_API_VERSION,
    DEFAULT_ENDPOINT,
    DEFAULT_PULL_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    CRIClient,
    CRIFilesystemUsage,
    CRIImage,
    CRIImageStatus,
    CRIVersion,
    normalize_endpoint,
)

__all__ = [
    "CRI_API_VERSION",
    "DEFAULT_ENDPOINT",
    "DEFAULT_PULL_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "CRIClient",
    "CRIFilesystemUsage",
    "CRIImage",
    "CRIImageStatus",
    "CRIVersion",
    "normalize_endpoint",
]
