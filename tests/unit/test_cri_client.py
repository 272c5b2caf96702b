"""The CRI client against an in-process gRPC server: conversions and error messages."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from layersched.core.errors import CRIError
from layersched.cri import CRIClient, CRIImage, normalize_endpoint
from layersched.cri._gen import api_pb2

IMAGE_SERVICE = "runtime.v1.ImageService"
RUNTIME_SERVICE = "runtime.v1.RuntimeService"
# Deadline for calls the fake answers at once; generous for a loaded CI box.
CALL_TIMEOUT_S = 5.0
# Deadline for the call that must time out: the handler never answers within it.
SHORT_TIMEOUT_S = 0.2
# Upper bound on the hanging handler, so a broken deadline cannot hang the suite.
HANG_LIMIT_S = 10.0


def _abort(code: grpc.StatusCode, details: str) -> Callable[[Any, grpc.ServicerContext], Any]:
    def handler(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, details)

    return handler


def _hang(request: Any, context: grpc.ServicerContext) -> Any:
    # Answer only once the client has given up (its deadline ends the RPC).
    done = threading.Event()
    context.add_callback(done.set)
    done.wait(HANG_LIMIT_S)
    return api_pb2.RemoveImageResponse()


def _list_images(request: Any, context: grpc.ServicerContext) -> Any:
    return api_pb2.ListImagesResponse(
        images=[
            api_pb2.Image(
                id="sha256:" + "1" * 64,
                repo_tags=["r/a:1"],
                repo_digests=["r/a@sha256:" + "a" * 64],
                size=1234,
                spec=api_pb2.ImageSpec(image="r/a:1", annotations={"k": "v"}),
                pinned=True,
            )
        ]
    )


def _image_status(request: Any, context: grpc.ServicerContext) -> Any:
    # an image the runtime lacks: 'image' stays unset
    return api_pb2.ImageStatusResponse(info={"ignored": "because no image"})


@pytest.fixture
def fake_cri(tmp_path: Path) -> Iterator[str]:
    """A CRI server in this process on a unix socket; returns its endpoint."""
    handlers = {
        IMAGE_SERVICE: {
            "ListImages": (_list_images, api_pb2.ListImagesRequest),
            "ImageStatus": (_image_status, api_pb2.ImageStatusRequest),
            "PullImage": (
                _abort(grpc.StatusCode.UNKNOWN, "failed to resolve reference"),
                api_pb2.PullImageRequest,
            ),
            "RemoveImage": (_hang, api_pb2.RemoveImageRequest),
        },
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    for service, methods in handlers.items():
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    service,
                    {
                        name: grpc.unary_unary_rpc_method_handler(
                            fn,
                            request_deserializer=request_type.FromString,
                            response_serializer=lambda m: m.SerializeToString(),
                        )
                        for name, (fn, request_type) in methods.items()
                    },
                ),
            )
        )
    endpoint = f"unix://{tmp_path / 'cri.sock'}"
    server.add_insecure_port(endpoint)
    server.start()
    yield endpoint
    server.stop(grace=None)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        # a bare socket path gets the unix:// scheme gRPC needs
        ("/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        # an explicit scheme is kept as is
        ("unix:///var/run/crio/crio.sock", "unix:///var/run/crio/crio.sock"),
        ("127.0.0.1:1234", "127.0.0.1:1234"),
    ],
    ids=["bare-path", "unix-url", "tcp"],
)
def test_normalize_endpoint(endpoint: str, expected: str) -> None:
    assert normalize_endpoint(endpoint) == expected


def test_list_images_converts_to_dataclasses(fake_cri: str) -> None:
    with CRIClient(fake_cri, timeout_s=CALL_TIMEOUT_S) as client:
        images = client.list_images()
    assert images == [
        CRIImage(
            id="sha256:" + "1" * 64,
            repo_tags=("r/a:1",),
            repo_digests=("r/a@sha256:" + "a" * 64,),
            size_bytes=1234,
            annotations={"k": "v"},
            pinned=True,
        )
    ]


def test_image_status_of_absent_image_is_none(fake_cri: str) -> None:
    with CRIClient(fake_cri, timeout_s=CALL_TIMEOUT_S) as client:
        status = client.image_status("r/absent:1", verbose=True)
    assert status.image is None
    assert dict(status.info) == {"ignored": "because no image"}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # the server has no RuntimeService: the runtime does not speak CRI v1
        (lambda c: c.version(), r"asking the runtime for its version .*UNIMPLEMENTED.*CRI plugin"),
        # a pull failure says what to check about the registry
        (
            lambda c: c.pull_image("r/a:1"),
            r"pulling image 'r/a:1' .*UNKNOWN: failed to resolve reference.*hosts\.toml",
        ),
        # a call that never answers hits the short deadline
        (
            lambda c: c.remove_image("r/a:1"),
            r"removing image 'r/a:1' .*DEADLINE_EXCEEDED.*no answer within 0\.2 s",
        ),
    ],
    ids=["unimplemented", "pull-failed", "deadline"],
)
def test_errors_say_what_and_how_to_fix(
    fake_cri: str, call: Callable[[CRIClient], object], message: str
) -> None:
    with (
        CRIClient(fake_cri, timeout_s=SHORT_TIMEOUT_S) as client,
        pytest.raises(CRIError, match=message),
    ):
        call(client)


def test_no_runtime_at_endpoint(tmp_path: Path) -> None:
    # nothing listens on the socket: ask whether the runtime is running there
    endpoint = f"unix://{tmp_path / 'absent.sock'}"
    with (
        CRIClient(endpoint, timeout_s=CALL_TIMEOUT_S) as client,
        pytest.raises(
            CRIError, match=r"UNAVAILABLE.*is the CRI runtime .* running and listening at unix://"
        ),
    ):
        client.list_images()
