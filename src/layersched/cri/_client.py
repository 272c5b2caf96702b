"""A small synchronous client for the CRI v1 RuntimeService/ImageService.

It speaks gRPC with the messages generated from ``api.proto`` and hands back
layersched's own frozen dataclasses, never protobuf objects. Every gRPC failure
becomes a :class:`~layersched.core.errors.CRIError` that says which call failed,
against which endpoint, and what to check.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import grpc
from google.protobuf.message import Message

from layersched.core.errors import CRIError
from layersched.core.reference import ImageName
from layersched.cri._gen import api_pb2

#: containerd's default CRI socket (the one kubelet's ``--container-runtime-endpoint`` uses).
DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
#: Deadline for short calls (Version, ListImages, ImageStatus, RemoveImage): they
#: touch only local metadata, so seconds mean the runtime is stuck or absent.
DEFAULT_TIMEOUT_S = 10.0
#: Deadline for PullImage: the runtime downloads every missing layer inside the
#: call, which on a slow edge link takes minutes (1 GiB at 20 Mbit/s is ~7 min).
DEFAULT_PULL_TIMEOUT_S = 900.0
#: Largest response accepted. A node with hundreds of images and long
#: annotations exceeds gRPC's 4 MiB default; kubelet allows 16 MiB for the same reason.
MAX_RECEIVE_MESSAGE_BYTES = 16 * 1024 * 1024
#: The CRI API version this client speaks, sent in VersionRequest.
CRI_API_VERSION = "v1"

_RUNTIME_SERVICE = api_pb2.DESCRIPTOR.services_by_name["RuntimeService"].full_name
_IMAGE_SERVICE = api_pb2.DESCRIPTOR.services_by_name["ImageService"].full_name

ResponseT = TypeVar("ResponseT", bound=Message)

#: Read-only empty map shared as the default for annotation-like fields.
_EMPTY: Mapping[str, str] = types.MappingProxyType({})


@dataclass(frozen=True, slots=True)
class CRIVersion:
    """``VersionResponse``: who the runtime is and which CRI version it serves."""

    version: str
    runtime_name: str
    runtime_version: str
    runtime_api_version: str


@dataclass(frozen=True, slots=True)
class CRIImage:
    """One CRI ``Image``, with its size in bytes as the runtime reports it.

    ``size_bytes`` is runtime-specific: containerd reports the compressed size
    (the sum of the manifest's layers), CRI-O the unpacked size.
    ``annotations`` are ``Image.spec.annotations`` (the Ryax-patched CRI-O puts
    ``imageLayer.<digest>: "<size>"`` there).
    """

    id: str
    repo_tags: tuple[ImageName, ...]
    repo_digests: tuple[ImageName, ...]
    size_bytes: int
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False)
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class CRIImageStatus:
    """``ImageStatusResponse``: the image (None when the runtime lacks it) and,
    when asked for with ``verbose``, the runtime's extra JSON documents."""

    image: CRIImage | None
    info: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False)


@dataclass(frozen=True, slots=True)
class CRIFilesystemUsage:
    """One entry of ``ImageFsInfoResponse.image_filesystems``."""

    mountpoint: str
    used_bytes: int
    inodes_used: int


def normalize_endpoint(endpoint: str) -> str:
    """A gRPC target for ``endpoint``; a bare socket path becomes ``unix://PATH``."""
    if endpoint.startswith("/"):
        return f"unix://{endpoint}"
    return endpoint


def _image(message: api_pb2.Image) -> CRIImage:
    return CRIImage(
        id=message.id,
        repo_tags=cast("tuple[ImageName, ...]", tuple(message.repo_tags)),
        repo_digests=cast("tuple[ImageName, ...]", tuple(message.repo_digests)),
        size_bytes=message.size,
        annotations=types.MappingProxyType(dict(message.spec.annotations)),
        pinned=message.pinned,
    )


def _hint(code: grpc.StatusCode, endpoint: str, timeout_s: float) -> str:
    """How to fix a failed call, by gRPC status code."""
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"is the CRI runtime (e.g. containerd) running and listening at {endpoint}?"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return (
            f"no answer within {timeout_s:g} s: check the runtime's health, or allow "
            "more time (timeout_s, or pull_timeout_s for pulls)"
        )
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return (
            f"{endpoint} does not serve CRI v1: enable the runtime's CRI plugin "
            "(containerd: remove 'cri' from disabled_plugins) or use a runtime that speaks v1"
        )
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return f"run as a user allowed to open {endpoint} (usually root)"
    return "see the runtime's log for details"


class CRIClient:
    """CRI v1 image calls against one runtime endpoint.

    Use it as a context manager, or call :meth:`close` when done. Calls are
    synchronous and thread-safe (one gRPC channel is shared).
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        pull_timeout_s: float = DEFAULT_PULL_TIMEOUT_S,
    ) -> None:
        self.endpoint = normalize_endpoint(endpoint)
        self.timeout_s = timeout_s
        self.pull_timeout_s = pull_timeout_s
        self._channel = grpc.insecure_channel(
            self.endpoint,
            options=[("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES)],
        )

    def __enter__(self) -> CRIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the gRPC channel."""
        self._channel.close()

    # ----------------------------------------------------------------- calls
    def version(self) -> CRIVersion:
        """``RuntimeService.Version``; also a cheap readiness probe."""
        response = self._call(
            f"/{_RUNTIME_SERVICE}/Version",
            api_pb2.VersionRequest(version=CRI_API_VERSION),
            api_pb2.VersionResponse.FromString,
            "asking the runtime for its version",
        )
        return CRIVersion(
            version=response.version,
            runtime_name=response.runtime_name,
            runtime_version=response.runtime_version,
            runtime_api_version=response.runtime_api_version,
        )

    def list_pod_sandboxes(self, labels: Mapping[str, str] | None = None) -> list[str]:
        """``RuntimeService.ListPodSandbox``: ids of the sandboxes carrying every label."""
        response = self._call(
            f"/{_RUNTIME_SERVICE}/ListPodSandbox",
            api_pb2.ListPodSandboxRequest(
                filter=api_pb2.PodSandboxFilter(label_selector=dict(labels or {}))
            ),
            api_pb2.ListPodSandboxResponse.FromString,
            "listing pod sandboxes",
        )
        return [sandbox.id for sandbox in response.items]

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        """``StopPodSandbox`` then ``RemovePodSandbox``: the sandbox and its containers go."""
        self._call(
            f"/{_RUNTIME_SERVICE}/StopPodSandbox",
            api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox_id),
            api_pb2.StopPodSandboxResponse.FromString,
            f"stopping pod sandbox {sandbox_id}",
        )
        self._call(
            f"/{_RUNTIME_SERVICE}/RemovePodSandbox",
            api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id),
            api_pb2.RemovePodSandboxResponse.FromString,
            f"removing pod sandbox {sandbox_id}",
        )

    def list_images(self) -> list[CRIImage]:
        """``ImageService.ListImages`` without a filter: every image the runtime holds."""
        response = self._call(
            f"/{_IMAGE_SERVICE}/ListImages",
            api_pb2.ListImagesRequest(),
            api_pb2.ListImagesResponse.FromString,
            "listing images",
        )
        return [_image(image) for image in response.images]

    def image_status(self, ref: str, verbose: bool = False) -> CRIImageStatus:
        """``ImageService.ImageStatus`` for ``ref`` (tag, digest reference or image ID)."""
        response = self._call(
            f"/{_IMAGE_SERVICE}/ImageStatus",
            api_pb2.ImageStatusRequest(image=api_pb2.ImageSpec(image=ref), verbose=verbose),
            api_pb2.ImageStatusResponse.FromString,
            f"getting the status of image {ref!r}",
        )
        image = _image(response.image) if response.HasField("image") else None
        return CRIImageStatus(image=image, info=types.MappingProxyType(dict(response.info)))

    def pull_image(self, ref: str, annotations: Mapping[str, str] | None = None) -> str:
        """``ImageService.PullImage``: the runtime downloads ``ref``; returns its image ref.

        The deadline is ``pull_timeout_s``, not ``timeout_s``.
        """
        spec = api_pb2.ImageSpec(image=ref, annotations=dict(annotations or {}))
        response = self._call(
            f"/{_IMAGE_SERVICE}/PullImage",
            api_pb2.PullImageRequest(image=spec),
            api_pb2.PullImageResponse.FromString,
            f"pulling image {ref!r}",
            timeout_s=self.pull_timeout_s,
            hint=(
                "check the reference, that the registry is reachable from the runtime, and "
                "for a plain-HTTP registry that the runtime is told so (containerd: "
                "registry.config_path with a hosts.toml whose server is http://HOST:PORT)"
            ),
        )
        return response.image_ref

    def remove_image(self, ref: str) -> None:
        """``ImageService.RemoveImage``; removing an absent image is not an error."""
        self._call(
            f"/{_IMAGE_SERVICE}/RemoveImage",
            api_pb2.RemoveImageRequest(image=api_pb2.ImageSpec(image=ref)),
            api_pb2.RemoveImageResponse.FromString,
            f"removing image {ref!r}",
        )

    def image_fs_info(self) -> list[CRIFilesystemUsage]:
        """``ImageService.ImageFsInfo``: bytes and inodes the image store uses."""
        response = self._call(
            f"/{_IMAGE_SERVICE}/ImageFsInfo",
            api_pb2.ImageFsInfoRequest(),
            api_pb2.ImageFsInfoResponse.FromString,
            "reading image filesystem usage",
        )
        return [
            CRIFilesystemUsage(
                mountpoint=usage.fs_id.mountpoint,
                used_bytes=usage.used_bytes.value,
                inodes_used=usage.inodes_used.value,
            )
            for usage in response.image_filesystems
        ]

    # -------------------------------------------------------------- plumbing
    def _call(
        self,
        method: str,
        request: Message,
        parse: Callable[[bytes], ResponseT],
        doing: str,
        timeout_s: float | None = None,
        hint: str | None = None,
    ) -> ResponseT:
        deadline_s = self.timeout_s if timeout_s is None else timeout_s
        rpc = self._channel.unary_unary(
            method, request_serializer=_serialize, response_deserializer=parse
        )
        try:
            response: ResponseT = rpc(request, timeout=deadline_s)
        except grpc.RpcError as err:
            code = _status_code(err)
            details = _details(err)
            generic = code in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.UNIMPLEMENTED,
                grpc.StatusCode.PERMISSION_DENIED,
            )
            fix = _hint(code, self.endpoint, deadline_s) if generic or hint is None else hint
            raise CRIError(
                f"{doing} via CRI at {self.endpoint}: {code.name}: {details}: {fix}"
            ) from err
        return response


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def _status_code(err: grpc.RpcError) -> grpc.StatusCode:
    code = getattr(err, "code", None)
    value = code() if callable(code) else None
    return value if isinstance(value, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def _details(err: grpc.RpcError) -> str:
    details = getattr(err, "details", None)
    value = details() if callable(details) else None
    return str(value) if value else "no details"
