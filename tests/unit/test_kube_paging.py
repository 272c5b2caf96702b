"""List pages bounded in bytes, over real HTTP, against objects the test makes large.

The API can limit a page by objects only, and a NodeLayerInventory may hold 1 MiB: ten
1.09 MB objects are one 11 MB page, 37 MB once decoded, in an extender limited to 512
MiB (issue 23). :meth:`KubeClient.list_raw_pages` drops a page that passes its byte bound
while it arrives and asks again with fewer objects; the extender decodes one object at a
time. The API here is a stdlib HTTP server on loopback serving pre-encoded objects with
``limit``/``continue`` as the real one does.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import tracemalloc
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from layersched.core.errors import KubeError
from layersched.core.layers import Layer
from layersched.core.nodelayers import HeldImage
from layersched.extender import WatchInventoryProvider
from layersched.kube import NODE_LAYERS_PATH, NODES_PATH, KubeClient, KubeConfig
from tests.fixtures.fake_kube import RunningLoop, digest, layers, node
from tests.fixtures.serving import serving

MIB = 1024 * 1024
#: The issue's objects: 1.09 MB each (under the extender's 1.25 MiB object cap).
BIG_OBJECT_BYTES = 1_090_000
CHUNK_BYTES = 64 * 1024
IMG = HeldImage(("reg/app:1",), digest(100), (Layer(digest(1), 1000),))


def padded(name: str, size_bytes: int) -> bytes:
    """``name``'s NodeLayerInventory, padded (an annotation) to ``size_bytes`` of JSON."""
    document = layers(name, IMG)
    document["metadata"]["annotations"] = {"pad": ""}
    short = len(json.dumps(document, separators=(",", ":")))
    document["metadata"]["annotations"]["pad"] = "x" * max(0, size_bytes - short)
    return json.dumps(document, separators=(",", ":")).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Api
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if query.get("watch") == "true":  # a watch with nothing to say, until the end
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.server.closing.wait(30)
            with contextlib.suppress(OSError):
                self.wfile.write(b"0\r\n\r\n")
            return
        items = self.server.collections.get(url.path)
        if items is None:
            self.send_error(404)
            return
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or len(items))
        page = items[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": "7"}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        head = b'{"kind":"List","metadata":' + json.dumps(meta).encode() + b',"items":['
        parts = [head]
        for i, item in enumerate(page):
            parts += [b"," if i else b"", item]
        parts.append(b"]}")
        self.server.requests.append((url.path, limit, sum(len(p) for p in parts)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(sum(len(p) for p in parts)))
        self.end_headers()
        try:  # the objects as they are (no joined copy), in chunks the client may stop
            for part in parts:
                view = memoryview(part)
                for offset in range(0, len(view), CHUNK_BYTES):
                    self.wfile.write(view[offset : offset + CHUNK_BYTES])
        except OSError:
            self.server.abandoned += 1

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


class _Api(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, collections: dict[str, list[bytes]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.collections = collections
        #: (path, limit asked, bytes of the page)
        self.requests: list[tuple[str, int, int]] = []
        self.abandoned = 0
        self.closing = threading.Event()


@contextlib.contextmanager
def api(collections: dict[str, list[bytes]]) -> Iterator[_Api]:
    server = _Api(collections)
    try:
        with serving(server, "kube-api"):
            yield server
    finally:
        server.closing.set()


def client(server: _Api) -> KubeClient:
    return KubeClient(KubeConfig(server=f"http://127.0.0.1:{server.server_port}"))


def test_pages_are_bounded_in_bytes_and_every_object_arrives() -> None:
    # 10 objects of 1.09 MB among 30 small ones, pages of up to 100 objects and 4 MiB:
    # every object arrives once, in order, and no page the client took is over 4 MiB
    objects = [padded(f"n{i:02d}", BIG_OBJECT_BYTES if i % 4 == 0 else 2_000) for i in range(40)]
    with api({NODE_LAYERS_PATH: objects}) as server, client(server) as kube:
        pages = list(kube.list_raw_pages(NODE_LAYERS_PATH, 100, 4 * MIB))
    names = [json.loads(bytes(raw))["metadata"]["name"] for page, _ in pages for raw in page]
    assert names == [f"n{i:02d}" for i in range(40)]
    assert all(version == "7" for _, version in pages)
    assert max(sum(len(raw) for raw in page) for page, _ in pages) <= 4 * MIB
    # the first ask (100 objects, 11 MB) was dropped part-way and asked again, smaller
    assert server.requests[0][1] == 100
    assert server.abandoned >= 1
    assert len(server.requests) < 20


def test_one_object_over_the_bound_is_an_error_naming_it() -> None:
    objects = [padded("n1", 3 * MIB)]
    with (
        api({NODE_LAYERS_PATH: objects}) as server,
        client(server) as kube,
        pytest.raises(KubeError, match="one object is larger than 2097152 bytes"),
    ):
        list(kube.list_raw_pages(NODE_LAYERS_PATH, 100, 2 * MIB))


def test_listing_large_objects_never_holds_a_decoded_page() -> None:
    # the extender listing ten 1.09 MB objects (real HTTP, its real client): the peak
    # of Python memory while it lists stays under 20 MB (before: the 11 MB page was
    # read whole and decoded whole, 37 MB, before the first object was looked at)
    nodes = [json.dumps(node(f"n{i}")).encode() for i in range(10)]
    objects = [padded(f"n{i}", BIG_OBJECT_BYTES) for i in range(10)]
    loop = RunningLoop()
    with api({NODES_PATH: nodes, NODE_LAYERS_PATH: objects}) as server:
        config = KubeConfig(server=f"http://127.0.0.1:{server.server_port}")
        provider = WatchInventoryProvider(lambda: KubeClient(config), None)
        provider.bind_loop(loop.loop)
        tracemalloc.start()
        try:
            provider.load()
            peak_bytes = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            provider.stop()
            server.closing.set()
        held = loop.call(lambda: provider.current().node_count)  # type: ignore[union-attr]
    loop.close()
    assert held == 10
    assert peak_bytes < 20 * 10**6, peak_bytes
