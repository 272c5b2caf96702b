"""A stand-in Kubernetes API for the extender benchmark's live-watch case.

It serves, over HTTPS with a throwaway CA, what ``layersched extender --watch`` reads:
the Node list and the NodeLayerInventory list (paged as the real API pages), and a
watch on each that streams MODIFIED events at a steady rate while the benchmark
measures, or, with :meth:`FakeApi.play`, the events of a script as fast as the extender
takes them (the memory case: hostile objects, then their deletion). It is a load
generator, not a cluster: the real API server is exercised on the local testbed
(tests/e2e) and by ``make bench-scheduler``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import queue
import ssl
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NODES = "/api/v1/nodes"
LAYERS = "/apis/layersched.io/v1alpha1/nodelayerinventories"
PAGE = 500
#: How often a waiting watch checks whether the bench has started streaming.
STREAM_POLL_S = 0.05
#: Scripted events generated ahead of the watch (each may be 1 MiB: a few at a time).
SCRIPT_AHEAD = 4
#: How long stop() lets open connections finish before it stops the loop anyway.
STOP_TIMEOUT_S = 5.0


def _certificate(directory: Path, host: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench-api")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "api.crt", directory / "api.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


#: A scripted watch event, and what a list shows for its object once it is written.
Scripted = tuple[dict[str, Any], "dict[str, Any] | Callable[[], dict[str, Any]] | None"]


class FakeApi:
    """Serves ``objects[path]`` and streams ``updates()`` on the layers watch."""

    def __init__(
        self,
        directory: Path,
        nodes: list[dict[str, Any]],
        layers: list[dict[str, Any]],
        update: Callable[[int], dict[str, Any]] | None,
        updates_per_s: float,
        host: str = "127.0.0.1",
    ) -> None:
        self.directory, self.host = directory, host
        self.objects = {NODES: nodes, LAYERS: layers}
        #: What a list of the layers shows once scripted events were streamed: by name,
        #: the object, or how to make it again (a hostile object of 1 MiB is not kept).
        self._listed: dict[str, dict[str, Any] | Callable[[], dict[str, Any]]] = {
            layer["metadata"]["name"]: layer for layer in layers
        }
        self.update, self.updates_per_s = update, updates_per_s
        self.sent = 0
        #: Bumped by every list of the layers: a scripted watch opened before it stops
        #: taking events (its watcher re-executed and listed anew: what it would be sent
        #: now is lost on a dead connection, after the new list was taken).
        self._generation = 0
        self.streaming = threading.Event()
        #: Scripted layers events (see play) when there is no steady ``update`` stream.
        self._script: queue.Queue[Scripted | None] | None = (
            queue.Queue(maxsize=SCRIPT_AHEAD) if update is None else None
        )
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def kubeconfig(self) -> Path:
        cert, _ = self.paths
        path = self.directory / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "current-context": "bench",
                    "contexts": [{"name": "bench", "context": {"cluster": "b", "user": "u"}}],
                    "clusters": [
                        {
                            "name": "b",
                            "cluster": {
                                "server": f"https://{self.host}:{self.port}",
                                "certificate-authority": str(cert),
                            },
                        }
                    ],
                    "users": [{"name": "u", "user": {"token": "bench"}}],
                }
            )
        )
        return path

    async def _list(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if request.query.get("watch") == "true":
            return await self._watch(request, path)
        start = int(request.query.get("continue") or 0)
        page = int(request.query.get("limit") or PAGE)  # the client's limit, as the API does
        objects: list[Any] = self.objects[path]
        if path == LAYERS and self._script is not None:
            objects = list(self._listed.values())
            if start == 0:
                self._generation += 1
        items = [item() if callable(item) else item for item in objects[start : start + page]]
        meta: dict[str, Any] = {"resourceVersion": "1"}
        if start + page < len(objects):
            meta["continue"] = str(start + page)
        # the list's metadata before its items, as the API server writes them (a reader
        # skipping an object too large finds the continue token first)
        return web.json_response({"metadata": meta, "items": items})

    async def _watch(self, request: web.Request, path: str) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        timeout_s = float(request.query.get("timeoutSeconds") or 60)
        if path != LAYERS:
            await asyncio.sleep(timeout_s)
            return response
        if self._script is not None:
            return await self._play(request, response, timeout_s)
        # The extender opens this watch as soon as it has listed, which may be before the
        # bench starts streaming: wait on this very connection until it does (or the
        # watch times out), so that every measured request runs while updates flow.
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not self.streaming.is_set():
            if asyncio.get_running_loop().time() >= deadline:
                return response
            await asyncio.sleep(STREAM_POLL_S)
        period_s = 1.0 / self.updates_per_s
        assert self.update is not None
        while self.streaming.is_set():
            event = {"type": "MODIFIED", "object": self.update(self.sent)}
            await response.write(json.dumps(event).encode() + b"\n")
            self.sent += 1
            await asyncio.sleep(period_s)
        return response

    def play(self, events: Iterable[Scripted]) -> threading.Thread:
        """Stream ``events`` (watch events, generated lazily, a few ahead) on the layers
        watch. Each comes with what a list shows for its object once it is written: the
        object, how to make it again (1,000 hostile objects of 1 MiB are not kept: they
        would be gigabytes), or None (deleted); so an extender that lists again (after
        re-executing itself) sees what the watch said. Returns the producing thread (done
        once every event is queued; ``sent`` counts those written)."""
        script = self._script
        if script is None:
            raise ValueError("FakeApi.play needs a FakeApi made without an update stream")

        def produce() -> None:
            for event in events:
                script.put(event)

        thread = threading.Thread(target=produce, name="fake-api-script", daemon=True)
        thread.start()
        return thread

    async def _play(
        self, request: web.Request, response: web.StreamResponse, timeout_s: float
    ) -> web.StreamResponse:
        assert self._script is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        generation = self._generation
        while loop.time() < deadline and generation == self._generation:
            try:
                event = self._script.get_nowait()
            except queue.Empty:
                await asyncio.sleep(STREAM_POLL_S)
                continue
            if event is None:
                continue
            watched, listed = event
            name = watched["object"]["metadata"]["name"]
            # a list follows, and the event counts as sent, even if this write fails: its
            # watcher is gone, and whoever lists next sees it
            if listed is None:
                self._listed.pop(name, None)
            else:
                self._listed[name] = listed
            self.sent += 1
            try:
                await response.write(json.dumps(watched).encode() + b"\n")
            except ConnectionResetError:  # the extender re-executed itself
                break
        return response

    def start(self) -> None:
        self.paths = _certificate(self.directory, self.host)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*self.paths)
        app = web.Application()
        app.router.add_get(NODES, self._list)
        app.router.add_get(LAYERS, self._list)
        runner = self._runner = web.AppRunner(app, access_log=None)
        self._thread.start()

        async def serve() -> int:
            await runner.setup()
            site = web.TCPSite(
                runner, self.host, 0, ssl_context=context, shutdown_timeout=STOP_TIMEOUT_S / 2
            )
            await site.start()
            server = site._server
            assert server is not None
            return int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]

        self.port = asyncio.run_coroutine_threadsafe(serve(), self._loop).result(timeout=30)

    def stop(self) -> None:
        self.streaming.clear()
        # close the connections and their handlers first: stopping the loop under them
        # leaves tasks pending, which asyncio reports at exit
        if self._runner is not None and self._thread.is_alive():
            done = asyncio.run_coroutine_threadsafe(_shutdown(self._runner), self._loop)
            try:
                done.result(timeout=STOP_TIMEOUT_S)
            except TimeoutError:
                done.cancel()
        self._loop.call_soon_threadsafe(self._loop.stop)


async def _shutdown(runner: web.AppRunner) -> None:
    """Close the server, then cancel and finish the handlers still running (a watch that
    streams until its deadline), so that none is left pending when the loop stops."""
    await runner.cleanup()
    running = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
