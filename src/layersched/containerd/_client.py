"""containerd's own gRPC API, the small part the node agent reads.

Image records (``Images.List``), blobs from the content store (``Content.Read``,
``Content.Info``) and the event stream (``Events.Subscribe``), in one containerd
namespace (the CRI plugin's is ``k8s.io``). Calls are synchronous; every gRPC failure
becomes a :class:`~layersched.core.errors.CRIError` naming the call and the socket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from layersched.containerd._gen.containerd.services.content.v1 import content_pb2
from layersched.containerd._gen.containerd.services.events.v1 import events_pb2
from layersched.containerd._gen.containerd.services.images.v1 import images_pb2
from layersched.core.errors import CRIError

#: containerd's default socket (the CRI plugin listens on the same one).
DEFAULT_ADDRESS = "unix:///run/containerd/containerd.sock"
#: The namespace the CRI plugin keeps Kubernetes' images in.
CRI_NAMESPACE = "k8s.io"
#: Listing records and reading a manifest touch local metadata only.
DEFAULT_TIMEOUT_S = 10.0
#: A manifest or index is a few KiB; 4 MiB is the registry's own cap on manifests.
MAX_BLOB_BYTES = 4 * 1024 * 1024
#: The gRPC metadata key that selects the namespace (containerd's namespaces package).
NAMESPACE_HEADER = "containerd-namespace"
MAX_RECEIVE_MESSAGE_BYTES = 16 * 1024 * 1024
#: The topics that mean "an image record appeared, changed or went".
IMAGE_TOPICS_FILTER = 'topic~="/images/"'

_IMAGES = images_pb2.DESCRIPTOR.services_by_name["Images"].full_name
_CONTENT = content_pb2.DESCRIPTOR.services_by_name["Content"].full_name
_EVENTS = events_pb2.DESCRIPTOR.services_by_name["Events"].full_name

ResponseT = TypeVar("ResponseT", bound=Message)


@dataclass(frozen=True, slots=True)
class ImageRecord:
    """One image record: its name and the descriptor of its manifest or index."""

    name: str
    media_type: str
    digest: str
    size_bytes: int


def _address(address: str) -> str:
    return f"unix://{address}" if address.startswith("/") else address


class ContainerdClient:
    """Calls against one containerd socket, in one namespace."""

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        namespace: str = CRI_NAMESPACE,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.address = _address(address)
        self.namespace = namespace
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(
            self.address, options=[("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES)]
        )
        self._metadata = ((NAMESPACE_HEADER, namespace),)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> ContainerdClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _failure(self, err: grpc.RpcError, what: str) -> CRIError:
        code: Any = err.code() if hasattr(err, "code") else None
        detail = err.details() if hasattr(err, "details") else str(err)
        hint = (
            f"is containerd running and listening at {self.address}?"
            if code == grpc.StatusCode.UNAVAILABLE
            else "see containerd's log for details"
        )
        return CRIError(f"{what} at {self.address}: {detail} ({code}): {hint}")

    def _unary(
        self,
        method: str,
        request: Message,
        parse: Callable[[bytes], ResponseT],
        what: str,
    ) -> ResponseT:
        call = self._channel.unary_unary(
            method, request_serializer=lambda m: m.SerializeToString(), response_deserializer=parse
        )
        try:
            response: ResponseT = call(request, timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as err:
            raise self._failure(err, what) from None
        return response

    def list_images(self) -> list[ImageRecord]:
        """Every image record of the namespace."""
        response = self._unary(
            f"/{_IMAGES}/List",
            images_pb2.ListImagesRequest(),
            images_pb2.ListImagesResponse.FromString,
            f"listing containerd's images in namespace {self.namespace}",
        )
        return [
            ImageRecord(i.name, i.target.media_type, i.target.digest, i.target.size)
            for i in response.images
        ]

    def has_blob(self, digest: str) -> bool:
        """Whether the content store holds ``digest`` (an index's other platforms do not)."""
        call = self._channel.unary_unary(
            f"/{_CONTENT}/Info",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=content_pb2.InfoResponse.FromString,
        )
        try:
            call(
                content_pb2.InfoRequest(digest=digest),
                timeout=self.timeout_s,
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            if hasattr(err, "code") and err.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise self._failure(err, f"asking the content store for {digest}") from None
        return True

    def read_blob(self, digest: str, max_bytes: int = MAX_BLOB_BYTES) -> bytes:
        """The whole blob ``digest``; CRIError if it is absent or larger than ``max_bytes``."""
        call = self._channel.unary_stream(
            f"/{_CONTENT}/Read",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=content_pb2.ReadContentResponse.FromString,
        )
        what = f"reading {digest} from the content store"
        chunks: list[bytes] = []
        total = 0
        try:
            for chunk in call(
                content_pb2.ReadContentRequest(digest=digest),
                timeout=self.timeout_s,
                metadata=self._metadata,
            ):
                total += len(chunk.data)
                if total > max_bytes:
                    raise CRIError(f"{what}: larger than {max_bytes} bytes, not a manifest")
                chunks.append(chunk.data)
        except grpc.RpcError as err:
            raise self._failure(err, what) from None
        return b"".join(chunks)

    def events(self, filters: Sequence[str] = (IMAGE_TOPICS_FILTER,)) -> Iterator[str]:
        """The topics of containerd's events as they happen (blocks; ends with an error
        when containerd goes away). Close the client to stop it from another thread."""
        call = self._channel.unary_stream(
            f"/{_EVENTS}/Subscribe",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=events_pb2.Envelope.FromString,
        )
        stream = call(events_pb2.SubscribeRequest(filters=list(filters)))
        try:
            for envelope in stream:
                if not envelope.namespace or envelope.namespace == self.namespace:
                    yield envelope.topic
        except grpc.RpcError as err:
            if hasattr(err, "code") and err.code() == grpc.StatusCode.CANCELLED:
                return
            raise self._failure(err, "subscribing to containerd's events") from None
        finally:
            stream.cancel()  # type: ignore[no-untyped-call]
