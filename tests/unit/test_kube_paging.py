"""List pages bounded in bytes, over real HTTP, against objects the test makes large.

The API can limit a page by objects only, and a NodeLayerInventory may hold 1 MiB: ten
1.09 MB objects are one 11 MB page, 37 MB once decoded, in an extender limited to 512
MiB (issue 23). :meth:`KubeClient.list_raw_pages` drops a page that passes its byte bound
while it arrives and asks again with fewer objects; the extender decodes one object at a
time. The API here is a stdlib HTTP server on loopback serving pre-encoded objects with
``limit``/``continue`` as the real one does, and watch streams of scripted lines.

Issue 30: one Node of 650,000 empty ``status.images`` entries (1.24 MiB of the protobuf a
kubelet writes, 9.75 MB of JSON) made every list of the extender fail for good (the page
halved to one object, then "one object is larger than ..." was raised and retried for
ever), and each watch event of it was parsed whole (~200 MiB of peak memory). Now such an
object is skipped while it arrives, counted, and the list or watch carries on.
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

import msgspec
import pytest
import tenacity

from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage
from layersched.extender import WatchLayerIndexProvider
from layersched.extender.watch._parse import MAX_OBJECT_BYTES
from layersched.kube import NODE_LAYERS_PATH, NODES_PATH, KubeClient, KubeConfig, Oversize
from layersched.kube._stream import skipped_page
from tests.fixtures.fake_kube import RunningLoop, digest, layers, metric, node
from tests.fixtures.serving import serving

MIB = 1024 * 1024
#: The issue's objects: 1.09 MB each (under the extender's 1.25 MiB object cap).
BIG_OBJECT_BYTES = 1_090_000
CHUNK_BYTES = 64 * 1024
IMG = NodeImage.held(("reg/app:1",), digest(100), (Layer(digest(1), 1000),))
#: The issue's hostile Node: 650,000 empty status images, as the API server writes them
#: in JSON (``names`` has no omitempty: 15 bytes each), 9.75 MB.
HOSTILE_IMAGES = 650_000
#: Python memory a list or watch may peak at while it meets the hostile Node: the 4 MiB
#: page bound (a bytearray that grows by doubling) and the honest objects.
HOSTILE_PEAK_BYTES = 20 * 10**6
CONVERGE_TIMEOUT_S = 30.0


def hostile_node(name: str, version: str = "5") -> bytes:
    """A Node that is small in etcd and huge in JSON (issue 30)."""
    head = {"metadata": {"name": name, "resourceVersion": version}, "status": {}}
    text = json.dumps(head, separators=(",", ":")).encode()
    images = b",".join([b'{"names":null}'] * HOSTILE_IMAGES)
    return text[:-2] + b'"images":[' + images + b"]}}"


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
        if query.get("watch") == "true":  # the scripted events, then nothing until the end
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            with contextlib.suppress(OSError):
                while not self.server.closing.is_set():
                    for line in self.server.take_events(url.path):
                        for offset in range(0, len(line), CHUNK_BYTES):
                            self._chunk(line[offset : offset + CHUNK_BYTES])
                        self._chunk(b"\n")
                    self.server.closing.wait(0.05)
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

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

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
        #: watch event lines to stream, by collection (each sent once)
        self.events: dict[str, list[bytes]] = {}
        self._lock = threading.Lock()

    def put_events(self, path: str, lines: list[bytes]) -> None:
        with self._lock:
            self.events.setdefault(path, []).extend(lines)

    def take_events(self, path: str) -> list[bytes]:
        with self._lock:
            return self.events.pop(path, [])


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
    raws = [[raw for raw in page if isinstance(raw, msgspec.Raw)] for page, _ in pages]
    assert sum(map(len, raws)) == sum(len(page) for page, _ in pages)  # none skipped
    names = [json.loads(bytes(raw))["metadata"]["name"] for page in raws for raw in page]
    assert names == [f"n{i:02d}" for i in range(40)]
    assert all(version == "7" for _, version in pages)
    assert max(sum(len(raw) for raw in page) for page in raws) <= 4 * MIB
    # the first ask (100 objects, 11 MB) was dropped part-way and asked again, smaller
    assert server.requests[0][1] == 100
    assert server.abandoned >= 1
    assert len(server.requests) < 20


def test_one_object_over_the_bound_is_skipped_and_the_list_carries_on() -> None:
    # before: "one object is larger than 2097152 bytes" was raised, and the caller's
    # retries met it again for ever; now it comes as an Oversize naming it
    objects = [padded("n0", 2_000), padded("n1", 3 * MIB), padded("n2", 2_000)]
    with api({NODE_LAYERS_PATH: objects}) as server, client(server) as kube:
        pages = list(kube.list_raw_pages(NODE_LAYERS_PATH, 100, 2 * MIB))
    listed = [
        f"skipped {raw.name}"
        if isinstance(raw, Oversize)
        else json.loads(bytes(raw))["metadata"]["name"]
        for page, _ in pages
        for raw in page
    ]
    assert listed == ["n0", "skipped n1", "n2"]
    assert all(version == "7" for _, version in pages)


def test_listing_large_objects_never_holds_a_decoded_page() -> None:
    # the extender listing ten 1.09 MB objects (real HTTP, its real client): the peak
    # of Python memory while it lists stays under 20 MB (before: the 11 MB page was
    # read whole and decoded whole, 37 MB, before the first object was looked at)
    nodes = [json.dumps(node(f"n{i}")).encode() for i in range(10)]
    objects = [padded(f"n{i}", BIG_OBJECT_BYTES) for i in range(10)]
    loop = RunningLoop()
    with api({NODES_PATH: nodes, NODE_LAYERS_PATH: objects}) as server:
        config = KubeConfig(server=f"http://127.0.0.1:{server.server_port}")
        provider = WatchLayerIndexProvider(lambda: KubeClient(config), None)
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


def _converged(check: Any) -> None:
    for attempt in tenacity.Retrying(
        stop=tenacity.stop_after_delay(CONVERGE_TIMEOUT_S),
        wait=tenacity.wait_fixed(0.05),
        reraise=True,
    ):
        with attempt:
            check()


TOO_LARGE_NODES = {"resource": "nodes", "reason": "too_large"}


def test_a_hostile_node_neither_stops_the_list_nor_the_watch() -> None:
    # The extender lists 20 honest Nodes and the hostile one (9.75 MB of JSON) through
    # its real client over HTTP. Before: load() never returned (the list failed for
    # ever). Now: it returns, the honest nodes hold their images, the hostile node is a
    # candidate without images and is counted; then a watch streams the hostile node
    # again (MODIFIED) between two honest events: it is skipped as it arrives (before:
    # parsed whole, ~200 MiB), and the honest events after it are applied.
    honest = [
        json.dumps(node(f"n{i:02d}", (f"reg/app-{i}:1", 50_000_000))).encode() for i in range(20)
    ]
    collections = {NODES_PATH: [*honest[:10], hostile_node("evil"), *honest[10:]]}
    collections[NODE_LAYERS_PATH] = []
    hostile_event = b'{"type":"MODIFIED","object":' + hostile_node("evil", "8") + b"}"
    loop = RunningLoop()
    with api(collections) as server:
        config = KubeConfig(server=f"http://127.0.0.1:{server.server_port}")
        provider = WatchLayerIndexProvider(lambda: KubeClient(config), None)
        provider.bind_loop(loop.loop)
        tracemalloc.start()
        try:
            loading = threading.Thread(target=provider.load, daemon=True)
            loading.start()
            loading.join(CONVERGE_TIMEOUT_S)
            assert not loading.is_alive(), "the extender never finished listing Nodes"
            list_peak_bytes = tracemalloc.get_traced_memory()[1]
            names = loop.call(lambda: [n.name for n in provider.current().nodes])  # type: ignore[union-attr]
            assert sorted(names) == sorted([*(f"n{i:02d}" for i in range(20)), "evil"])
            assert loop.call(lambda: provider.held_images("evil")) == []
            assert loop.call(lambda: provider.held_images("n03")) == ["reg/app-3:1"]
            assert (
                metric(
                    provider, "layersched_extender_watch_ignored_objects_total", **TOO_LARGE_NODES
                )
                == 1
            )
            assert provider.ready()[0]
            # the watch: the hostile node again, between two honest changes
            before = json.loads(honest[1])
            before["status"]["images"] = [{"names": ["reg/new-1:1"], "sizeBytes": 1}]
            after = json.loads(honest[2])
            after["status"]["images"] = [{"names": ["reg/new-2:1"], "sizeBytes": 1}]
            lines = [
                json.dumps({"type": "MODIFIED", "object": before}).encode(),
                hostile_event,
                json.dumps({"type": "MODIFIED", "object": after}).encode(),
            ]
            tracemalloc.reset_peak()
            server.put_events(NODES_PATH, lines)

            def applied() -> None:
                assert loop.call(lambda: provider.held_images("n02")) == ["reg/new-2:1"]

            _converged(applied)
            watch_peak_bytes = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            provider.stop()
            server.closing.set()
        assert loop.call(lambda: provider.held_images("n01")) == ["reg/new-1:1"]
        assert loop.call(lambda: provider.held_images("evil")) == []
        count = metric(
            provider, "layersched_extender_watch_ignored_objects_total", **TOO_LARGE_NODES
        )
        assert count == 2
    loop.close()
    assert list_peak_bytes < HOSTILE_PEAK_BYTES, list_peak_bytes
    assert watch_peak_bytes < HOSTILE_PEAK_BYTES, watch_peak_bytes
    # the cap the extender skips at is well under the hostile object
    assert len(hostile_node("evil")) // 4 > MAX_OBJECT_BYTES


@pytest.mark.parametrize(
    "head",
    [
        # the API server's compact JSON
        b'{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7",'
        b'"continue":"c1"},"items":[{"metadata":{"name":"n1","uid":"u"',
        # json.dumps' default separators (a stand-in API's)
        b'{"metadata": {"resourceVersion": "7", "continue": "c1"}, "items": [{"metadata": '
        b'{"name": "n1", "uid": "u"',
    ],
    ids=["compact", "spaced"],
)
def test_a_skipped_pages_head_gives_the_continue_token_and_the_name(head: bytes) -> None:
    assert skipped_page(head, "listing", 1) == ("7", "c1", "n1")
