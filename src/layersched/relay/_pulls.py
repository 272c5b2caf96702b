"""Pull telemetry: every ``PullImage`` the relay forwards counted by result and timed, and
with ``--log-pulls`` one line per pull on the ``layersched.relay.pulls`` logger (image,
node, result, duration, and the size the runtime reports for it afterwards).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from layersched.cri._gen import api_pb2
from layersched.relay._methods import Method
from layersched.relay._metrics import RelayMetrics

_pull_log = logging.getLogger("layersched.relay.pulls")

#: Deadline for the ImageStatus call that finds a pulled image's size for the pull log.
PULL_LOG_STATUS_TIMEOUT_S = 10.0


class PullTelemetry:
    """A relay's pulls: ``metrics``, and the pull log when ``log_pulls`` (``channel``: the
    relay's channel to the runtime, None while it is not started)."""

    def __init__(
        self,
        metrics: RelayMetrics,
        log_pulls: bool,
        node_name: str,
        channel: Callable[[], grpc.aio.Channel | None],
    ) -> None:
        self.metrics = metrics
        self.log_pulls = log_pulls
        self.node_name = node_name
        self._channel = channel
        #: The pull log's size look-ups under way (cancelled when the relay stops).
        self.background: set[asyncio.Task[None]] = set()

    def cancel(self) -> None:
        """Cancel the size look-ups under way."""
        for task in list(self.background):
            task.cancel()

    def pulled(
        self,
        method: Method,
        request: bytes,
        response: bytes,
        code: grpc.StatusCode,
        duration_s: float,
    ) -> None:
        """Count and time a finished PullImage; with ``log_pulls``, log it (its size read
        back from the runtime in the background)."""
        result = "ok" if code == grpc.StatusCode.OK else "error"
        self.metrics.pull_duration_s.labels(result).observe(duration_s)
        self.metrics.pulls.labels(code.name.lower()).inc()
        if not self.log_pulls:
            return
        try:
            image = api_pb2.PullImageRequest.FromString(request).image.image
            image_ref = api_pb2.PullImageResponse.FromString(response).image_ref if response else ""
        except DecodeError:
            image, image_ref = "?", ""
        task = asyncio.get_running_loop().create_task(
            self._log_pull(method, image, image_ref, code, duration_s)
        )
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _log_pull(
        self, method: Method, image: str, image_ref: str, code: grpc.StatusCode, duration_s: float
    ) -> None:
        size = "-"
        channel = self._channel()
        if image_ref and channel is not None:
            status_rpc = channel.unary_unary(
                f"/{method.package}.{method.service}/ImageStatus",
                request_serializer=api_pb2.ImageStatusRequest.SerializeToString,
                response_deserializer=api_pb2.ImageStatusResponse.FromString,
            )
            try:
                status = await status_rpc(
                    api_pb2.ImageStatusRequest(image=api_pb2.ImageSpec(image=image_ref)),
                    timeout=PULL_LOG_STATUS_TIMEOUT_S,
                )
                if status.HasField("image"):
                    size = str(status.image.size)
            except grpc.aio.AioRpcError:
                size = "?"
        _pull_log.info(
            "pull image=%s node=%s result=%s duration_s=%.3f size_bytes=%s image_ref=%s",
            image,
            self.node_name or "-",
            code.name.lower(),
            duration_s,
            size,
            image_ref or "-",
        )
